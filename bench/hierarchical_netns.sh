#!/usr/bin/env bash
# Hierarchical all-reduce against flat gloo across two "hosts" (docs/performance.md): NPER ranks
# in each of two network namespaces (bench/netns_ranks.sh), `dpx-bench hierarchical` in every
# rank. Needs root and iproute2; exits 77 (skipped) without them.
#   bench/hierarchical_netns.sh <dpx-bench> [NPER] [dpx-bench hierarchical flags...]
set -euo pipefail
bench="$1" nper="${2:-2}"
shift $(( $# >= 2 ? 2 : 1 ))
exec bash "$(dirname "$0")/netns_ranks.sh" "$nper" 10.213.2 29621 "$bench" hierarchical "$@"
