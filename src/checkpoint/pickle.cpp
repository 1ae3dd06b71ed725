#include "checkpoint/pickle.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <map>
#include <utility>

#include "dpx/checkpoint/checkpoint_file.h"

namespace dpx::detail {
namespace {

// torch.<Name>Storage of each dtype, the names torch.save writes and weights_only accepts.
const std::vector<std::pair<at::ScalarType, const char*>>& storage_names() {
  static const std::vector<std::pair<at::ScalarType, const char*>> names = {
      {at::kFloat, "FloatStorage"},   {at::kDouble, "DoubleStorage"},
      {at::kHalf, "HalfStorage"},     {at::kBFloat16, "BFloat16Storage"},
      {at::kLong, "LongStorage"},     {at::kInt, "IntStorage"},
      {at::kShort, "ShortStorage"},   {at::kChar, "CharStorage"},
      {at::kByte, "ByteStorage"},     {at::kBool, "BoolStorage"},
      {at::kComplexFloat, "ComplexFloatStorage"},
      {at::kComplexDouble, "ComplexDoubleStorage"}};
  return names;
}

class Writer {
 public:
  explicit Writer(std::vector<at::Tensor>& storages) : storages_(storages) {}

  std::string run(const c10::IValue& v) {
    out_ += "\x80\x02";
    value(v);
    out_ += '.';
    return std::move(out_);
  }

 private:
  void global(const std::string& module, const std::string& name) {
    out_ += 'c' + module + '\n' + name + '\n';
  }
  void integer(int64_t x) {
    if (x >= 0 && x < 256) {
      out_ += 'K';
      out_ += static_cast<char>(x);
    } else if (x >= INT32_MIN && x <= INT32_MAX) {
      out_ += 'J';
      le(static_cast<int32_t>(x));
    } else {
      out_ += "\x8a\x08";
      le(x);
    }
  }
  void string(const std::string& s) {
    out_ += 'X';
    le(static_cast<uint32_t>(s.size()));
    out_ += s;
  }
  template <typename T>
  void le(T x) {
    char b[sizeof(T)];
    std::memcpy(b, &x, sizeof(T));  // x86-64 and aarch64 Linux: little-endian
    out_.append(b, sizeof(T));
  }
  void ints(at::IntArrayRef xs) {
    if (xs.empty()) {
      out_ += ')';
      return;
    }
    out_ += '(';
    for (auto x : xs) integer(x);
    out_ += 't';
  }
  void tensor(const at::Tensor& t) {
    const at::Tensor c = t.detach().to(at::kCPU).contiguous();
    const char* type = nullptr;
    for (const auto& [dtype, name] : storage_names()) {
      if (dtype == c.scalar_type()) type = name;
    }
    TORCH_CHECK(type != nullptr, "dpx cannot write a tensor of dtype ", c.scalar_type(),
                " in torch.save's format");
    global("torch._utils", "_rebuild_tensor_v2");
    out_ += "((";  // the call's arguments, then the persistent id
    string("storage");
    global("torch", type);
    string(std::to_string(storages_.size()));
    string("cpu");
    integer(c.numel());
    out_ += "tQ";
    storages_.push_back(c);
    integer(0);
    ints(c.sizes());
    ints(c.strides());
    out_ += '\x89';  // requires_grad False
    global("collections", "OrderedDict");  // backward hooks: none
    out_ += ")Rt";
    out_ += 'R';
  }
  void value(const c10::IValue& v) {
    if (v.isNone()) {
      out_ += 'N';
    } else if (v.isBool()) {
      out_ += v.toBool() ? '\x88' : '\x89';
    } else if (v.isInt()) {
      integer(v.toInt());
    } else if (v.isDouble()) {
      out_ += 'G';
      uint64_t bits;
      const double d = v.toDouble();
      std::memcpy(&bits, &d, 8);
      for (int i = 7; i >= 0; --i) out_ += static_cast<char>((bits >> (8 * i)) & 0xff);
    } else if (v.isString()) {
      string(v.toStringRef());
    } else if (v.isTensor()) {
      tensor(v.toTensor());
    } else if (v.isList()) {
      out_ += ']';
      const auto list = v.toList();
      if (list.empty()) return;
      out_ += '(';
      for (const auto& x : list) value(x);
      out_ += 'e';
    } else if (v.isTuple()) {
      const auto& items = v.toTupleRef().elements();
      if (items.empty()) {
        out_ += ')';
        return;
      }
      out_ += '(';
      for (const auto& x : items) value(x);
      out_ += 't';
    } else if (v.isGenericDict()) {
      global("collections", "OrderedDict");
      out_ += ")R";
      const auto dict = v.toGenericDict();
      if (dict.empty()) return;
      out_ += '(';
      for (const auto& kv : dict) {
        value(kv.key());
        value(kv.value());
      }
      out_ += 'u';
    } else {
      TORCH_CHECK(false, "dpx cannot write a ", v.tagKind(), " in torch.save's format");
    }
  }

  std::vector<at::Tensor>& storages_;
  std::string out_;
};

// A global on the stack: a string no pickle of ours holds, naming module.name.
const std::string kGlobal("\0G", 2);

class Reader {
 public:
  Reader(const std::string& bytes, const StorageLoader& load, const std::string& file)
      : in_(bytes), load_(load), file_(file) {}

  c10::IValue run() {
    while (true) {
      const char op = next(1)[0];
      if (op == '.') break;
      step(op);
    }
    if (stack_.size() != 1) bad("it leaves " + std::to_string(stack_.size()) + " values");
    return stack_.back();
  }

 private:
  [[noreturn]] void bad(const std::string& what) {
    throw CheckpointError("checkpoint " + file_ + " is not a weights file torch.load can read: " +
                          what);
  }
  const char* next(size_t n) {
    if (pos_ + n > in_.size()) bad("its pickle is truncated");
    const char* p = in_.data() + pos_;
    pos_ += n;
    return p;
  }
  template <typename T>
  T le() {
    T x;
    std::memcpy(&x, next(sizeof(T)), sizeof(T));
    return x;
  }
  std::string line() {
    const auto end = in_.find('\n', pos_);
    if (end == std::string::npos) bad("its pickle is truncated");
    std::string s = in_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return s;
  }
  c10::IValue pop() {
    if (stack_.empty() || is_mark()) bad("its pickle pops an empty stack");
    c10::IValue v = stack_.back();
    stack_.pop_back();
    return v;
  }
  bool is_mark() const { return marks_.size() > 0 && marks_.back() == stack_.size(); }
  std::vector<c10::IValue> pop_to_mark() {
    if (marks_.empty()) bad("its pickle has no MARK where one is needed");
    std::vector<c10::IValue> items(stack_.begin() + marks_.back(), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  c10::IValue& top() {
    if (stack_.empty()) bad("its pickle works on an empty stack");
    return stack_.back();
  }
  static c10::IValue tuple(std::vector<c10::IValue> items) {
    return c10::ivalue::Tuple::create(std::move(items));
  }
  static c10::impl::GenericDict dict() {
    return c10::impl::GenericDict(c10::AnyType::get(), c10::AnyType::get());
  }
  void push_global(const std::string& module, const std::string& name) {
    const std::string full = module + "." + name;
    const bool storage = module == "torch" && dtype_of(name).has_value();
    if (full != "collections.OrderedDict" && full != "torch._utils._rebuild_tensor_v2" &&
        full != "torch._utils._rebuild_parameter" && !storage) {
      bad("its pickle refers to " + full + ", which a file of tensors does not hold (dpx reads "
          "dicts, lists, numbers, strings and tensors, as torch.load(weights_only=True) does)");
    }
    stack_.push_back(kGlobal + full);
  }
  static std::optional<at::ScalarType> dtype_of(const std::string& storage) {
    for (const auto& [dtype, name] : storage_names()) {
      if (storage == name) return dtype;
    }
    return std::nullopt;
  }
  std::string global_name(const c10::IValue& v) {
    if (!v.isString() || v.toStringRef().rfind(kGlobal, 0) != 0) bad("it calls a non-global");
    return v.toStringRef().substr(kGlobal.size());
  }
  std::vector<int64_t> ints(const c10::IValue& v) {
    if (!v.isTuple()) bad("a tensor's size or stride is not a tuple");
    std::vector<int64_t> out;
    for (const auto& x : v.toTupleRef().elements()) {
      if (!x.isInt()) bad("a tensor's size or stride is not made of ints");
      out.push_back(x.toInt());
    }
    return out;
  }
  c10::IValue reduce(const std::string& fn, const std::vector<c10::IValue>& args) {
    if (fn == "collections.OrderedDict") return dict();
    if (fn == "torch._utils._rebuild_parameter") {
      if (args.empty() || !args[0].isTensor()) bad("_rebuild_parameter without a tensor");
      return args[0];
    }
    if (args.size() < 4 || !args[0].isTensor() || !args[1].isInt()) {
      bad("_rebuild_tensor_v2 with unexpected arguments");
    }
    const at::Tensor storage = args[0].toTensor();
    const auto size = ints(args[2]), stride = ints(args[3]);
    const int64_t offset = args[1].toInt();
    int64_t last = offset;  // the farthest element the view reaches must be in the storage
    for (size_t d = 0; d < size.size() && d < stride.size(); ++d) {
      if (size[d] == 0) last = -1;
      if (last >= 0) last += (size[d] - 1) * stride[d];
    }
    if (size.size() != stride.size() || offset < 0 || last >= storage.numel()) {
      bad("a tensor reaches beyond its storage");
    }
    return storage.as_strided(size, stride, offset);
  }
  c10::IValue persistent(const c10::IValue& id) {
    if (!id.isTuple() || id.toTupleRef().elements().size() != 5) bad("an unknown persistent id");
    const auto& e = id.toTupleRef().elements();
    if (!e[0].isString() || e[0].toStringRef() != "storage" || !e[2].isString() || !e[4].isInt()) {
      bad("an unknown persistent id");
    }
    const std::string type = global_name(e[1]);
    const auto dtype = dtype_of(type.substr(type.find('.') + 1));
    if (!dtype) bad("a storage of unknown type " + type);
    const std::string key = e[2].toStringRef();
    auto it = storages_.find(key);
    if (it == storages_.end()) it = storages_.emplace(key, load_(key, *dtype, e[4].toInt())).first;
    return it->second;
  }
  void setitems(std::vector<c10::IValue> items) {
    auto target = top();
    if (!target.isGenericDict() || items.size() % 2) bad("SETITEMS on a non-dict");
    auto d = target.toGenericDict();
    for (size_t i = 0; i < items.size(); i += 2) d.insert_or_assign(items[i], items[i + 1]);
  }
  void appends(std::vector<c10::IValue> items) {
    auto target = top();
    if (!target.isList()) bad("APPENDS on a non-list");
    auto l = target.toList();
    for (auto& x : items) l.push_back(std::move(x));
  }
  void memo_put(uint32_t at) { memo_[at] = top(); }
  void memo_get(uint32_t at) {
    auto it = memo_.find(at);
    if (it == memo_.end()) bad("its pickle reads an unset memo entry");
    stack_.push_back(it->second);
  }
  void step(char op);

  const std::string& in_;
  const StorageLoader& load_;
  const std::string& file_;
  size_t pos_ = 0;
  std::vector<c10::IValue> stack_;
  std::vector<size_t> marks_;
  std::map<uint32_t, c10::IValue> memo_;
  std::map<std::string, at::Tensor> storages_;
};

void Reader::step(char op) {
  switch (static_cast<unsigned char>(op)) {
    case 0x80: next(1); break;                       // PROTO
    case 0x95: next(8); break;                       // FRAME
    case '(': marks_.push_back(stack_.size()); break;  // MARK
    case '0': pop(); break;                          // POP
    case '1': pop_to_mark(); break;                  // POP_MARK
    case 'N': stack_.emplace_back(); break;
    case 0x88: stack_.emplace_back(true); break;
    case 0x89: stack_.emplace_back(false); break;
    case 'K': stack_.emplace_back(static_cast<int64_t>(le<uint8_t>())); break;
    case 'M': stack_.emplace_back(static_cast<int64_t>(le<uint16_t>())); break;
    case 'J': stack_.emplace_back(static_cast<int64_t>(le<int32_t>())); break;
    case 0x8a: {                                     // LONG1
      const auto n = le<uint8_t>();
      if (n > 8) bad("an integer wider than 64 bits");
      const char* p = next(n);
      uint64_t x = 0;
      for (int i = n - 1; i >= 0; --i) x = (x << 8) | static_cast<unsigned char>(p[i]);
      if (n > 0 && n < 8 && (p[n - 1] & 0x80)) x |= ~uint64_t{0} << (8 * n);  // sign
      stack_.emplace_back(static_cast<int64_t>(x));
      break;
    }
    case 'G': {                                      // BINFLOAT, big-endian
      const char* p = next(8);
      uint64_t bits = 0;
      for (int i = 0; i < 8; ++i) bits = (bits << 8) | static_cast<unsigned char>(p[i]);
      double d;
      std::memcpy(&d, &bits, 8);
      stack_.emplace_back(d);
      break;
    }
    case 'X': { const auto n = le<uint32_t>(); stack_.emplace_back(std::string(next(n), n)); break; }
    case 0x8c: { const auto n = le<uint8_t>(); stack_.emplace_back(std::string(next(n), n)); break; }
    case 0x8d: { const auto n = le<uint64_t>(); stack_.emplace_back(std::string(next(n), n)); break; }
    case 'U': { const auto n = le<uint8_t>(); stack_.emplace_back(std::string(next(n), n)); break; }
    case ']': stack_.emplace_back(c10::impl::GenericList(c10::AnyType::get())); break;
    case 'a': { auto x = pop(); appends({x}); break; }
    case 'e': appends(pop_to_mark()); break;
    case ')': stack_.push_back(tuple({})); break;
    case 't': stack_.push_back(tuple(pop_to_mark())); break;
    case 0x85: { auto a = pop(); stack_.push_back(tuple({a})); break; }
    case 0x86: { auto b = pop(), a = pop(); stack_.push_back(tuple({a, b})); break; }
    case 0x87: { auto c = pop(), b = pop(), a = pop(); stack_.push_back(tuple({a, b, c})); break; }
    case '}': stack_.emplace_back(dict()); break;
    case 's': { auto v = pop(), k = pop(); setitems({k, v}); break; }
    case 'u': setitems(pop_to_mark()); break;
    case 'c': { auto module = line(); auto name = line(); push_global(module, name); break; }
    case 0x93: {                                     // STACK_GLOBAL
      auto name = pop(), module = pop();
      if (!name.isString() || !module.isString()) bad("STACK_GLOBAL without names");
      push_global(module.toStringRef(), name.toStringRef());
      break;
    }
    case 'R': {
      auto args = pop();
      const std::string fn = global_name(pop());
      if (!args.isTuple()) bad("REDUCE without an argument tuple");
      stack_.push_back(reduce(fn, args.toTupleRef().elements().vec()));
      break;
    }
    case 'b': {                                      // BUILD: an OrderedDict's _metadata
      auto state = pop();
      if (!top().isGenericDict()) bad("BUILD on something other than a dict");
      break;
    }
    case 'Q': { auto id = pop(); stack_.push_back(persistent(id)); break; }
    case 'q': memo_put(le<uint8_t>()); break;
    case 'r': memo_put(le<uint32_t>()); break;
    case 0x94: memo_put(static_cast<uint32_t>(memo_.size())); break;  // MEMOIZE
    case 'h': memo_get(le<uint8_t>()); break;
    case 'j': memo_get(le<uint32_t>()); break;
    default:
      bad("its pickle has opcode 0x" + c10::str(std::hex, static_cast<int>(
                                               static_cast<unsigned char>(op))) +
          ", which a weights file does not use");
  }
}

}  // namespace

std::string pickle_weights(const c10::IValue& value, std::vector<at::Tensor>& storages) {
  return Writer(storages).run(value);
}

c10::IValue unpickle_weights(const std::string& bytes, const StorageLoader& load,
                             const std::string& file) {
  try {
    return Reader(bytes, load, file).run();
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& e) {
    throw CheckpointError("checkpoint " + file + " is not a weights file torch.load can read: " +
                          std::string(e.what()).substr(0, std::string(e.what()).find('\n')));
  }
}

}  // namespace dpx::detail
