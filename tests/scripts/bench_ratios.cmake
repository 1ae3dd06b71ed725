# The dpx-bench sub-commands that compare two configurations, each run on two ranks with a tiny
# workload so the benchmark cannot rot: the run must print each of its `ratio N` lines.
if(TARGET dpx-bench)
  # bench_<NAME>_smoke: `dpx-bench COMMAND ARGS...` must print RATIOS ratio lines.
  function(dpx_bench_ratio_smoke name ratios command)
    list(JOIN ARGN " " args)
    add_test(NAME bench_${name}_smoke
      COMMAND bash -c "set -o pipefail; bash \"$0\" 2 --timeout 60 \"$1\" ${command} --backend shm ${args} | tee /dev/stderr | grep -c 'ratio [0-9.]*$' | grep -qx ${ratios}"
              ${PROJECT_SOURCE_DIR}/bench/run_local.sh $<TARGET_FILE:dpx-bench>)
    set_tests_properties(bench_${name}_smoke PROPERTIES LABELS "scripts;bench" TIMEOUT 90)
  endfunction()
  dpx_bench_ratio_smoke(powersgd 2 powersgd --width 64 --rounds 1 --steps 1)
  dpx_bench_ratio_smoke(zero 2 zero --width 32 --rounds 1 --steps 1)
  dpx_bench_ratio_smoke(sparse 2 sparse --vocab 1000 --dim 8 --rounds 1 --steps 1)
  dpx_bench_ratio_smoke(syncbn 1 syncbn --batch 4 --rounds 1 --steps 1)
  dpx_bench_ratio_smoke(localsgd 1 localsgd --width 64 --rounds 1)
  dpx_bench_ratio_smoke(amp 1 amp --batch 4 --rounds 1 --steps 1)
  dpx_bench_ratio_smoke(fsdp 2 fsdp --width 32 --units 3 --batch 4 --rounds 1 --steps 1)
endif()
# `dpx-bench ddp-job` under run_local.sh (bench/ddp_backends.sh's shm and gloo runs).
if(TARGET dpx-bench)
  add_test(NAME bench_ddp_job_smoke
    COMMAND bash "${PROJECT_SOURCE_DIR}/bench/run_local.sh" 2 --timeout 60 $<TARGET_FILE:dpx-bench>
      ddp-job --backend shm --model mlp --mlp-width 64 --batch 4 --steps 2 --warmup 1)
  set_tests_properties(bench_ddp_job_smoke PROPERTIES LABELS "scripts;bench" TIMEOUT 90
    PASS_REGULAR_EXPRESSION "ddp-job model mlp backend shm ranks 2 .* samples/s [0-9.]+ comm_ms")
endif()
# `dpx-bench dcp-async` with a tiny model: it must save in the background and print its summary.
if(TARGET dpx-bench)
  add_test(NAME bench_dcp_async_smoke
    COMMAND bash -c "d=$(mktemp -d) && trap 'rm -rf $d' EXIT && bash \"$0\" 2 --timeout 60 \"$1\" dcp-async --backend shm --width 32 --units 2 --rounds 1 --steps 2 --dir $d"
            ${PROJECT_SOURCE_DIR}/bench/run_local.sh $<TARGET_FILE:dpx-bench>)
  set_tests_properties(bench_dcp_async_smoke PROPERTIES LABELS "scripts;bench" TIMEOUT 90
    PASS_REGULAR_EXPRESSION "dpx dcp-async: 2 ranks, 2 steps of [0-9.]+ s: a sync save adds")
endif()
