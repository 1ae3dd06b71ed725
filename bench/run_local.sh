#!/usr/bin/env bash
# Starts NPROC ranks of a worker program on this host with the env:// contract set (a stand-in
# for dpxrun): bench/run_local.sh NPROC [--timeout SEC] [--bind] PROGRAM [ARGS...]
# --bind pins rank r to CPU r % ncpu (taskset), as mpirun binds ranks to cores by default.
# Exits with the first non-zero rank status; kills every rank when one fails or time runs out.
set -euo pipefail
nproc=${1:?usage: run_local.sh NPROC [--timeout SEC] [--bind] PROGRAM [ARGS...]}
shift
timeout=600
bind=0
while true; do
  case "${1:-}" in
    --timeout) timeout=$2; shift 2 ;;
    --bind) bind=1; shift ;;
    *) break ;;
  esac
done
ncpu=$(nproc)
# A free port below the kernel's ephemeral range: a client that retries connecting to an
# ephemeral port nobody listens on yet can end up connected to itself.
port=$(/usr/bin/python3 - <<'PY'
import random, socket
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(200):
    p = random.randrange(max(1024, lo - 12000), lo)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); print(p); break
    except OSError:
        pass
    finally:
        s.close()
PY
)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
for ((r = 0; r < nproc; r++)); do
  pin=()
  if [ $bind = 1 ]; then pin=(taskset -c $((r % ncpu))); fi
  MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r LOCAL_RANK=$r WORLD_SIZE=$nproc \
    LOCAL_WORLD_SIZE=$nproc GROUP_RANK=0 "${pin[@]}" timeout -k 5 "$timeout" "$@" &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do
  wait "$p" || { s=$?; [ $status -eq 0 ] && status=$s; }
done
exit $status
