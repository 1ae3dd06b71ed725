// The objects an unpickling builds, as numbered nodes, and their conversion to c10::IValues.
//
// Note [Pickle graph]
// A pickle is a program, and a hostile one can nest a million lists (an IValue that deep
// overflows the C++ stack when it is destroyed), reference one object through the memo from
// everywhere (40 levels of tuples that each hold the previous one twice are 2^40 objects when
// copied), or put a list inside itself (an IValue cycle never frees and never ends a walk).
// So the reader builds no IValue while it runs. Each object it creates is a Node in one vector;
// containers, the stack and the memo hold node numbers, so the memo shares for free and nothing
// is destroyed recursively. Each node counts against TorchLoadLimits::max_objects. At STOP,
// PickleGraph::value(root):
//   1. walks the graph from the root with an explicit stack and refuses a container that holds
//      itself or a nesting deeper than kMaxPickleDepth;
//   2. converts each node reached once, children first (recursion bounded by the depth just
//      checked), so what the memo shared stays shared in the IValues, as in Python;
//   3. charges each dict key's size (its strings' bytes and elements, counted as if unshared,
//      which is what hashing and comparing it costs) against a budget proportional to the
//      pickle, so a key shared a million times cannot make hashing quadratic.
#pragma once

#include <ATen/core/ivalue.h>

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace dpx::detail {

using NodeId = uint32_t;

struct Node {
  enum Kind : uint8_t { kValue, kGlobal, kList, kTuple, kDict, kObject };
  Kind kind = kValue;
  // kValue: None, bool, int, float, str or tensor; kGlobal: its name; kObject: its class's name.
  c10::IValue value;
  // kList, kTuple: the elements; kDict: key, value, key, value, ...; kObject: its state (what
  // BUILD gave it), or nothing. Objects are read where the dialect allows classes (DCP's
  // metadata) and never become IValues: the reader of that format walks the graph instead.
  std::vector<NodeId> items;
};

class PickleGraph {
 public:
  // `what` names the file in errors (CheckpointError).
  PickleGraph(std::string what, int64_t max_objects, uint64_t key_budget);

  NodeId add(Node node);
  Node& operator[](NodeId id) { return nodes_[id]; }
  bool is_container(NodeId id) const { return nodes_[id].kind >= Node::kList; }

  // Steps 1-3 of the Note; throws CheckpointError when the graph is refused.
  c10::IValue value(NodeId root);
  // Step 1 alone, for a graph that is walked rather than converted: after it, everything
  // reachable from `root` is nested at most kMaxPickleDepth deep and holds no cycle.
  void check(NodeId root);
  const Node& operator[](NodeId id) const { return nodes_[id]; }
  size_t size() const { return nodes_.size(); }

 private:
  [[noreturn]] void fail(const std::string& msg) const;
  void check_nesting(NodeId root);
  c10::IValue convert(NodeId id);
  c10::IValue convert_dict(const Node& node);
  uint64_t key_cost(NodeId id);

  std::string what_;
  int64_t max_objects_;
  uint64_t key_budget_;
  std::deque<Node> nodes_;  // grows without copying: no peak of twice its size
  std::vector<uint8_t> state_;       // per node: 0 unseen, 1 on the walk's path, 2 checked
  std::vector<uint16_t> height_;     // per checked node: containers nested inside, itself included
  std::vector<c10::IValue> values_;  // per converted node
  std::vector<uint8_t> converted_;
  std::vector<uint64_t> key_cost_;   // per node, 0 until computed
};

}  // namespace dpx::detail
