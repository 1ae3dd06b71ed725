// The opcodes of the restricted unpickler (pickle_reader.h): the byte cursor, the stack, and one
// small handler per opcode, dispatched through a table.
#include "checkpoint/python_format/pickle_reader.h"

#include <cstdio>

#include "dpx/checkpoint/checkpoint_file.h"

namespace dpx::detail {

PickleReader::PickleReader(const std::string& data, const StorageLoader& load,
                           const std::string& what, const TorchLoadLimits& limits,
                           PickleDialect dialect)
    : data_(data),
      load_(load),
      what_(what),
      dialect_(dialect),
      // Hashing dict keys may cost what reading the pickle's bytes several times over would,
      // never more (Note [Pickle graph], step 3).
      graph_(what, limits.max_objects, (uint64_t{64} << 20) + 16 * uint64_t{data.size()}) {}

const std::array<PickleReader::Handler, 256>& PickleReader::handlers() {
  using R = PickleReader;
  static const auto table = [] {
    const std::pair<char, Handler> ops[] = {
        {'\x80', &R::op_proto},                   // PROTO
        {'.', &R::op_stop},                       // STOP
        {'(', &R::op_mark},                       // MARK
        {'0', &R::op_pop},                        // POP
        {'}', &R::op_empty<Node::kDict>},         // EMPTY_DICT
        {']', &R::op_empty<Node::kList>},         // EMPTY_LIST
        {')', &R::op_empty<Node::kTuple>},        // EMPTY_TUPLE
        {'N', &R::op_none},                       // NONE
        {'\x88', &R::op_bool<true>},              // NEWTRUE
        {'\x89', &R::op_bool<false>},             // NEWFALSE
        {'K', &R::op_binint<uint8_t>},            // BININT1
        {'M', &R::op_binint<uint16_t>},           // BININT2
        {'J', &R::op_binint<int32_t>},            // BININT
        {'\x8a', &R::op_long1},                   // LONG1
        {'G', &R::op_binfloat},                   // BINFLOAT
        {'X', &R::op_string<uint32_t>},           // BINUNICODE
        {'T', &R::op_string<uint32_t>},           // BINSTRING
        {'U', &R::op_string<uint8_t>},            // SHORT_BINSTRING
        {'t', &R::op_tuple},                      // TUPLE
        {'\x85', &R::op_tuple_n<1>},              // TUPLE1
        {'\x86', &R::op_tuple_n<2>},              // TUPLE2
        {'\x87', &R::op_tuple_n<3>},              // TUPLE3
        {'s', &R::op_setitem},                    // SETITEM
        {'u', &R::op_setitems},                   // SETITEMS
        {'a', &R::op_append},                     // APPEND
        {'e', &R::op_appends},                    // APPENDS
        {'q', &R::op_put<uint8_t>},               // BINPUT
        {'r', &R::op_put<uint32_t>},              // LONG_BINPUT
        {'h', &R::op_get<uint8_t>},               // BINGET
        {'j', &R::op_get<uint32_t>},              // LONG_BINGET
        {'c', &R::op_global},                     // GLOBAL
        {'R', &R::op_reduce},                     // REDUCE
        {'b', &R::op_build},                      // BUILD
        {'Q', &R::op_binpersid},                  // BINPERSID
        // Protocol 4 (DCP's metadata; torch.save(pickle_protocol=4) too).
        {'\x95', &R::op_frame},                   // FRAME
        {'\x8c', &R::op_string<uint8_t>},         // SHORT_BINUNICODE
        {'\x8d', &R::op_string<uint64_t>},        // BINUNICODE8
        {'\x94', &R::op_memoize},                 // MEMOIZE
        {'\x93', &R::op_stack_global},            // STACK_GLOBAL
        {'\x81', &R::op_newobj},                  // NEWOBJ
    };
    std::array<Handler, 256> t{};
    for (const auto& [code, handler] : ops) t[static_cast<uint8_t>(code)] = handler;
    return t;
  }();
  return table;
}

// Runs the opcodes up to STOP; the stack then holds the one object the pickle made.
void PickleReader::run_to_stop() {
  const auto& table = handlers();
  while (!done_) {
    const auto op = static_cast<uint8_t>(*take(1));
    if (table[op] == nullptr) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "0x%02x", op);
      --pos_;
      fail(std::string("unsupported pickle opcode ") + hex +
           " (only the opcodes torch.save writes for tensors and plain containers, and those of "
           "DCP's metadata, are read)");
    }
    (this->*table[op])();
  }
  if (stack_.size() != 1) {
    fail("malformed pickle: stack holds " + std::to_string(stack_.size()) + " items at STOP");
  }
}

PickledObjects PickleReader::run_to_graph() {
  run_to_stop();
  const NodeId root = stack_.back();
  graph_.check(root);
  return PickledObjects{std::move(graph_), root};
}

Unpickled PickleReader::run() {
  run_to_stop();
  Unpickled out;
  out.value = graph_.value(stack_.back());
  for (const auto& [dict, state] : dict_states_) {
    out.dict_states.emplace_back(graph_.value(dict), graph_.value(state));
  }
  return out;
}

void PickleReader::fail(const std::string& msg) const {
  throw CheckpointError(what_ + ": " + msg + " (at byte " + std::to_string(pos_) +
                        " of the pickle)");
}

const char* PickleReader::take(size_t n) {
  if (n > data_.size() - pos_) fail("the pickle ends early (truncated file?)");
  const char* p = data_.data() + pos_;
  pos_ += n;
  return p;
}

std::string PickleReader::line() {
  const auto end = data_.find('\n', pos_);
  if (end == std::string::npos) fail("the pickle ends early (truncated file?)");
  std::string s = data_.substr(pos_, end - pos_);
  pos_ = end + 1;
  return s;
}

// As Python's unpickler, the stack above the last MARK is all that pop and top may reach.
NodeId PickleReader::top() {
  if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) {
    fail("malformed pickle: the stack (above its last MARK) is empty");
  }
  return stack_.back();
}

NodeId PickleReader::pop() {
  const NodeId id = top();
  stack_.pop_back();
  return id;
}

std::vector<NodeId> PickleReader::pop_to_mark() {
  if (marks_.empty()) fail("malformed pickle: no MARK");
  const size_t m = marks_.back();
  marks_.pop_back();
  std::vector<NodeId> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
  stack_.resize(m);
  return items;
}

Node& PickleReader::container(NodeId id, Node::Kind kind, const char* op) {
  Node& n = graph_[id];
  if (n.kind != kind) {
    fail(std::string(op) + (kind == Node::kDict ? " on a non-dict" : " on a non-list"));
  }
  return n;
}

void PickleReader::op_proto() { take(1); }
void PickleReader::op_stop() { done_ = true; }
void PickleReader::op_mark() { marks_.push_back(stack_.size()); }
void PickleReader::op_pop() { pop(); }

template <Node::Kind kind>
void PickleReader::op_empty() {
  push(Node{kind, {}, {}});
}

void PickleReader::op_none() { push_value(c10::IValue()); }

template <bool b>
void PickleReader::op_bool() {
  push_value(b);
}

template <typename T>
void PickleReader::op_binint() {
  push_value(int64_t{le<T>()});
}

void PickleReader::op_long1() {  // n bytes of two's complement, little-endian
  const uint8_t n = le<uint8_t>();
  if (n > 8) fail("integer wider than 64 bits");
  const char* p = take(n);
  uint64_t v = (n > 0 && (p[n - 1] & 0x80)) ? ~uint64_t{0} : 0;
  for (int i = 0; i < n; ++i) {
    v = (v & ~(uint64_t{0xff} << (8 * i))) | (uint64_t{static_cast<uint8_t>(p[i])} << (8 * i));
  }
  push_value(static_cast<int64_t>(v));
}

void PickleReader::op_binfloat() {  // big-endian
  const char* p = take(8);
  uint64_t bits = 0;
  for (int i = 0; i < 8; ++i) bits = (bits << 8) | static_cast<uint8_t>(p[i]);
  double d;
  std::memcpy(&d, &bits, 8);
  push_value(d);
}

template <typename Length>
void PickleReader::op_string() {
  const Length n = le<Length>();
  if (n > data_.size() - pos_) fail("the pickle ends early (truncated file?)");
  push_value(std::string(take(static_cast<size_t>(n)), static_cast<size_t>(n)));
}

// A frame only groups opcodes for buffered reading; its length is checked and otherwise unused.
void PickleReader::op_frame() {
  if (le<uint64_t>() > data_.size() - pos_) fail("a frame reaches past the end of the pickle");
}

// Protocol 4's implicit memo: the next index, as Python numbers them.
void PickleReader::op_memoize() {
  const auto i = static_cast<uint32_t>(memo_.size());
  memo_[i] = top();
}

void PickleReader::op_tuple() { push(Node{Node::kTuple, {}, pop_to_mark()}); }

template <size_t n>
void PickleReader::op_tuple_n() {
  std::vector<NodeId> items(n);
  for (size_t i = n; i > 0; --i) items[i - 1] = pop();
  push(Node{Node::kTuple, {}, std::move(items)});
}

void PickleReader::op_setitem() {
  const NodeId v = pop(), k = pop();
  auto& items = container(top(), Node::kDict, "SETITEM").items;
  items.push_back(k);
  items.push_back(v);
}

void PickleReader::op_setitems() {
  const auto kv = pop_to_mark();
  if (kv.size() % 2 != 0) fail("malformed pickle: odd number of dict items");
  auto& items = container(top(), Node::kDict, "SETITEMS").items;
  items.insert(items.end(), kv.begin(), kv.end());
}

void PickleReader::op_append() {
  const NodeId v = pop();
  container(top(), Node::kList, "APPEND").items.push_back(v);
}

void PickleReader::op_appends() {
  const auto xs = pop_to_mark();
  auto& items = container(top(), Node::kList, "APPENDS").items;
  items.insert(items.end(), xs.begin(), xs.end());
}

template <typename Index>
void PickleReader::op_put() {
  const uint32_t i = le<Index>();
  memo_[i] = top();
}

// The memo's object itself, not a copy: sharing is what keeps memo-heavy pickles small.
template <typename Index>
void PickleReader::op_get() {
  const uint32_t i = le<Index>();
  const auto it = memo_.find(i);
  if (it == memo_.end()) fail("malformed pickle: memo entry " + std::to_string(i) + " unset");
  stack_.push_back(it->second);
}

Unpickled pickle_load(const std::string& data, const StorageLoader& load_storage,
                      const std::string& what, const TorchLoadLimits& limits) {
  return PickleReader(data, load_storage, what, limits).run();
}

PickledObjects pickle_load_dcp_metadata(const std::string& data, const std::string& what,
                                        const TorchLoadLimits& limits) {
  const StorageLoader no_storages = [&](const std::string&, c10::ScalarType) -> at::Tensor {
    throw CheckpointError(what + ": DCP's metadata holds no tensor data");
  };
  return PickleReader(data, no_storages, what, limits, PickleDialect::kDcpMetadata)
      .run_to_graph();
}

}  // namespace dpx::detail
