// The CUDA generators' states a checkpoint keeps (Note [CUDA random state]).
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace dpx::detail {

// Note [CUDA random state]
// Dropout on a GPU draws from that GPU's generator, so a resumed run continues identically only
// if a checkpoint restores the CUDA generators too, not just the CPU's. A checkpoint holds one
// state per CUDA device the saving process sees (the tensors of torch.cuda.get_rng_state_all()),
// starting with the saver's current device: for rank 0 on cuda:0, get_rng_state_all()'s order.
// A loading process gives entry k to its device (current + k) mod count: its own GPU gets the
// state of the saving rank's GPU, as every rank gets rank 0's CPU state, and a process that
// drives several GPUs (DataParallel) gets each one's back. Entries beyond the devices the
// loading process sees are dropped (a GPU checkpoint loads on a machine without one); a
// checkpoint saved without a GPU holds none and leaves the generators alone.

// The states, from the current device on; empty where this process sees no CUDA device.
std::vector<at::Tensor> cuda_rng_states();

// Restores states cuda_rng_states() returned, in this process's order (above).
void set_cuda_rng_states(const std::vector<at::Tensor>& states);

}  // namespace dpx::detail
