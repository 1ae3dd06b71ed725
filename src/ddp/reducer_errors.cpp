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
  // PyTorch's texts, word for word (users search for them), with the C++ spelling added.
  std::string msg = "Expected to have finished reduction in the prior iteration before starting "
                    "a new one. ";
  const char* outputs_not_used = "making sure all `forward` function outputs participate in "
                                 "calculating loss. ";
  const char* ddp_bug = "\nIf you already have done the above, then the distributed data "
                        "parallel module wasn't able to locate the output tensors in the return "
                        "value of your module's `forward` function. Please include the loss "
                        "function and the structure of the return value of `forward` of your "
                        "module when reporting this issue (e.g. list, dict, iterable).";
  if (options_.static_graph) {
    msg += "This error indicates that your training graph has changed in this iteration, e.g., "
           "one parameter is used in first iteration, but then got unused in the second "
           "iteration. this is not compatible with static_graph set to True.";
  } else {
    msg += "This error indicates that your module has parameters that were not used in "
           "producing loss. ";
    msg += options_.find_unused_parameters
               ? "Since `find_unused_parameters=True` is enabled, this likely  means that not all "
                 "`forward` outputs participate in computing loss. You can fix this by "
               : "You can enable unused parameter detection by passing the keyword argument "
                 "`find_unused_parameters=True` to `torch.nn.parallel.DistributedDataParallel` "
                 "(DistributedDataParallelOptions::find_unused_parameters in C++), and by \n";
    msg += std::string(outputs_not_used) + ddp_bug;
  }
  std::string indices;
  for (auto i : unmarked) indices += (indices.empty() ? "" : " ") + std::to_string(i);
  const std::string indices_info = c10::str(
      "\nParameter indices which did not receive grad for rank ", pg_->rank(), ": ", indices);
  if (options_.debug == DebugLevel::kOff) {
    msg += c10::str(indices_info, "\n In addition, you can set the environment variable "
                    "TORCH_DISTRIBUTED_DEBUG to either INFO or DETAIL to print out information "
                    "about which particular parameters did not receive gradient on this rank as "
                    "part of this error (dpx reads DPX_DEBUG too)");
  } else {
    msg += c10::str("\nParameters which did not receive grad for rank ", pg_->rank(), ": ",
                    names_of(unmarked), indices_info);
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
