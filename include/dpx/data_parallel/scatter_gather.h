// Scatter and gather of nested inputs and outputs, as torch.nn.parallel's scatter and gather.
// Structures are c10::IValue trees: tensors inside tuples, lists and dicts, at any depth.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

namespace dpx {

// Splits every tensor inside `inputs` along `dim` with Tensor::chunk(devices.size(), dim) and
// moves chunk i to devices[i]; tuples, lists and dicts keep their shape around the chunks, and
// every other value (numbers, strings, None, undefined tensors) is repeated on each device.
// chunk() may return fewer pieces than devices (a batch of 5 on 4 devices gives 3 chunks of
// 2, 2, 1), and the result then has that many entries: the shortest split wins, as zip() does in
// PyTorch. Differentiable: chunks are views (or copies to another device) tracked by autograd.
std::vector<c10::IValue> scatter(const c10::IValue& inputs, const std::vector<torch::Device>& devices,
                                 int64_t dim = 0);

// The inverse: concatenates the tensors at each position of the replicas' outputs along `dim` on
// `output_device`, keeping the structure. Zero-dimensional tensors (a per-replica loss) are
// unsqueezed first and give a vector, with a warning, as PyTorch does. None stays None; any
// other non-tensor value, or replicas whose outputs differ in structure, is an error.
c10::IValue gather(const std::vector<c10::IValue>& outputs, torch::Device output_device,
                   int64_t dim = 0);

namespace detail {

// Calls fn on every defined tensor of the tree, depth first, in a fixed order (tuple and list
// elements in order, dict values in insertion order). Scatter and gather keep this order, so
// the k-th tensor of a replica's input or output corresponds to the k-th of the whole.
void for_each_tensor(const c10::IValue& tree, const std::function<void(const at::Tensor&)>& fn);

// A copy of the tree with every defined tensor t replaced by fn(t).
c10::IValue map_tensors(const c10::IValue& tree, const std::function<at::Tensor(const at::Tensor&)>& fn);

}  // namespace detail
}  // namespace dpx
