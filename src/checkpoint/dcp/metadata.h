// DCP's .metadata, read as untrusted input: the restricted unpickler's graph
// (pickle_load_dcp_metadata) walked into plain structs, and every rule a loader relies on
// checked before any tensor byte is read.
//
// Note [DCP metadata]
// torch.distributed.checkpoint.save writes a directory: `.metadata`, a pickle of
// Metadata(state_dict_metadata, planner_data, storage_data, storage_meta, version), and
// `__<rank>_<k>.distcp` files. state_dict_metadata maps each flattened key ("model.fc1.weight",
// "optim.state.fc1.weight.exp_avg") to a TensorStorageMetadata (dtype, whole size, and the
// chunks the writers held: offsets and sizes per dimension) or a BytesStorageMetadata (any
// other object, e.g. a step count). storage_data maps MetadataIndex(key, chunk offsets) to
// _StorageInfo(file, offset, length): where the chunk's bytes are, each a torch.save archive of
// that chunk (or of the object). PyTorch reads the pickle with a plain pickle.load; dpx allows
// only the classes above and refuses, with a CheckpointError naming the file and the rule:
//   - any other class or call, nesting deeper than kMaxPickleDepth, more objects than
//     TorchLoadLimits::max_objects, a .metadata over kMaxMetadataBytes;
//   - sizes or offsets negative or past 2^63, a chunk reaching outside its tensor, two chunks
//     overlapping, chunks that leave part of a tensor uncovered;
//   - a chunk without a storage entry, a storage file that is not a plain name in the
//     directory (no '/', no '..'), a negative offset or length, a length shorter than the
//     chunk's elements (so a tensor is never larger than the files that hold it).
// Whether the files hold the bytes the entries say is checked before a tensor is allocated
// (dcp_load.cpp).
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "dpx/checkpoint/python_format.h"

namespace dpx::detail::dcp {

constexpr int64_t kMaxMetadataBytes = int64_t{1} << 30;

struct StorageInfo {
  std::string relative_path;  // a file of the checkpoint's directory
  int64_t offset = 0;
  int64_t length = 0;
};

struct Chunk {
  std::vector<int64_t> offsets;
  std::vector<int64_t> sizes;
  StorageInfo storage;
};

struct TensorEntry {
  c10::ScalarType dtype = c10::kFloat;
  std::vector<int64_t> size;
  std::vector<Chunk> chunks;
};

struct Metadata {
  std::map<std::string, TensorEntry> tensors;
  std::map<std::string, StorageInfo> objects;  // BytesStorageMetadata entries
  std::string version;
  // Each key's place in the nested dict that was saved ("model.fc.weight" -> {"model",
  // "fc.weight"}, "optim.param_groups.0.lr" -> {"optim", "param_groups", 0, "lr"}: a list's
  // index is an int): written for dcp_to_torch_save and friends, not read (loading needs only
  // keys).
  std::map<std::string, std::vector<std::variant<std::string, int64_t>>> planner_data;
};

// The version of DCP's format that dpx writes (PyTorch 2.4 to 2.15 write and read it).
constexpr const char* kDcpVersion = "1.0.0";

// `m` as PyTorch's pickle.load reads it into its Metadata (protocol 2: globals, NEWOBJ and
// BUILD for the dataclasses; TensorProperties' 5-field state, which PyTorch 2.11 and 2.15 both
// accept). Objects are BytesStorageMetadata entries, their storage keys MetadataIndex(fqn)
// without offset or index, as dcp.save writes them.
std::string pickle_metadata(const Metadata& m);

// The pickle's bytes; `what` names the file in errors.
Metadata parse_metadata(const std::string& pickle, const std::string& what,
                        const TorchLoadLimits& limits);
// `dir`/.metadata.
Metadata read_metadata(const std::string& dir, const TorchLoadLimits& limits);

}  // namespace dpx::detail::dcp
