#!/usr/bin/env bash
# A host lost at 64 ranks: tests/scripts/cluster/lost_host.sh on 8 hosts x 8 ranks (the example,
# batch 2 per rank), host 5 lost mid-training (elastic: 7:8; fixed: 8), then host 0, the
# rendezvous's. Prints the time from the kill to training again, and to the job's end.
#   bench/cluster_lost_host.sh [BUILD] [OUT]
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
HOSTS=8 NPER=8 VICTIM=5 BATCH=2 TRAIN_LIMIT=12800 exec bash \
  "$here/tests/scripts/cluster/lost_host.sh" "$build/tools/dpxrun/dpxrun" \
  "$build/examples/fashion_mnist/fashion_mnist" "${2:-$(mktemp -d /tmp/dpx-lost-host-XXXXXX)}"
