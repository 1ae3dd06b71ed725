#!/usr/bin/env bash
# The example over the mpi backend under the MPI's launcher (docs/example.md): 2 workers, one
# short epoch; DDP must report the mpi backend and the test accuracy must pass 60% (one epoch
# on 3,000 images reaches about 75% on every backend).
#   example.sh MPIEXEC "FLAGS;..." fashion_mnist DATA_DIR
set -uo pipefail
mpiexec=$1
IFS=';' read -r -a flags <<< "$2"
example=$3
data=$4
[ -d "$data" ] || { echo "SKIPPED: no Fashion-MNIST in $data"; exit 0; }
dir=$(mktemp -d /tmp/dpx-mpi-example-XXXXXX)
trap 'rm -rf "$dir"' EXIT
OMP_NUM_THREADS=1 timeout 240 "$mpiexec" "${flags[@]}" -np 2 "$example" --backend mpi \
  --epochs 1 --train-limit 3000 --report-every 10 --data-dir "$data" \
  --checkpoint-dir "$dir/ckpt" --metrics-file "$dir/metrics.jsonl" > "$dir/log" 2>&1
rc=$?
tail -n 3 "$dir/log"
[ "$rc" = 0 ] || { echo "FAIL: exit $rc"; exit 1; }
python3 - "$dir/metrics.jsonl" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
backends = {r["stats"]["backend_name"] for r in recs if r["type"] == "ddp"}
evals = [r for r in recs if r["type"] == "eval"]
ok = backends == {"mpi"} and evals and evals[-1]["test_accuracy"] > 0.6
print(f"backends {sorted(backends)}, test accuracy {evals[-1]['test_accuracy'] if evals else None}")
print("mpi example: PASS" if ok else "mpi example: FAIL")
PY
