#!/usr/bin/env bash
# Renders the loss and test-accuracy curves of the Fashion-MNIST example's metrics (JSON lines)
# to a PNG with gnuplot (scripts/setup.sh installs gnuplot-nox).
#   scripts/plot_metrics.sh [metrics.jsonl] [curves.png]
set -euo pipefail
metrics="${1:-fashion_mnist_metrics.jsonl}"
out="${2:-${metrics%.jsonl}.png}"
command -v gnuplot >/dev/null || { echo "plot_metrics: gnuplot not found; run scripts/setup.sh" >&2; exit 1; }
[ -s "$metrics" ] || { echo "plot_metrics: $metrics is missing or empty" >&2; exit 1; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# extract TYPE X Y -> "x y" for each record of TYPE. Where x goes back (a restart resumed from an
# earlier checkpoint, or from scratch), a blank line makes gnuplot start a new line segment.
extract() {
  awk -v type="\"type\":\"$1\"" -v a="\"$2\":" -v b="\"$3\":" '
    index($0, type) {
      i = index($0, a); j = index($0, b)
      if (i && j) {
        x = substr($0, i + length(a)); y = substr($0, j + length(b))
        if (n++ && x + 0 <= last) print ""
        last = x + 0
        print x + 0, y + 0
      }
    }' "$metrics"
}
extract train step loss >"$tmp/train.dat"
extract eval epoch test_accuracy >"$tmp/eval.dat"
[ -s "$tmp/train.dat" ] || { echo "plot_metrics: no training records in $metrics" >&2; exit 1; }

gnuplot <<GNUPLOT
set terminal pngcairo size 1200,450 noenhanced
set output "$out"
set multiplot layout 1,2 title "Fashion-MNIST ($metrics)"
set grid
set xlabel "step"; set ylabel "training loss (rank 0, running mean of the epoch)"
plot "$tmp/train.dat" using 1:2 with lines lw 2 title "loss"
set xlabel "epoch"; set ylabel "test accuracy (%)"
set xtics 1
plot "$tmp/eval.dat" using 1:(\$2*100) with linespoints lw 2 pt 7 title "test accuracy"
unset multiplot
GNUPLOT
echo "plot_metrics: wrote $out"
