// The pickle inside a torch.save file, for the values a weights file holds: dicts (written as
// collections.OrderedDict), lists, tuples, strings, ints, floats, bools, None and tensors.
//
// Note [Weights pickle]
// torch.save writes a zip whose data.pkl is a protocol-2 pickle; each tensor in it is a call of
// torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks) whose
// storage is a persistent id ('storage', torch.<Type>Storage, key, location, numel) naming the
// record data/<key> that holds the raw little-endian bytes. torch.load(weights_only=True)
// accepts exactly this vocabulary, and so does the reader here: any other global (a class of
// the writer's program, os.system, ...) is refused with an error, never called. LibTorch's own
// pickle_save tags typed containers with torch.jit._pickle globals that weights_only refuses,
// and its pickle_load fails on the OrderedDict of a state_dict, hence this small pair.
#pragma once

#include <ATen/core/ivalue.h>

#include <functional>
#include <string>
#include <vector>

namespace dpx::detail {

// The pickle of `value`; each tensor's bytes go to `storages` (the record data/<index>), each
// tensor written whole and contiguous.
std::string pickle_weights(const c10::IValue& value, std::vector<at::Tensor>& storages);

// What a storage id names: the bytes of record data/<key> as `numel` elements of `dtype`.
using StorageLoader =
    std::function<at::Tensor(const std::string& key, at::ScalarType dtype, int64_t numel)>;

// The value of a weights pickle; `file` names the file in errors (CheckpointError).
c10::IValue unpickle_weights(const std::string& bytes, const StorageLoader& load,
                             const std::string& file);

}  // namespace dpx::detail
