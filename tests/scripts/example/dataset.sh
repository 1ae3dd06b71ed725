# Sourced by the example scripts (`source "$(dirname "$0")/dataset.sh" "$work"`): skips the test
# (exit 0, "SKIPPED") where dataset-fashion-mnist is not installed, else makes "$work" a fresh,
# empty folder.
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  echo "SKIPPED: dataset-fashion-mnist is not installed (scripts/setup.sh installs it)"
  exit 0
fi
rm -rf "$1" && mkdir -p "$1"
