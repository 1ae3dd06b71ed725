#!/usr/bin/env bash
# Does this machine's kernel starve a whole session's runnable threads? No dpx, no MPI: a check
# of the scheduler that two "hosts" of ranks on one machine rely on (docs/backends.md, "The
# scheduler that starves a host").
#   scripts/sched_starvation.sh [TRIALS] [SECONDS] [NAP_US]     (defaults 6 15 20)
# Each trial runs, beside a busy loop of this shell's session, two sessions (setsid, as two
# Slurm nodes' steps are) of two processes each; a process has one thread that computes and
# counts, and one that sleeps NAP_US between polls of 2 us, as dpx's MPI thread naps while a
# collective waits (NAP_US=0: it yields instead of sleeping). Each process prints how far it
# counted in every whole second it got. A process that counted less than 5% of the trial's
# median in a second, or printed for two whole seconds fewer than it ran, was starved. Prints
# one line a trial; exits 1 if any trial starved a process, 0 if none did.
# Found on Linux 6.18 (EEVDF) with kernel.sched_autogroup_enabled=1: 3 of 6 trials, then 5 of 6,
# starved one session for seconds; with NAP_US=0, 0 of 6 twice.
set -euo pipefail
trials=${1:-6} secs=${2:-15} nap=${3:-20}
for v in "$trials" "$secs" "$nap"; do
  [[ $v =~ ^[0-9]+$ ]] ||
    { echo "usage: $0 [TRIALS] [SECONDS] [NAP_US] (whole numbers)" >&2; exit 2; }
done
[ "$secs" -ge 3 ] || { echo "$0: SECONDS must be 3 or more" >&2; exit 2; }
[ "$nap" -lt 1000000 ] || { echo "$0: NAP_US must be below 1000000 (1 s)" >&2; exit 2; }
command -v cc >/dev/null || { echo "$0: needs a C compiler (apt-get install gcc)" >&2; exit 2; }
dir=$(mktemp -d /tmp/dpx-starve-XXXXXX)
hog=
cleanup() {
  if [ -n "$hog" ]; then kill "$hog" 2>/dev/null || true; fi
  pkill -f "$dir/nap" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
cat > "$dir/nap.c" <<'C'
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
static long nap_ns;
static void* poller(void* unused) {
  (void)unused;
  for (;;) {
    struct timespec nap = {0, nap_ns};
    if (nap_ns) nanosleep(&nap, NULL); else sched_yield();
    const double t = now();
    while (now() - t < 2e-6) {}
  }
  return NULL;
}
int main(int argc, char** argv) {
  nap_ns = atol(argv[1]) * 1000;
  const double secs = atof(argv[2]);
  pthread_t t;
  pthread_create(&t, NULL, poller, NULL);
  volatile unsigned long count = 0;
  unsigned long last_count = 0;
  const double start = now();
  double last = start;
  while (now() - start < secs) {
    for (int i = 0; i < 100000; ++i) count++;
    if (now() - last >= 1.0) {
      printf("%.0f %lu\n", now() - start, (count - last_count) / 1000);
      fflush(stdout);
      last_count = count;
      last = now();
    }
  }
  return 0;
}
C
cc -O2 -pthread "$dir/nap.c" -o "$dir/nap" ||
  { echo "$0: could not compile the probe (above)" >&2; exit 2; }
echo "kernel $(uname -r), sched_autogroup_enabled=$(cat /proc/sys/kernel/sched_autogroup_enabled \
  2>/dev/null || echo absent), $(nproc) cores; $trials trials of ${secs} s, naps of ${nap} us"
starved=0
for ((trial = 1; trial <= trials; trial++)); do
  sh -c 'while :; do :; done' & hog=$!
  pids=()
  for s in a b; do
    setsid sh -c "'$dir/nap' $nap $secs > '$dir/$s.1' & '$dir/nap' $nap $secs > '$dir/$s.2'; wait" &
    pids+=($!)
  done
  wait "${pids[@]}" || true
  sleep 0.5
  kill "$hog"; wait "$hog" 2>/dev/null || true; hog=
  # Whole seconds 2 .. SECONDS-1 (the first and last are cut short).
  median=$(cat "$dir"/[ab].[12] | awk -v secs="$secs" '$1 >= 2 && $1 < secs { print $2 }' |
    sort -n | awk '{ v[NR] = $1 } END { print NR ? v[int((NR + 1) / 2)] : 0 }')
  verdict=$(awk -v secs="$secs" -v median="$median" '
    $1 >= 2 && $1 < secs { n[FILENAME]++; per[FILENAME, $1] = $2 }
    END {
      worst = "";
      for (i = 1; i < ARGC; i++) {
        f = ARGV[i]
        if (n[f] < secs - 3) worst = worst " " f ": " secs - 2 - n[f] " s missing;"
      }
      low = 0; for (k in per) if (per[k] < median / 20) low++;
      printf "%s", (worst != "" || low > 0) ? "STARVED" : "fair";
      printf " (median %d k/s, %d seconds under 5%%;%s)\n", median, low, worst }
  ' "$dir"/a.1 "$dir"/a.2 "$dir"/b.1 "$dir"/b.2 | sed "s|$dir/||g")
  echo "trial $trial: $verdict"
  case $verdict in STARVED*) starved=$((starved + 1)) ;; esac
done
echo "$starved of $trials trials starved a process"
[ "$starved" = 0 ]
