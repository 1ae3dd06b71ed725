// The texts of the errors a DDP step raises where PyTorch's reducer raises them (the wording
// follows PyTorch's, so that its users' searches find them). The checks themselves stay where
// the step runs (reducer_forward.cpp, reducer_step.cpp); a message is built only when its check
// fails.
#include "ddp/reducer.h"

namespace dpx::detail {

// Note [Unfinished reduction]
// A synchronised forward that starts while the previous backward's buckets still wait for
// gradients: some parameter took no part in the loss (or, with static_graph, the graph
// changed). The error lists the parameters whose hook did not fire: their indices, and with
// DPX_DEBUG their names.
std::string Reducer::unfinished_reduction_message() const {
  std::vector<std::size_t> unmarked;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!marked_[i]) unmarked.push_back(i);
  }
  std::string msg = "Expected to have finished reduction in the prior iteration before starting "
                    "a new one. ";
  if (options_.static_graph) {
    msg += "This error indicates that your training graph has changed in this iteration, e.g. "
           "a parameter was used in the first iteration but not in this one; this is not "
           "compatible with static_graph set to true.";
  } else {
    msg += "This error indicates that your module has parameters that were not used in "
           "producing loss. ";
    msg += options_.find_unused_parameters
               ? "Since find_unused_parameters is enabled, this likely means that not all "
                 "forward outputs participate in computing the loss. "
               : "You can enable unused parameter detection by passing "
                 "find_unused_parameters=True (DistributedDataParallelOptions::"
                 "find_unused_parameters = true), and by ";
    msg += "making sure all forward function outputs participate in calculating loss.";
  }
  std::string indices;
  for (auto i : unmarked) indices += (indices.empty() ? "" : " ") + std::to_string(i);
  const std::string rank = std::to_string(pg_->rank());
  if (options_.debug == DebugLevel::kOff) {
    msg += "\nParameter indices which did not receive grad for rank " + rank + ": " + indices +
           "\nIn addition, you can set the environment variable DPX_DEBUG (or "
           "TORCH_DISTRIBUTED_DEBUG) to INFO or DETAIL to print out which parameters did not "
           "receive gradient on this rank as part of this error.";
  } else {
    msg += "\nParameters which did not receive grad for rank " + rank + ": " +
           names_of(unmarked) + "\nParameter indices which did not receive grad for rank " +
           rank + ": " + indices;
  }
  return msg;
}

std::string Reducer::marked_twice_message(std::size_t index) const {
  std::string detail;
  if (options_.debug != DebugLevel::kOff) {
    detail = " Parameter at index " + std::to_string(index) + " with name " + names_[index] +
             " has been marked as ready twice. This means that multiple autograd engine "
             "hooks have fired for this particular parameter during this iteration.";
  } else {
    detail = " Parameter at index " + std::to_string(index) + " has been marked as ready "
             "twice. Set DPX_DEBUG (or TORCH_DISTRIBUTED_DEBUG) to INFO or DETAIL to see "
             "its name.";
  }
  return "Expected to mark a variable ready only once. This happens when 1) a parameter is "
         "used outside the forward of the DDP module, or shared across concurrent "
         "forward-backward passes, or 2) the same parameters take part in several reentrant "
         "backward passes (e.g. checkpointing the same part of the model twice). If the graph "
         "does not change across iterations, static_graph = true is a workaround." + detail;
}

std::string Reducer::graph_changed_message(std::size_t index) const {
  return "Your training graph has changed in this iteration: the gradient hook of parameter " +
         std::to_string(index) + " (" + names_[index] + ") fired " +
         std::to_string(hook_count_[index]) + " times, but " +
         std::to_string(expected_hooks_[index]) + " times in the first iteration. This is not "
         "compatible with static_graph set to true.";
}

std::string Reducer::sparse_parameter_names() const {
  std::vector<std::size_t> sparse;
  for (const auto& bucket : buckets_) {
    if (bucket.sparse) sparse.push_back(bucket.variables.front());
  }
  return names_of(sparse);
}

std::string Reducer::names_of(const std::vector<std::size_t>& indices) const {
  std::string out;
  for (auto i : indices) out += (out.empty() ? "" : ", ") + names_[i];
  return out;
}

}  // namespace dpx::detail
