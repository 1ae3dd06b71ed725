// The restricted unpickler (see pickle.h): a stack machine over the protocol 0-2 opcodes that
// torch.save writes and the protocol 4 ones DCP's metadata adds (frames, short strings, the
// implicit memo, STACK_GLOBAL, NEWOBJ), building a PickleGraph (Note [Pickle graph]). pickle_reader.cpp reads the
// opcodes; pickle_reduce.cpp is what they may call: the allowed globals, persistent ids
// (storages) and tensor views.
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "checkpoint/python_format/pickle.h"
#include "checkpoint/python_format/pickle_graph.h"

namespace dpx::detail {

// Which globals a pickle may name (pickle.h): torch.save's tensors and containers, or DCP's
// metadata classes.
enum class PickleDialect { kTorchSave, kDcpMetadata };

class PickleReader {
 public:
  PickleReader(const std::string& data, const StorageLoader& load, const std::string& what,
               const TorchLoadLimits& limits, PickleDialect dialect = PickleDialect::kTorchSave);

  Unpickled run();
  // Reads up to STOP and returns the graph checked but unconverted (pickle_load_dcp_metadata).
  PickledObjects run_to_graph();

 private:
  using Handler = void (PickleReader::*)();
  static const std::array<Handler, 256>& handlers();
  void run_to_stop();

  // The byte cursor.
  [[noreturn]] void fail(const std::string& msg) const;
  const char* take(size_t n);
  template <typename T>
  T le() {
    T v;
    std::memcpy(&v, take(sizeof(T)), sizeof(T));
    return v;
  }
  std::string line();

  // The stack of node numbers.
  NodeId pop();
  NodeId top();
  std::vector<NodeId> pop_to_mark();
  void push(Node node) { stack_.push_back(graph_.add(std::move(node))); }
  void push_value(c10::IValue v) { push(Node{Node::kValue, std::move(v), {}}); }
  const Node& node(NodeId id) { return graph_[id]; }
  Node& container(NodeId id, Node::Kind kind, const char* op);

  // One handler per opcode (or family), in pickle_reader.cpp.
  void op_proto();
  void op_stop();
  void op_mark();
  void op_pop();
  template <Node::Kind kind>
  void op_empty();
  void op_none();
  template <bool b>
  void op_bool();
  template <typename T>
  void op_binint();
  void op_long1();
  void op_binfloat();
  template <typename Length>
  void op_string();
  void op_tuple();
  template <size_t n>
  void op_tuple_n();
  void op_setitem();
  void op_setitems();
  void op_append();
  void op_appends();
  template <typename Index>
  void op_put();
  template <typename Index>
  void op_get();

  void op_frame();
  void op_memoize();

  // What the opcodes may call, in pickle_reduce.cpp.
  void op_global();
  void op_stack_global();
  void push_global(const std::string& module, const std::string& name);
  void op_reduce();
  bool reduce_dcp(const std::string& f, const std::vector<NodeId>& args);
  void op_newobj();
  void op_build();
  void op_binpersid();
  at::Tensor storage(NodeId pid);
  NodeId rebuild_tensor(const std::vector<NodeId>& args);
  std::vector<int64_t> ints(NodeId tuple, const char* what);

  const std::string& data_;
  const StorageLoader& load_;
  const std::string& what_;
  PickleDialect dialect_;
  size_t pos_ = 0;
  PickleGraph graph_;
  std::vector<NodeId> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint32_t, NodeId> memo_;
  std::map<std::string, at::Tensor> storages_;  // by key, shared by the tensors viewing them
  std::vector<std::pair<NodeId, NodeId>> dict_states_;  // (dict, BUILD's state)
  bool done_ = false;
};

}  // namespace dpx::detail
