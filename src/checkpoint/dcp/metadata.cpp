// From the unpickled graph to checked structs (Note [DCP metadata] in metadata.h).
#include "checkpoint/dcp/metadata.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <tuple>
#include <utility>

#include "dpx/errors.h"
#include "checkpoint/python_format/pickle.h"

namespace dpx::detail::dcp {
namespace {

const std::string kModule = "torch.distributed.checkpoint.metadata.";
const std::string kStorageInfo = "torch.distributed.checkpoint.filesystem._StorageInfo";
// Chunk pairs compared for overlap, at most: a hostile file of many chunks that all share their
// first rows would otherwise cost n^2.
constexpr int64_t kOverlapBudget = 50'000'000;

// A chunk's storage key: MetadataIndex(fqn, offset), where objects have no offset.
using StorageKey = std::tuple<std::string, bool, std::vector<int64_t>>;

class Walker {
 public:
  Walker(const PickleGraph& g, std::string what) : g_(g), what_(std::move(what)) {}

  Metadata metadata(NodeId root) {
    const auto fields = object_fields(root, kModule + "Metadata");
    const auto storage = storage_data(field(fields, "storage_data", "Metadata"));
    Metadata m;
    if (const auto v = fields.find("version"); v != fields.end() && !is_none(v->second)) {
      m.version = str(v->second, "Metadata.version");
    }
    for (const auto& [key, value] : dict(field(fields, "state_dict_metadata", "Metadata"),
                                         "Metadata.state_dict_metadata")) {
      const std::string fqn = str(key, "a state_dict_metadata key");
      const std::string cls = class_of(value);
      if (cls == kModule + "BytesStorageMetadata") {
        m.objects[fqn] = find_storage(storage, {fqn, false, {}}, fqn);
      } else if (cls == kModule + "TensorStorageMetadata") {
        m.tensors[fqn] = tensor(value, fqn, storage);
      } else {
        fail("the entry of " + fqn + " is a " + (cls.empty() ? "plain value" : cls) +
             ", neither TensorStorageMetadata nor BytesStorageMetadata");
      }
    }
    return m;
  }

 private:
  [[noreturn]] void fail(const std::string& msg) const {
    throw CheckpointError(what_ + ": " + msg);
  }

  const Node& node(NodeId id) const { return g_[id]; }
  bool is_none(NodeId id) const { return node(id).kind == Node::kValue && node(id).value.isNone(); }

  std::string class_of(NodeId id) const {
    return node(id).kind == Node::kObject ? node(id).value.toStringRef() : "";
  }

  std::string str(NodeId id, const std::string& what) const {
    if (node(id).kind != Node::kValue || !node(id).value.isString()) fail(what + " is not a string");
    return node(id).value.toStringRef();
  }

  int64_t integer(NodeId id, const std::string& what) const {
    if (node(id).kind != Node::kValue || !node(id).value.isInt()) fail(what + " is not an integer");
    return node(id).value.toInt();
  }

  // A dict's (key, value) pairs, the last value of a repeated key winning, as in Python.
  std::vector<std::pair<NodeId, NodeId>> dict(NodeId id, const std::string& what) const {
    if (node(id).kind != Node::kDict) fail(what + " is not a dict");
    const auto& items = node(id).items;
    std::vector<std::pair<NodeId, NodeId>> out;
    for (size_t i = 0; i + 1 < items.size(); i += 2) out.emplace_back(items[i], items[i + 1]);
    return out;
  }

  const std::vector<NodeId>& sequence(NodeId id, const std::string& what) const {
    if (node(id).kind != Node::kList && node(id).kind != Node::kTuple) {
      fail(what + " is not a list or tuple");
    }
    return node(id).items;
  }

  // A torch.Size or tuple of non-negative ints.
  std::vector<int64_t> dims(NodeId id, const std::string& what) const {
    std::vector<int64_t> out;
    for (const NodeId x : sequence(id, what)) {
      const int64_t v = integer(x, what);
      if (v < 0) fail(what + " holds a negative number");
      out.push_back(v);
    }
    return out;
  }

  // The object's fields, as BUILD set them from a dict (dataclasses without __setstate__).
  std::map<std::string, NodeId> object_fields(NodeId id, const std::string& cls) const {
    if (class_of(id) != cls) fail("expected a " + cls + ", found " + describe(id));
    std::map<std::string, NodeId> fields;
    if (node(id).items.empty()) return fields;
    for (const auto& [k, v] : dict(node(id).items[0], "the state of a " + cls)) {
      fields[str(k, "a field name of a " + cls)] = v;
    }
    return fields;
  }

  NodeId field(const std::map<std::string, NodeId>& fields, const std::string& name,
               const std::string& cls) const {
    const auto it = fields.find(name);
    if (it == fields.end()) fail("a " + cls + " without its field " + name);
    return it->second;
  }

  std::string describe(NodeId id) const {
    switch (node(id).kind) {
      case Node::kObject: return "a " + node(id).value.toStringRef();
      case Node::kDict: return "a dict";
      case Node::kList: return "a list";
      case Node::kTuple: return "a tuple";
      case Node::kGlobal: return "the global " + node(id).value.toStringRef();
      default: return "a plain value";
    }
  }

  std::map<StorageKey, StorageInfo> storage_data(NodeId id) const {
    std::map<StorageKey, StorageInfo> out;
    for (const auto& [key, value] : dict(id, "Metadata.storage_data")) {
      const auto index = object_fields(key, kModule + "MetadataIndex");
      const std::string fqn = str(field(index, "fqn", "MetadataIndex"), "MetadataIndex.fqn");
      const auto offset = index.find("offset");
      const bool has_offset = offset != index.end() && !is_none(offset->second);
      out[{fqn, has_offset,
           has_offset ? dims(offset->second, "the offset of " + fqn) : std::vector<int64_t>{}}] =
          storage_info(value, fqn);
    }
    return out;
  }

  StorageInfo storage_info(NodeId id, const std::string& fqn) const {
    const auto f = object_fields(id, kStorageInfo);
    StorageInfo info;
    info.relative_path = str(field(f, "relative_path", "_StorageInfo"), "the file of " + fqn);
    info.offset = integer(field(f, "offset", "_StorageInfo"), "the offset of " + fqn);
    info.length = integer(field(f, "length", "_StorageInfo"), "the length of " + fqn);
    const auto& p = info.relative_path;
    if (p.empty() || p.find('/') != std::string::npos || p.find('\\') != std::string::npos ||
        p == "." || p == "..") {
      fail("the file of " + fqn + " is '" + p +
           "', not a plain name in the checkpoint's directory");
    }
    if (info.offset < 0 || info.length < 0) fail("a negative offset or length for " + fqn);
    if (const auto t = f.find("transform_descriptors"); t != f.end() && !is_none(t->second) &&
                                                         !sequence(t->second, "the transforms of " + fqn).empty()) {
      fail(fqn + " is stored transformed (compressed or otherwise), which dpx does not read");
    }
    return info;
  }

  StorageInfo find_storage(const std::map<StorageKey, StorageInfo>& storage, const StorageKey& key,
                           const std::string& fqn) const {
    const auto it = storage.find(key);
    if (it == storage.end()) fail(fqn + " has a chunk with no storage entry (where its bytes are)");
    return it->second;
  }

  TensorEntry tensor(NodeId id, const std::string& fqn,
                     const std::map<StorageKey, StorageInfo>& storage) const {
    const std::string cls = kModule + "TensorStorageMetadata";
    const auto f = object_fields(id, cls);
    TensorEntry t;
    t.dtype = dtype(field(f, "properties", cls), fqn);
    t.size = dims(field(f, "size", cls), "the size of " + fqn);
    int64_t numel = 1;
    for (const int64_t d : t.size) {
      if (__builtin_mul_overflow(numel, d, &numel)) fail("the size of " + fqn + " overflows");
    }
    for (const NodeId c : sequence(field(f, "chunks", cls), "the chunks of " + fqn)) {
      const auto cf = object_fields(c, kModule + "ChunkStorageMetadata");
      Chunk chunk;
      chunk.offsets = dims(field(cf, "offsets", "ChunkStorageMetadata"), "a chunk of " + fqn);
      chunk.sizes = dims(field(cf, "sizes", "ChunkStorageMetadata"), "a chunk of " + fqn);
      if (chunk.offsets.size() != t.size.size() || chunk.sizes.size() != t.size.size()) {
        fail("a chunk of " + fqn + " has another number of dimensions than the tensor");
      }
      for (size_t d = 0; d < t.size.size(); ++d) {
        if (chunk.offsets[d] > t.size[d] || chunk.sizes[d] > t.size[d] - chunk.offsets[d]) {
          fail("a chunk of " + fqn + " reaches outside the tensor (dimension " +
               std::to_string(d) + ")");
        }
      }
      chunk.storage = find_storage(storage, {fqn, true, chunk.offsets}, fqn);
      // A torch.save of the chunk holds at least its elements' bytes; so no tensor is larger
      // than the files that hold it, and no loader allocates for sizes a file only claims.
      int64_t volume = static_cast<int64_t>(c10::elementSize(t.dtype));
      for (const int64_t s : chunk.sizes) {
        if (__builtin_mul_overflow(volume, s, &volume)) fail("a chunk of " + fqn + " overflows");
      }
      if (chunk.storage.length < volume) {
        fail("a chunk of " + fqn + " has " + std::to_string(chunk.storage.length) +
             " bytes of storage, " +
             "fewer than its " + std::to_string(volume) + " bytes of elements");
      }
      t.chunks.push_back(std::move(chunk));
    }
    check_cover(t, fqn, numel);
    return t;
  }

  // The chunks tile the tensor: none overlaps another, and their volumes add up to the whole.
  void check_cover(TensorEntry& t, const std::string& fqn, int64_t numel) const {
    const auto volume = [](const Chunk& c) {
      int64_t v = 1;
      for (const int64_t s : c.sizes) v *= s;  // inside the tensor: no overflow
      return v;
    };
    std::vector<const Chunk*> live;
    int64_t covered = 0;
    for (const auto& c : t.chunks) {
      if (volume(c) == 0) continue;
      if (__builtin_add_overflow(covered, volume(c), &covered) || covered > numel) {
        fail("chunks of " + fqn + " overlap");
      }
      live.push_back(&c);
    }
    if (covered != numel) {
      fail("the chunks of " + fqn + " cover " + std::to_string(covered) + " of its " +
           std::to_string(numel) + " elements");
    }
    if (t.size.empty()) return;
    std::sort(live.begin(), live.end(),
              [](const Chunk* a, const Chunk* b) { return a->offsets[0] < b->offsets[0]; });
    int64_t budget = kOverlapBudget;
    for (size_t i = 0; i < live.size(); ++i) {
      const Chunk& a = *live[i];
      for (size_t j = i + 1; j < live.size() && live[j]->offsets[0] < a.offsets[0] + a.sizes[0];
           ++j) {
        if (--budget < 0) fail("too many chunks of " + fqn + " share rows to check them");
        const Chunk& b = *live[j];
        bool overlap = true;
        for (size_t d = 0; d < a.sizes.size() && overlap; ++d) {
          overlap = a.offsets[d] < b.offsets[d] + b.sizes[d] &&
                    b.offsets[d] < a.offsets[d] + a.sizes[d];
        }
        if (overlap) fail("chunks of " + fqn + " overlap");
      }
    }
  }

  // TensorProperties' state: the tuple (dtype, layout, requires_grad, memory_format,
  // pin_memory[, strides]) of its __setstate__, or a dict of fields.
  c10::ScalarType dtype(NodeId id, const std::string& fqn) const {
    const std::string cls = kModule + "TensorProperties";
    if (class_of(id) != cls) fail("the properties of " + fqn + " are " + describe(id));
    if (node(id).items.empty()) fail("the properties of " + fqn + " are empty");
    const NodeId state = node(id).items[0];
    NodeId dtype_node;
    if (node(state).kind == Node::kTuple) {
      if (node(state).items.empty()) fail("the properties of " + fqn + " are empty");
      dtype_node = node(state).items[0];
    } else {
      dtype_node = field(object_fields(id, cls), "dtype", "TensorProperties");
    }
    if (node(dtype_node).kind != Node::kGlobal) fail("the dtype of " + fqn + " is not a dtype");
    const std::string name = node(dtype_node).value.toStringRef().substr(6);  // after "torch."
    const auto t = dtype_named(name);
    if (!t) fail("the dtype of " + fqn + " is torch." + name + ", which dpx does not read");
    return *t;
  }

  const PickleGraph& g_;
  std::string what_;
};

}  // namespace

Metadata parse_metadata(const std::string& pickle, const std::string& what,
                        const TorchLoadLimits& limits) {
  auto objects = pickle_load_dcp_metadata(pickle, what, limits);
  return Walker(objects.graph, what).metadata(objects.root);
}

Metadata read_metadata(const std::string& dir, const TorchLoadLimits& limits) {
  const std::string path = dir + "/.metadata";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw CheckpointError("DCP checkpoint " + dir +
                          ": no .metadata file (not a DCP checkpoint, or a save that did not "
                          "finish: its writers write .metadata last)");
  }
  if (st.st_size > kMaxMetadataBytes) {
    throw CheckpointError(path + " is " + std::to_string(st.st_size) + " bytes, over dpx's " +
                          std::to_string(kMaxMetadataBytes) + "-byte bound for a .metadata");
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (!in.good() && !in.eof()) throw CheckpointError("cannot read " + path);
  return parse_metadata(bytes.str(), path, limits);
}

}  // namespace dpx::detail::dcp
