// LibTorch optimizers' state in Python's optimizer.state_dict() layout:
//   {'state': {index: {...}}, 'param_groups': [{<hyper-parameters>, 'params': [indices]}]}
// with parameters numbered across the groups in order, as Python does. Mapped: SGD
// (momentum_buffer) and Adam/AdamW (step, exp_avg, exp_avg_sq, max_exp_avg_sq). Other
// optimizers throw a c10::Error naming themselves.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/optim/optimizer.h>

namespace dpx::detail {

c10::IValue optimizer_state_dict(const torch::optim::Optimizer& optimizer);
void load_optimizer_state_dict(torch::optim::Optimizer& optimizer, const c10::IValue& state);

}  // namespace dpx::detail
