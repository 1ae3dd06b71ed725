#!/usr/bin/env bash
# The mpi backend against gloo across two "hosts" (issue #43; docs/performance.md): NPER ranks in
# each of two network namespaces, `dpx-bench allreduce` over mpi (OpenMPI's TCP transport,
# started by mpirun and a launch agent: scripts/netns_mpirun.sh) and over gloo (torchrun's
# variables: bench/netns_ranks.sh), alternated ROUNDS times. Prints each run's table, then per
# size the median over rounds of gloo's time / mpi's (above 1: mpi faster).
#   bench/mpi_vs_gloo_netns.sh [BUILD_DIR] [NPER]   env: ROUNDS=3 MIN=65536 MAX=16777216
#                                                   MPIEXEC=mpirun.openmpi
# Needs root and iproute2; exits 77 (skipped) without them.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build} nper=${2:-1}
rounds=${ROUNDS:-3} min=${MIN:-65536} max=${MAX:-16777216}
mpiexec=${MPIEXEC:-mpirun.openmpi}
bench=$build/bench/dpx-bench
args=(allreduce --min-bytes "$min" --max-bytes "$max")
# "size time" lines of a dpx-bench allreduce table.
times() { awk '$1 ~ /^[0-9]+$/ && $NF == "ok" { print $1, $3 }'; }
declare -A ratios
echo "# mpi against gloo across two network-namespace hosts, $nper rank(s) each, $rounds rounds"
for r in $(seq "$rounds"); do
  mpi=$(bash scripts/netns_mpirun.sh "$nper" "$mpiexec" "$bench" "${args[@]}" --backend mpi)
  gloo=$(bash bench/netns_ranks.sh "$nper" 10.213.3 29631 "$bench" "${args[@]}" --backend gloo)
  echo "round $r, mpi:"; echo "$mpi" | grep -E '^ +[0-9]+ '
  echo "round $r, gloo:"; echo "$gloo" | grep -E '^ +[0-9]+ '
  while read -r size m g; do
    ratios[$size]+="$(awk -v g="$g" -v m="$m" 'BEGIN { printf "%.3f", g / m }') "
  done < <(join <(echo "$mpi" | times | sort -k1,1) <(echo "$gloo" | times | sort -k1,1))
done
med() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
for size in $(printf '%s\n' "${!ratios[@]}" | sort -n); do
  # shellcheck disable=SC2086
  echo "size $size: gloo time / mpi time per round: ${ratios[$size]}; median $(med ${ratios[$size]})"
done
