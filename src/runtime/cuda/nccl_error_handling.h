// How failures of c10d's NCCL groups end: dpx's choice, made once per process
// (Note [NCCL error handling]).
#pragma once

namespace dpx::detail {

// Note [NCCL error handling]
// c10d's watchdog ends the whole process when a collective fails or outlives the group's timeout
// under TORCH_NCCL_ASYNC_ERROR_HANDLING=1 (TearDown, what torchrun and dpxrun give workers) or 3
// (SkipCleanUp, c10d's default). dpx promises a typed error instead, so it runs c10d with mode 2
// (CleanUpOnly): the watchdog aborts the communicators (ncclCommAbort) and marks the work
// failed, and the wait in dpx's nccl Work throws, which rethrow_nccl_error types. c10d reads the
// variable in each group's constructor and has no option for it, so dpx sets it, process-wide and
// once, in init_process() (the one place for process-wide choices) rather than around each
// group's construction, where a setenv() would race with any thread reading the environment.
// DPX_NCCL_ERROR_HANDLING=c10d leaves the process's value alone.

// Note [Destroying a failed NCCL group promptly]
// When c10d's watchdog sees a failed or timed-out collective it broadcasts a "dump the flight
// recorder" signal and then sleeps 4 x TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC (default 15 s: one
// minute) before it aborts the communicators and loops again; the group's destructor joins the
// watchdog, so destroying a failed group took that minute (GPU run 2026-11-28-4: both
// NcclFaults tests had their typed error within 0.6 s and 3.5 s, then hung destroying the group;
// PyTorch's own destroy_process_group did not return within 20 s either, scripts/
// nccl_fault_probe.py). Where dpx handles NCCL errors, init_process() therefore makes that wait
// 250 ms (the watchdog sleeps 1 s) unless the program set the variable or turned c10d's flight
// recorder on (TORCH_NCCL_TRACE_BUFFER_SIZE above 0), whose dump the wait is for.

// Whether dpx handles NCCL errors (DPX_NCCL_ERROR_HANDLING: dpx, the default, or c10d).
bool dpx_handles_nccl_errors();

// Sets TORCH_NCCL_ASYNC_ERROR_HANDLING=2, and TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC as
// (Note [Destroying a failed NCCL group promptly]) says, in a dpx built with CUDA when dpx
// handles NCCL errors, the first time it is called; nothing otherwise (a dpx without CUDA does
// not read DPX_NCCL_ERROR_HANDLING at all).
void choose_nccl_error_handling();

// Whether c10d's NCCL groups made now get mode 2.
bool nccl_errors_reach_dpx();

}  // namespace dpx::detail
