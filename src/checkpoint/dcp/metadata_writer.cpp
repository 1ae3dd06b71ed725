// DCP's .metadata as PyTorch's own pickle.load reads it (metadata.h). A small emitter of the
// protocol 2 opcodes that these objects need; no memo (nothing is shared).
#include <cstring>

#include "checkpoint/dcp/metadata.h"
#include "checkpoint/python_format/pickle.h"

namespace dpx::detail::dcp {
namespace {

const char* const kMetadataModule = "torch.distributed.checkpoint.metadata";

class Emitter {
 public:
  std::string finish() {
    out_ += '.';  // STOP
    return std::move(out_);
  }

  void proto() { out_ += "\x80\x02"; }
  void none() { out_ += 'N'; }
  void boolean(bool b) { out_ += b ? '\x88' : '\x89'; }
  void mark() { out_ += '('; }
  void tuple_from_mark() { out_ += 't'; }
  void empty_tuple() { out_ += ')'; }
  void empty_dict() { out_ += '}'; }
  void empty_list() { out_ += ']'; }
  void setitems() { out_ += 'u'; }
  void appends() { out_ += 'e'; }
  void reduce() { out_ += 'R'; }

  void integer(int64_t v) {
    if (v >= 0 && v <= 0xffff) {
      out_ += v <= 0xff ? 'K' : 'M';
      raw(&v, v <= 0xff ? 1 : 2);  // little-endian machine, as the files are
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      const auto v32 = static_cast<int32_t>(v);
      out_ += 'J';
      raw(&v32, 4);
    } else {
      out_ += "\x8a\x08";  // LONG1, 8 bytes of two's complement
      raw(&v, 8);
    }
  }

  void string(const std::string& s) {
    const auto n = static_cast<uint32_t>(s.size());
    out_ += 'X';
    raw(&n, 4);
    out_ += s;
  }

  void global(const std::string& module, const std::string& name) {
    out_ += 'c' + module + '\n' + name + '\n';
  }

  void ints(const std::vector<int64_t>& xs) {
    mark();
    for (const int64_t x : xs) integer(x);
    tuple_from_mark();
  }

  // torch.Size(xs)
  void size(const std::vector<int64_t>& xs) {
    global("torch", "Size");
    mark();
    ints(xs);
    tuple_from_mark();
    reduce();
  }

  // cls.__new__(cls), whose state the caller pushes next; then build().
  void new_object(const std::string& module, const std::string& cls) {
    global(module, cls);
    empty_tuple();
    out_ += '\x81';  // NEWOBJ
  }
  void build() { out_ += 'b'; }

 private:
  void raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }

  std::string out_;
};

// The fields of a dataclass's state, in order: key, then what `value` pushes.
template <typename F>
void field(Emitter& e, const char* key, F&& value) {
  e.string(key);
  value();
}

void tensor_properties(Emitter& e, c10::ScalarType dtype) {
  e.new_object(kMetadataModule, "TensorProperties");
  e.mark();  // (dtype, layout, requires_grad, memory_format, pin_memory)
  e.global("torch", dtype_python_name(dtype));
  e.global("torch.serialization", "_get_layout");
  e.mark();
  e.string("torch.strided");
  e.tuple_from_mark();
  e.reduce();
  e.boolean(false);
  e.global("builtins", "getattr");
  e.mark();
  e.global(kMetadataModule, "_MEM_FORMAT_ENCODING");
  e.string("TORCH_CONTIGUOUS_FORMAT");
  e.tuple_from_mark();
  e.reduce();
  e.boolean(false);
  e.tuple_from_mark();
  e.build();
}

void tensor_entry(Emitter& e, const TensorEntry& t) {
  e.new_object(kMetadataModule, "TensorStorageMetadata");
  e.empty_dict();
  e.mark();
  field(e, "properties", [&] { tensor_properties(e, t.dtype); });
  field(e, "size", [&] { e.size(t.size); });
  field(e, "chunks", [&] {
    e.empty_list();
    e.mark();
    for (const auto& c : t.chunks) {
      e.new_object(kMetadataModule, "ChunkStorageMetadata");
      e.empty_dict();
      e.mark();
      field(e, "offsets", [&] { e.size(c.offsets); });
      field(e, "sizes", [&] { e.size(c.sizes); });
      e.setitems();
      e.build();
    }
    e.appends();
  });
  e.setitems();
  e.build();
}

void storage_info(Emitter& e, const StorageInfo& info) {
  e.new_object("torch.distributed.checkpoint.filesystem", "_StorageInfo");
  e.empty_dict();
  e.mark();
  field(e, "relative_path", [&] { e.string(info.relative_path); });
  field(e, "offset", [&] { e.integer(info.offset); });
  field(e, "length", [&] { e.integer(info.length); });
  e.setitems();
  e.build();
}

void storage_entry(Emitter& e, const std::string& fqn, const Chunk& c, int64_t index) {
  e.new_object(kMetadataModule, "MetadataIndex");  // the key
  e.empty_dict();
  e.mark();
  field(e, "fqn", [&] { e.string(fqn); });
  field(e, "offset", [&] { e.size(c.offsets); });
  field(e, "index", [&] { e.integer(index); });
  e.setitems();
  e.build();
  storage_info(e, c.storage);
}

// An object's key: MetadataIndex(fqn), offset and index None.
void object_storage_entry(Emitter& e, const std::string& fqn, const StorageInfo& info) {
  e.new_object(kMetadataModule, "MetadataIndex");
  e.empty_dict();
  e.mark();
  field(e, "fqn", [&] { e.string(fqn); });
  field(e, "offset", [&] { e.none(); });
  field(e, "index", [&] { e.none(); });
  e.setitems();
  e.build();
  storage_info(e, info);
}

}  // namespace

std::string pickle_metadata(const Metadata& m) {
  Emitter e;
  e.proto();
  e.new_object(kMetadataModule, "Metadata");
  e.empty_dict();
  e.mark();
  field(e, "state_dict_metadata", [&] {
    e.empty_dict();
    e.mark();
    for (const auto& [fqn, t] : m.tensors) {
      e.string(fqn);
      tensor_entry(e, t);
    }
    for (const auto& [fqn, info] : m.objects) {
      e.string(fqn);
      e.new_object(kMetadataModule, "BytesStorageMetadata");  // no fields: no state to build
    }
    e.setitems();
  });
  field(e, "planner_data", [&] {
    e.empty_dict();
    e.mark();
    for (const auto& [fqn, path] : m.planner_data) {
      e.string(fqn);
      e.mark();
      for (const auto& part : path) {
        if (const auto* index = std::get_if<int64_t>(&part)) {
          e.integer(*index);
        } else {
          e.string(std::get<std::string>(part));
        }
      }
      e.tuple_from_mark();
    }
    e.setitems();
  });
  field(e, "storage_data", [&] {
    e.empty_dict();
    e.mark();
    for (const auto& [fqn, t] : m.tensors) {
      for (size_t i = 0; i < t.chunks.size(); ++i) {
        storage_entry(e, fqn, t.chunks[i], static_cast<int64_t>(i));
      }
    }
    for (const auto& [fqn, info] : m.objects) object_storage_entry(e, fqn, info);
    e.setitems();
  });
  field(e, "storage_meta", [&] { e.none(); });
  field(e, "version", [&] { e.string(m.version); });
  e.setitems();
  e.build();
  return e.finish();
}

}  // namespace dpx::detail::dcp
