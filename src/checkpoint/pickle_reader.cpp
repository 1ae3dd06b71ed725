// The restricted unpickler (see pickle.h): a stack machine over the protocol 0-2 opcodes that
// torch.save writes, refusing every global outside a short allow-list.
#include <ATen/ATen.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <optional>

#include "checkpoint/pickle.h"
#include "dpx/checkpoint/checkpoint_file.h"

namespace dpx::detail {
namespace {

// A stack entry: a value, a resolved global, or a tuple (tuples may hold globals, as the
// persistent ids do, so they stay unconverted until they land in a container).
struct Item {
  enum Kind { kValue, kGlobal, kTuple } kind = kValue;
  c10::IValue value;
  std::string global;
  std::vector<Item> items;
};

const char* const kAllowedGlobals[] = {"collections.OrderedDict", "torch._utils._rebuild_tensor_v2",
                                       "torch._utils._rebuild_parameter"};

std::optional<c10::ScalarType> storage_dtype(const std::string& global) {
  const std::string prefix = "torch.", suffix = "Storage";
  if (global.rfind(prefix, 0) != 0 || global.size() <= prefix.size() + suffix.size() ||
      global.compare(global.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return std::nullopt;
  }
  const auto name = global.substr(prefix.size(), global.size() - prefix.size() - suffix.size());
  for (int i = 0; i < static_cast<int>(c10::ScalarType::NumOptions); ++i) {
    const auto t = static_cast<c10::ScalarType>(i);
    try {
      if (storage_type_name(t) == name) return t;
    } catch (const c10::Error&) {}
  }
  return std::nullopt;
}

class Reader {
 public:
  Reader(const std::string& data, const StorageLoader& load, const std::string& what)
      : data_(data), load_(load), what_(what) {}

  c10::IValue run();

 private:
  [[noreturn]] void fail(const std::string& msg) const {
    throw CheckpointError(what_ + ": " + msg + " (at byte " + std::to_string(pos_) +
                          " of the pickle)");
  }
  const char* take(size_t n) {
    if (pos_ + n > data_.size()) fail("the pickle ends early (truncated file?)");
    const char* p = data_.data() + pos_;
    pos_ += n;
    return p;
  }
  template <typename T>
  T le() {
    T v;
    std::memcpy(&v, take(sizeof(T)), sizeof(T));
    return v;
  }
  std::string line() {
    const auto end = data_.find('\n', pos_);
    if (end == std::string::npos) fail("the pickle ends early (truncated file?)");
    std::string s = data_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return s;
  }
  Item pop() {
    if (stack_.empty()) fail("malformed pickle: pop from an empty stack");
    Item it = std::move(stack_.back());
    stack_.pop_back();
    return it;
  }
  std::vector<Item> pop_to_mark() {
    if (marks_.empty()) fail("malformed pickle: no MARK");
    const size_t m = marks_.back();
    marks_.pop_back();
    if (m > stack_.size()) fail("malformed pickle: MARK beyond the stack");
    std::vector<Item> items(std::make_move_iterator(stack_.begin() + m),
                            std::make_move_iterator(stack_.end()));
    stack_.resize(m);
    return items;
  }
  Item& top() {
    if (stack_.empty()) fail("malformed pickle: empty stack");
    return stack_.back();
  }
  static Item value(c10::IValue v) { return Item{Item::kValue, std::move(v), {}, {}}; }
  static Item tuple(std::vector<Item> xs) { return Item{Item::kTuple, {}, {}, std::move(xs)}; }

  c10::IValue to_ivalue(const Item& it, int depth = 0) {
    if (it.kind == Item::kGlobal) fail("a bare global " + it.global + " is not a value");
    if (it.kind == Item::kValue) return it.value;
    if (depth > 1000) fail("tuples nested deeper than 1000");
    std::vector<c10::IValue> xs;
    for (const auto& x : it.items) xs.push_back(to_ivalue(x, depth + 1));
    return c10::ivalue::Tuple::create(std::move(xs));
  }
  std::vector<int64_t> ints(const Item& it, const char* what) {
    if (it.kind != Item::kTuple) fail(std::string("expected a tuple of ints for ") + what);
    std::vector<int64_t> xs;
    for (const auto& x : it.items) {
      if (x.kind != Item::kValue || !x.value.isInt()) fail(std::string("non-int in ") + what);
      xs.push_back(x.value.toInt());
    }
    return xs;
  }
  void set_items(std::vector<Item> kv);
  void append(std::vector<Item> xs);
  void opcode(char op);
  Item reduce(const Item& callable, const Item& args);
  Item persistent(const Item& pid);

  const std::string& data_;
  const StorageLoader& load_;
  const std::string& what_;
  size_t pos_ = 0;
  std::vector<Item> stack_;
  std::vector<size_t> marks_;
  std::map<uint32_t, Item> memo_;
  std::map<std::string, at::Tensor> storages_;  // shared by the tensors viewing them
  bool done_ = false;
};

void Reader::set_items(std::vector<Item> kv) {
  if (kv.size() % 2 != 0) fail("malformed pickle: odd number of dict items");
  Item& d = top();
  if (d.kind != Item::kValue || !d.value.isGenericDict()) fail("SETITEMS on a non-dict");
  auto dict = d.value.toGenericDict();
  for (size_t i = 0; i < kv.size(); i += 2) {
    dict.insert_or_assign(to_ivalue(kv[i]), to_ivalue(kv[i + 1]));
  }
}

void Reader::append(std::vector<Item> xs) {
  Item& l = top();
  if (l.kind != Item::kValue || !l.value.isList()) fail("APPENDS on a non-list");
  auto list = l.value.toList();
  for (const auto& x : xs) list.push_back(to_ivalue(x));
}

Item Reader::persistent(const Item& pid) {
  if (pid.kind != Item::kTuple || pid.items.size() != 5 || pid.items[1].kind != Item::kGlobal ||
      !pid.items[2].value.isString()) {
    fail("unsupported persistent id (expected ('storage', type, key, location, numel))");
  }
  const auto dtype = storage_dtype(pid.items[1].global);
  if (!dtype) fail("unknown storage type " + pid.items[1].global);
  const std::string key = pid.items[2].value.toStringRef();
  auto found = storages_.find(key);
  if (found == storages_.end()) { found = storages_.emplace(key, load_(key, *dtype)).first; }
  return value(found->second);
}

Item Reader::reduce(const Item& callable, const Item& args) {
  if (callable.kind != Item::kGlobal || args.kind != Item::kTuple) fail("malformed REDUCE");
  const auto& a = args.items;
  if (callable.global == "collections.OrderedDict") {
    return value(c10::impl::GenericDict(c10::AnyType::get(), c10::AnyType::get()));
  }
  if (callable.global == "torch._utils._rebuild_parameter") {
    if (a.empty() || !a[0].value.isTensor()) fail("malformed _rebuild_parameter");
    return a[0];
  }
  // _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, hooks[, metadata])
  if (a.size() < 4 || !a[0].value.isTensor() || !a[1].value.isInt()) {
    fail("malformed _rebuild_tensor_v2 arguments");
  }
  const at::Tensor storage = a[0].value.toTensor();
  const int64_t offset = a[1].value.toInt();
  const auto size = ints(a[2], "the tensor size"), stride = ints(a[3], "the tensor stride");
  if (size.size() != stride.size()) fail("tensor size and stride differ in length");
  int64_t last = offset;  // the highest element index the view touches
  for (size_t i = 0; i < size.size(); ++i) {
    if (size[i] < 0 || stride[i] < 0) fail("negative tensor size or stride");
    if (size[i] == 0) last = -1;
    if (last >= 0 && size[i] > 1) {
      if (stride[i] > (INT64_MAX - last) / (size[i] - 1))
        fail("tensor size times stride overflows");
      last += (size[i] - 1) * stride[i];
    }
  }
  if (offset < 0 || last >= storage.numel()) {
    fail("tensor view reaches past its storage of " + std::to_string(storage.numel()) +
         " elements");
  }
  return value(storage.as_strided(size, stride, offset));
}

void Reader::opcode(char op) {
  switch (op) {
    case '\x80': take(1); break;                       // PROTO
    case '.': done_ = true; break;                     // STOP
    case '(': marks_.push_back(stack_.size()); break;  // MARK
    case '}':
      stack_.push_back(value(c10::impl::GenericDict(c10::AnyType::get(), c10::AnyType::get())));
      break;
    case ']': stack_.push_back(value(c10::impl::GenericList(c10::AnyType::get()))); break;
    case ')': stack_.push_back(tuple({})); break;
    case 'N': stack_.push_back(value(c10::IValue())); break;
    case '\x88': stack_.push_back(value(true)); break;
    case '\x89': stack_.push_back(value(false)); break;
    case 'K': stack_.push_back(value(int64_t{le<uint8_t>()})); break;
    case 'M': stack_.push_back(value(int64_t{le<uint16_t>()})); break;
    case 'J': stack_.push_back(value(int64_t{le<int32_t>()})); break;
    case '\x8a': {  // LONG1
      const uint8_t n = le<uint8_t>();
      if (n > 8) fail("integer wider than 64 bits");
      const char* p = take(n);
      uint64_t v = (n > 0 && (p[n - 1] & 0x80)) ? ~uint64_t{0} : 0;
      for (int i = 0; i < n; ++i) {
        v = (v & ~(uint64_t{0xff} << (8 * i))) | (uint64_t{static_cast<uint8_t>(p[i])} << (8 * i));
      }
      stack_.push_back(value(static_cast<int64_t>(v)));
      break;
    }
    case 'G': {  // BINFLOAT, big-endian
      const char* p = take(8);
      uint64_t bits = 0;
      for (int i = 0; i < 8; ++i) bits = (bits << 8) | static_cast<uint8_t>(p[i]);
      double d;
      std::memcpy(&d, &bits, 8);
      stack_.push_back(value(d));
      break;
    }
    case 'X':
    case 'T': {  // BINUNICODE, BINSTRING
      const uint32_t n = le<uint32_t>();
      stack_.push_back(value(std::string(take(n), n)));
      break;
    }
    case 'U': {  // SHORT_BINSTRING
      const uint8_t n = le<uint8_t>();
      stack_.push_back(value(std::string(take(n), n)));
      break;
    }
    case 'c': {  // GLOBAL
      const std::string module = line(), name = line(), full = module + "." + name;
      bool ok = storage_dtype(full).has_value();
      for (const char* g : kAllowedGlobals) ok = ok || full == g;
      if (!ok) {
        fail("refusing to load global '" + full +
             "': only tensors, OrderedDict and plain "
             "values are loaded (as torch.load(weights_only=True) does)");
      }
      stack_.push_back(Item{Item::kGlobal, {}, full, {}});
      break;
    }
    case 't': stack_.push_back(tuple(pop_to_mark())); break;
    case '\x85': {
      auto a = pop();
      stack_.push_back(tuple({std::move(a)}));
      break;
    }
    case '\x86': {
      auto b = pop(), a = pop();
      stack_.push_back(tuple({a, b}));
      break;
    }
    case '\x87': {
      auto c = pop(), b = pop(), a = pop();
      stack_.push_back(tuple({a, b, c}));
      break;
    }
    case 'R': {
      auto args = pop(), f = pop();
      stack_.push_back(reduce(f, args));
      break;
    }
    case 'b': pop(); break;  // BUILD: OrderedDict's _metadata attribute, not needed here
    case 'Q': {
      auto pid = pop();
      stack_.push_back(persistent(pid));
      break;
    }
    case 's': {
      auto v = pop(), k = pop();
      set_items({k, v});
      break;
    }
    case 'u': set_items(pop_to_mark()); break;
    case 'a': {
      auto v = pop();
      append({v});
      break;
    }
    case 'e': append(pop_to_mark()); break;
    case 'q': memo_[le<uint8_t>()] = top(); break;
    case 'r': memo_[le<uint32_t>()] = top(); break;
    case 'h':
    case 'j': {
      const uint32_t i = op == 'h' ? le<uint8_t>() : le<uint32_t>();
      const auto it = memo_.find(i);
      if (it == memo_.end()) fail("malformed pickle: memo entry " + std::to_string(i) + " unset");
      stack_.push_back(it->second);
      break;
    }
    case '0': pop(); break;  // POP
    default: {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "0x%02x", static_cast<uint8_t>(op));
      fail(std::string("unsupported pickle opcode ") + hex +
           " (only the opcodes torch.save writes for tensors and plain containers are read)");
    }
  }
}

c10::IValue Reader::run() {
  while (!done_) opcode(*take(1));
  if (stack_.size() != 1)
    fail("malformed pickle: stack holds " + std::to_string(stack_.size()) + " items at STOP");
  return to_ivalue(stack_.back());
}

}  // namespace

c10::IValue pickle_load(const std::string& data, const StorageLoader& load_storage,
                        const std::string& what) {
  return Reader(data, load_storage, what).run();
}

}  // namespace dpx::detail
