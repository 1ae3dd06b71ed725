#!/usr/bin/env bash
# The scaling check across "hosts" (docs/scaling.md): the gloo all-reduce sweep (and its ring
# fit) with NPER ranks in each of two network namespaces (bench/netns_ranks.sh). Needs root and
# iproute2; exits 77 (skipped) without them.
#   bench/scaling_netns.sh <dpx-bench> [NPER] [MAX_BYTES]
set -euo pipefail
bench="$1" nper="${2:-1}" max="${3:-67108864}"
exec bash "$(dirname "$0")/netns_ranks.sh" "$nper" 10.213.1 29611 \
  "$bench" allreduce --backend gloo --max-bytes "$max"
