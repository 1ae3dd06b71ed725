#!/usr/bin/env bash
# Fault-tolerant training across network-namespace hosts (scripts/netns_hosts.sh), one dpxrun
# agent per host: KILLS times, a random host other than host 0 (which holds the store and the
# coordinator) is SIGKILLed with its agent at a random moment, and its agent is started again
# REVIVE s later, as a replaced node would be.
#   MODE=ft (default): dpxrun --fault-tolerant and the example's --fault-tolerant. Checks that
#     the others commit a step within 2 s of each kill, that the revived host heals from a peer,
#     and that at the end every rank of every host holds the same weights to the bit.
#   MODE=restart: today's way, for comparison (bench/cluster_ft.sh): --nnodes HOSTS,
#     --max-restarts, checkpoints every 10 steps; every kill restarts every host.
#   SIGNAL=STOP: the host is stopped instead (a hung machine); REVIVE s later it is killed and
#     started again, as a watchdog would reboot it.
#   SPARE=1 (ft): the last host is a hot spare, started once the others train (--nnodes
#     MIN:MAX counts one host fewer); a lost host is not started again: the spare takes its
#     place, and the job ends with as many ranks as it started with.
#   LOSE_COORDINATOR=KILL|STOP (ft): host 0 itself is SIGKILLed or SIGSTOPped once training
#     runs; the others must end with an error naming the coordinator within 60 s.
# Prints "fault_tolerant: PASS" and a summary line per kill; writes $work/summary.json.
#   fault_tolerant.sh <dpxrun> <fashion_mnist> <scratch dir>
# Environment: HOSTS (4), NPER (2), KILLS (1), REVIVE (2 s), EPOCHS (1), TRAIN_LIMIT (16384),
# BATCH (16 per rank), GAP (3: seconds from a revival's heal to the next kill, +0-2 at random),
# SEED (for the random choices; default from the clock), TIMEOUT (600), EXAMPLE_ARGS (more
# flags for the example, e.g. "--seed 2").
set -uo pipefail
dpxrun=$1 bin=$2 work=$3
hosts=${HOSTS:-4} nper=${NPER:-2} kills=${KILLS:-1} revive=${REVIVE:-2} mode=${MODE:-ft}
[ -n "${LOSE_COORDINATOR:-}" ] && kills=0
source "$(dirname "$0")/../example/dataset.sh" "$work"
here="$(cd "$(dirname "$0")/../../.." && pwd)"
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
  echo "fault_tolerant: SKIPPED (network namespaces need root and iproute2)"; exit 0
fi
RANDOM=${SEED:-$(date +%s)}
prefix="dpxf$(($$ % 100000))h" subnet="10.216.$(($$ % 250))" port=29400
cd "$work" || exit 1
mkdir -p logs
agents=()
cleanup() { bash "$here/scripts/netns_hosts.sh" down "$prefix" "$hosts"; }
trap cleanup EXIT
trap 'exit 143' TERM INT
bash "$here/scripts/netns_hosts.sh" up "$prefix" "$hosts" "$subnet" ||
  { echo "fault_tolerant: SKIPPED (could not make the namespaces)"; exit 0; }
fail() {
  echo "fault_tolerant: FAILED: $*"
  for f in logs/host*.log; do echo "--- $f"; grep -v "^\[default.\]:epoch" "$f" | tail -n 15; done
  exit 1
}

args=(--epochs "${EPOCHS:-1}" --train-limit "${TRAIN_LIMIT:-16384}" --batch-size "${BATCH:-16}"
  ${EXAMPLE_ARGS:-})
spare=${SPARE:-0}
if [ "$mode" = ft ]; then
  launch=(--nnodes "$((hosts - 1 - spare)):$((hosts - spare))" --fault-tolerant --max-restarts 3)
  args+=(--fault-tolerant)
else
  launch=(--nnodes "$hosts" --max-restarts "$((kills + 2))")
  args+=(--backend hierarchical --checkpoint-every 10 --checkpoint-dir "$work/ckpt")
fi
# start HOST LIFE: an agent on HOST; its log is logs/host<HOST>.<LIFE>.log
start() {
  ip netns exec "$prefix$1" env GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 \
    timeout -k 10 "${TIMEOUT:-600}" "$dpxrun" "${launch[@]}" --nproc-per-node "$nper" \
    --rdzv-backend c10d --rdzv-endpoint "$subnet.1:$port" --rdzv-id ft$$ \
    --rdzv-conf last_call_timeout=5 "$bin" "${args[@]}" > "logs/host$1.$2.log" 2>&1 &
  agents[$1]=$!
}
now() { date +%s.%N; }
started=$(now)
for ((i = 0; i < hosts - spare; i++)); do start $i 0; done
if [ "$spare" = 1 ]; then
  while ! grep -q "committed with" logs/host0.0.log 2>/dev/null; do
    kill -0 "${agents[0]}" 2>/dev/null || fail "host 0's agent ended early"
    sleep 0.2
  done
  start $((hosts - 1)) 0
fi
lives=()
for ((i = 0; i < hosts; i++)); do lives[$i]=0; done

: > logs/kills
for ((k = 1; k <= kills; k++)); do
  # Wait until training runs (the first step committed everywhere), then GAP + 0-4 s.
  while ! grep -q "quorum\|resumed\|epoch 1/" logs/host*.log 2>/dev/null; do
    kill -0 "${agents[0]}" 2>/dev/null || fail "host 0's agent ended before kill $k"
    sleep 0.2
  done
  if [ "$mode" = restart ]; then  # the job trains again after the previous kill
    while [ "$(cat logs/host*.log | grep -c "resumed from checkpoint")" -lt $((k - 1)) ]; do
      kill -0 "${agents[0]}" 2>/dev/null || break
      sleep 0.2
    done
  fi
  sleep "$((${GAP:-3} + RANDOM % 3)).$((RANDOM % 10))"
  kill -0 "${agents[0]}" 2>/dev/null || fail "the job ended before kill $k (make it longer)"
  victim=$((1 + RANDOM % (hosts - 1 - spare)))
  t=$(now)
  ip netns pids "$prefix$victim" | xargs -r kill -s "${SIGNAL:-KILL}"
  echo "$k $victim $t" >> logs/kills
  sleep "$revive"
  ip netns pids "$prefix$victim" | xargs -r kill -9
  wait "${agents[$victim]}" 2>/dev/null
  if [ "$spare" = 1 ]; then  # not started again: the spare takes its place
    agents[$victim]=""
    for ((w = 0; w < 600; w++)); do
      grep -q "healed from group" "logs/host$((hosts - 1)).0.log" 2>/dev/null && break
      sleep 0.1
    done
    continue
  fi
  lives[$victim]=$((lives[$victim] + 1))
  start "$victim" "${lives[$victim]}"
  # The revived host's workers heal before the next kill (or 60 s pass).
  if [ "$mode" = ft ]; then
    for ((w = 0; w < 600; w++)); do
      grep -q "healed from group" "logs/host$victim.${lives[$victim]}.log" 2>/dev/null && break
      sleep 0.1
    done
  else
    sleep 5
  fi
done
if [ -n "${LOSE_COORDINATOR:-}" ]; then
  while ! grep -q "committed with" logs/host0.0.log 2>/dev/null; do
    kill -0 "${agents[0]}" 2>/dev/null || fail "host 0's agent ended early"
    sleep 0.2
  done
  sleep 2
  t=$(now)
  ip netns pids "${prefix}0" | xargs -r kill -s "$LOSE_COORDINATOR"
  for ((i = 1; i < hosts; i++)); do
    wait "${agents[$i]}"; s=$?
    [ $s != 0 ] || fail "host $i's agent ended well without the coordinator"
    grep -q "lost the fault-tolerance coordinator\|cannot be reached" "logs/host$i.0.log" ||
      fail "host $i did not say the coordinator was lost"
  done
  took=$(python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t" "$(now)")
  awk -v t="$took" 'BEGIN { exit !(t < 60) }' || fail "the others took $took s to end"
  echo "fault_tolerant: coordinator ${LOSE_COORDINATOR}: the other hosts ended ${took} s after, naming it"
  echo "fault_tolerant: PASS"
  exit 0
fi
status=0
for ((i = 0; i < hosts; i++)); do
  [ -n "${agents[$i]}" ] || continue  # lost for good (SPARE)
  wait "${agents[$i]}"; s=$?
  echo "host $i $s" >> logs/status
  [ $s = 0 ] || status=1
done
ended=$(now)
[ $status = 0 ] || fail "an agent failed: $(tr '\n' ' ' < logs/status)"

python3 - "$mode" "$started" "$ended" "$(((hosts - spare) * nper))" <<'PY' || fail "see above"
import glob, json, re, sys
mode, started, ended, ranks = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
kills = [l.split() for l in open("logs/kills")]
logs = {f: open(f, errors="replace").read() for f in sorted(glob.glob("logs/host*.log"))}
out = {"mode": mode, "total_s": ended - started, "kills": []}
problems = []
if mode == "ft":
    # Every rank alive at the end printed its digest: all equal, one per rank.
    digests = re.findall(r"ft: group (\d+) rank (\d+): step (\d+), (\d+) commits, (\d+) not committed, (\d+) heal\(s\) received, digest (0x[0-9a-f]+)", "\n".join(logs.values()))
    if len(digests) != ranks:
        problems.append("%d ranks reported at the end, not %d" % (len(digests), ranks))
    if len({d[6] for d in digests}) != 1:
        problems.append("the replicas differ: %s" % sorted({(d[0], d[1], d[6]) for d in digests}))
    steps = {d[2] for d in digests}
    if len(steps) != 1:
        problems.append("ranks ended at different steps: %s" % steps)
    out["steps"] = int(digests[0][2]) if digests else 0
    out["not_committed"] = max(int(d[4]) for d in digests) if digests else 0
    events = []  # (time, group, text) of every "dpx ft" line
    for f, text in logs.items():
        for m in re.finditer(r"dpx ft: group (\d+) at ([0-9.]+): (.*)", text):
            events.append((float(m.group(2)), int(m.group(1)), m.group(3), f))
    events.sort()
    for k, victim, t in kills:
        t = float(t)
        after = [e for e in events if e[0] > t]
        commit = next((e for e in after if "committed with" in e[2] and
                       not e[3].startswith("logs/host%s." % victim)), None)
        healed = next((e for e in after if "healed from group" in e[2]), None)
        r = {"kill": int(k), "host": int(victim),
             "others_commit_s": commit[0] - t if commit else None,
             "healed_s": healed[0] - t if healed else None}
        out["kills"].append(r)
        print("fault_tolerant: kill %s (host %s): the others committed a step %.2f s after, "
              "its replacement healed %.2f s after" % (k, victim, r["others_commit_s"] or -1,
                                                          r["healed_s"] or -1))
        if commit is None or commit[0] - t > 2.0:
            problems.append("kill %s: the others did not commit within 2 s (%s)" %
                            (k, None if commit is None else "%.2f s" % (commit[0] - t)))
        if healed is None:
            problems.append("kill %s: host %s never healed" % (k, victim))
else:
    resumed = sum(t.count("resumed from checkpoint") for t in logs.values())
    out["resumes"] = resumed
metrics = [json.loads(l) for l in open("fashion_mnist_metrics.jsonl")] if glob.glob("fashion_mnist_metrics.jsonl") else []
evals = [m for m in metrics if m.get("type") == "eval"]
out["test_accuracy"] = evals[-1]["test_accuracy"] if evals else None
print("fault_tolerant: %s: %d kill(s), %.1f s in all, test accuracy %s" % (
    mode, len(kills), out["total_s"], out["test_accuracy"]))
json.dump(out, open("summary.json", "w"), indent=1)
for p in problems: print("fault_tolerant: " + p)
sys.exit(1 if problems else 0)
PY
echo "fault_tolerant: PASS"
