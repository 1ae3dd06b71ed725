// The autograd node that joins DataParallel's replicas to the caller's graph.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

namespace dpx::detail {

class ReplicaThreads;

// Note [Parallel backward]
// On CPU the autograd engine runs a backward pass on the thread that called backward(). Had the
// replicas' graphs been joined to the module's parameters and the inputs as PyTorch joins them
// (Broadcast, Scatter, Gather), that one thread would walk all replicas one after the other.
// So each replica's forward builds a graph of its own, rooted at leaves: its parameters (which
// share the original's storage) and its input chunks. One node stands for all of them in the
// caller's graph: its inputs are the gathered outputs, its outputs go to the original parameters
// and to the inputs that require grad. When the engine reaches it, the node runs every replica's
// graph at once (torch::autograd::grad in the replica threads), sums the parameter gradients over
// replicas and stitches the input gradients together: the values PyTorch's Broadcast and Scatter
// backwards produce, each parameter's gradient accumulated once. The replicas' graphs live until
// the engine releases the node, so retain_graph works. Not supported: double backward
// (create_graph), and gradients towards tensors a replica uses that are neither its parameters
// nor its inputs (say, a tensor requiring grad captured by the module): those get none.

// Note [Parallel backward on CUDA]
// On CUDA the engine runs each device's part of a backward on that device's own thread, and it
// reaches this node on the thread of the device the outputs were gathered on. A replica thread
// calling torch::autograd::grad would queue the replica's CUDA nodes to those device threads,
// among them the one blocked in this node waiting for the replica threads: a deadlock (also
// with {cuda:0, cuda:0}). So on CUDA the node makes one torch::autograd::grad call over every
// replica's graph, from its own thread: a reentrant backward, in which this device thread runs
// its device's nodes and the other devices' threads run theirs, in parallel, as they run
// PyTorch's single DataParallel graph. The replica threads serve the CPU, where the engine would
// walk all replicas on one thread.

// What one forward leaves for its backward.
struct ReplicaRun {
  std::vector<torch::Device> devices;  // of the replicas that ran
  // One engine call for every replica, not one per thread (Note [Parallel backward on CUDA]).
  bool one_engine_call = false;
  int64_t dim = 0;
  std::vector<at::Tensor> params;  // the original parameters that require grad
  std::vector<at::Tensor> inputs;  // the original input tensors that require grad
  // [replica][k]: the replica's k-th output tensor, in gather order.
  std::vector<std::vector<at::Tensor>> outputs;
  // [replica][j]: the leaf standing for params[j], then for inputs[j - params.size()].
  std::vector<std::vector<at::Tensor>> leaves;
};

// Gives the tensors of `gathered` (in gather order) a grad_fn that runs the replicas' backward
// in parallel on `threads`; tensors whose replica outputs do not require grad are left alone.
void attach_parallel_backward(const std::shared_ptr<ReplicaThreads>& threads, ReplicaRun run,
                              const c10::IValue& gathered);

}  // namespace dpx::detail
