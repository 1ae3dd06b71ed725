// The pickle writer: protocol 2 opcodes, no memo (each object is written once; tensors never
// share storages here, so nothing needs a back reference).
#include <c10/util/Exception.h>

#include <cstdint>
#include <cstring>

#include "checkpoint/python_format/pickle.h"

namespace dpx::detail {
namespace {

struct StorageName {
  c10::ScalarType dtype;
  const char* name;         // torch.<name>Storage
  const char* python_name;  // torch.<python_name>, the dtype
};

constexpr StorageName kStorageNames[] = {
    {c10::kFloat, "Float", "float32"},       {c10::kDouble, "Double", "float64"},
    {c10::kHalf, "Half", "float16"},         {c10::kBFloat16, "BFloat16", "bfloat16"},
    {c10::kLong, "Long", "int64"},           {c10::kInt, "Int", "int32"},
    {c10::kShort, "Short", "int16"},         {c10::kChar, "Char", "int8"},
    {c10::kByte, "Byte", "uint8"},           {c10::kBool, "Bool", "bool"},
};

class Writer {
 public:
  explicit Writer(std::vector<at::Tensor>& storages) : storages_(storages) {}

  std::string finish(const c10::IValue& v) {
    out_ += "\x80\x02";  // PROTO 2
    value(v);
    out_ += '.';  // STOP
    return std::move(out_);
  }

 private:
  void raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }

  void integer(int64_t v) {
    if (v >= 0 && v < 256) {
      out_ += 'K';  // BININT1
      out_ += static_cast<char>(v);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      out_ += 'J';  // BININT, little-endian
      const int32_t x = static_cast<int32_t>(v);
      raw(&x, 4);
    } else {
      out_ += "\x8a\x08";  // LONG1, 8 bytes two's complement little-endian
      raw(&v, 8);
    }
  }

  void real(double v) {
    out_ += 'G';  // BINFLOAT, big-endian
    uint64_t bits;
    std::memcpy(&bits, &v, 8);
    for (int i = 7; i >= 0; --i) out_ += static_cast<char>((bits >> (8 * i)) & 0xff);
  }

  void text(const std::string& s) {
    out_ += 'X';  // BINUNICODE
    const uint32_t n = static_cast<uint32_t>(s.size());
    raw(&n, 4);
    out_ += s;
  }

  void global(const char* module, const std::string& name) {
    out_ += 'c';
    out_ += module;
    out_ += '\n';
    out_ += name;
    out_ += '\n';
  }

  void int_tuple(c10::IntArrayRef xs) {
    out_ += '(';  // MARK
    for (const int64_t x : xs) integer(x);
    out_ += 't';  // TUPLE
  }

  void tensor(const at::Tensor& t) {
    TORCH_CHECK(!t.is_sparse() && !t.is_quantized(),
                "torch.save writer: only dense tensors are "
                "written, got layout ",
                t.layout());
    const at::Tensor data = t.detach().to(c10::kCPU).contiguous();
    const std::string key = std::to_string(storages_.size());
    storages_.push_back(data);
    global("torch._utils", "_rebuild_tensor_v2");
    out_ += '(';
    // The persistent id: ('storage', torch.<Type>Storage, key, 'cpu', numel), then BINPERSID.
    out_ += '(';
    text("storage");
    global("torch", storage_type_name(data.scalar_type()) + "Storage");
    text(key);
    text("cpu");
    integer(data.numel());
    out_ += "tQ";
    integer(0);  // storage offset
    int_tuple(data.sizes());
    int_tuple(data.strides());
    out_ += '\x89';                        // requires_grad False
    global("collections", "OrderedDict");  // backward hooks: OrderedDict()
    out_ += ")R";
    out_ += "tR";
  }

  void list(const c10::ArrayRef<c10::IValue> items) {
    out_ += "](";  // EMPTY_LIST, MARK
    for (const auto& x : items) value(x);
    out_ += 'e';  // APPENDS
  }

  void value(const c10::IValue& v) {
    if (v.isNone()) {
      out_ += 'N';
    } else if (v.isBool()) {
      out_ += v.toBool() ? '\x88' : '\x89';
    } else if (v.isInt()) {
      integer(v.toInt());
    } else if (v.isDouble()) {
      real(v.toDouble());
    } else if (v.isString()) {
      text(v.toStringRef());
    } else if (v.isTensor()) {
      tensor(v.toTensor());
    } else if (v.isTuple()) {
      out_ += '(';
      for (const auto& x : v.toTupleRef().elements()) value(x);
      out_ += 't';
    } else if (v.isList()) {
      list(v.toListRef());
    } else if (v.isGenericDict()) {
      out_ += "}(";  // EMPTY_DICT, MARK
      for (const auto& kv : v.toGenericDict()) {
        value(kv.key());
        value(kv.value());
      }
      out_ += 'u';  // SETITEMS
    } else {
      TORCH_CHECK(false, "torch.save writer: cannot write a value of type ", v.tagKind(),
                  "; only tensors, dicts, lists, tuples, ints, floats, bools, strings and None");
    }
  }

  std::vector<at::Tensor>& storages_;
  std::string out_;
};

}  // namespace

std::string storage_type_name(c10::ScalarType dtype) {
  for (const auto& s : kStorageNames) {
    if (s.dtype == dtype) return s.name;
  }
  TORCH_CHECK(false, "torch.save writer: no torch storage type for dtype ", dtype);
}

std::optional<c10::ScalarType> storage_dtype_named(const std::string& name) {
  for (const auto& s : kStorageNames) {
    if (s.name == name) return s.dtype;
  }
  return std::nullopt;
}

std::string dtype_python_name(c10::ScalarType dtype) {
  for (const auto& s : kStorageNames) {
    if (s.dtype == dtype) return s.python_name;
  }
  TORCH_CHECK(false, "no Python name for dtype ", dtype, " among those dpx's files hold");
}

std::optional<c10::ScalarType> dtype_named(const std::string& python_name) {
  for (const auto& s : kStorageNames) {
    if (s.python_name == python_name) return s.dtype;
  }
  return std::nullopt;
}

std::string pickle_dump(const c10::IValue& value, std::vector<at::Tensor>& storages) {
  return Writer(storages).finish(value);
}

}  // namespace dpx::detail
