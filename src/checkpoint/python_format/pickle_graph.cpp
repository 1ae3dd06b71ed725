#include "checkpoint/python_format/pickle_graph.h"

#include <algorithm>
#include <exception>
#include <limits>
#include <unordered_map>
#include <utility>

#include "dpx/checkpoint/checkpoint_file.h"
#include "dpx/checkpoint/python_format.h"

namespace dpx::detail {
namespace {

constexpr uint64_t kCostCap = std::numeric_limits<uint64_t>::max() / 4;

const char* kind_name(Node::Kind kind) {
  switch (kind) {
    case Node::kList: return "list";
    case Node::kTuple: return "tuple";
    case Node::kDict: return "dict";
    case Node::kObject: return "object";
    default: return "value";
  }
}

}  // namespace

PickleGraph::PickleGraph(std::string what, int64_t max_objects, uint64_t key_budget)
    : what_(std::move(what)),
      max_objects_(std::min<int64_t>(max_objects, std::numeric_limits<NodeId>::max())),
      key_budget_(key_budget) {}

void PickleGraph::fail(const std::string& msg) const { throw CheckpointError(what_ + ": " + msg); }

NodeId PickleGraph::add(Node node) {
  if (static_cast<int64_t>(nodes_.size()) >= max_objects_) {
    fail("the pickle creates more than " + std::to_string(max_objects_) +
         " objects (TorchLoadLimits::max_objects); if the file is trusted and this large, load "
         "it with a higher limit");
  }
  nodes_.push_back(std::move(node));
  return static_cast<NodeId>(nodes_.size() - 1);
}

void PickleGraph::check(NodeId root) {
  const size_t n = nodes_.size();
  state_.resize(n, 0);
  height_.resize(n, 0);
  values_.resize(n);
  converted_.resize(n, 0);
  key_cost_.resize(n, 0);
  check_nesting(root);
}

c10::IValue PickleGraph::value(NodeId root) {
  check(root);
  return convert(root);
}

// Step 1 of Note [Pickle graph]: a depth-first walk whose path is an explicit stack.
void PickleGraph::check_nesting(NodeId root) {
  if (!is_container(root) || state_[root] == 2) return;
  const std::string too_deep = "containers nested deeper than " +
                               std::to_string(kMaxPickleDepth) +
                               " levels; dpx refuses them (an IValue that deep could not be "
                               "destroyed safely), and torch.save never writes a model's state so";
  struct Frame {
    NodeId id;
    size_t next;
  };
  std::vector<Frame> path{{root, 0}};
  state_[root] = 1;
  while (!path.empty()) {
    const NodeId id = path.back().id;
    const auto& items = nodes_[id].items;
    if (path.back().next < items.size()) {
      const NodeId child = items[path.back().next++];
      if (!is_container(child) || state_[child] == 2) continue;
      if (state_[child] == 1) {
        fail(std::string("a ") + kind_name(nodes_[child].kind) +
             " contains itself (a reference cycle), which a c10::IValue cannot hold");
      }
      if (static_cast<int64_t>(path.size()) >= kMaxPickleDepth) fail(too_deep);
      state_[child] = 1;
      path.push_back({child, 0});
      continue;
    }
    int64_t height = 0;
    for (const NodeId c : items) {
      if (is_container(c)) height = std::max<int64_t>(height, height_[c]);
    }
    if (height + 1 > kMaxPickleDepth) fail(too_deep);
    height_[id] = static_cast<uint16_t>(height + 1);
    state_[id] = 2;
    path.pop_back();
  }
}

// Step 2: recursion no deeper than the nesting that check_nesting allowed.
c10::IValue PickleGraph::convert(NodeId id) {
  const Node& node = nodes_[id];
  if (node.kind == Node::kValue) return node.value;
  if (node.kind == Node::kGlobal) {
    fail("a bare global " + node.value.toStringRef() + " is not a value");
  }
  if (node.kind == Node::kObject) {
    fail("an object of class " + node.value.toStringRef() + " is not a value");
  }
  if (converted_[id]) return values_[id];
  c10::IValue v;
  if (node.kind == Node::kList) {
    auto list = c10::impl::GenericList(c10::AnyType::get());
    list.reserve(node.items.size());
    for (const NodeId x : node.items) list.push_back(convert(x));
    v = std::move(list);
  } else if (node.kind == Node::kTuple) {
    std::vector<c10::IValue> xs;
    xs.reserve(node.items.size());
    for (const NodeId x : node.items) xs.push_back(convert(x));
    v = c10::ivalue::Tuple::create(std::move(xs));
  } else {
    v = convert_dict(node);
  }
  converted_[id] = 1;
  values_[id] = v;
  return v;
}

// A key node set twice (shared through the memo) is hashed once: the last value wins, at the
// place of the first, as in a Python dict.
c10::IValue PickleGraph::convert_dict(const Node& node) {
  std::unordered_map<NodeId, size_t> slot;
  std::vector<std::pair<NodeId, NodeId>> pairs;
  for (size_t i = 0; i + 1 < node.items.size(); i += 2) {
    const auto [it, fresh] = slot.emplace(node.items[i], pairs.size());
    if (fresh) {
      pairs.emplace_back(node.items[i], node.items[i + 1]);
    } else {
      pairs[it->second].second = node.items[i + 1];
    }
  }
  auto dict = c10::impl::GenericDict(c10::AnyType::get(), c10::AnyType::get());
  for (const auto& [k, v] : pairs) {
    const Node& key = nodes_[k];
    if (key.kind == Node::kList || key.kind == Node::kDict) {
      fail(std::string("unhashable dict key: a ") + kind_name(key.kind));
    }
    const uint64_t cost = key_cost(k);
    if (cost > key_budget_) {
      fail("the dict keys are too large to hash (a key shared through the memo into too many "
           "dicts, or a tuple key that expands to too many values)");
    }
    key_budget_ -= cost;
    c10::IValue key_value = convert(k), value = convert(v);
    try {  // only the hashing: a CheckpointError from converting is not caught here
      dict.insert_or_assign(std::move(key_value), std::move(value));
    } catch (const c10::Error& e) {
      fail(std::string("unhashable dict key: ") + e.what_without_backtrace());
    } catch (const std::exception& e) {  // LibTorch 1.13 throws std::runtime_error for None
      fail(std::string("unhashable dict key: ") + e.what());
    }
  }
  return dict;
}

// Step 3: what hashing or comparing the key costs, sharing expanded (saturating).
uint64_t PickleGraph::key_cost(NodeId id) {
  if (key_cost_[id] != 0) return key_cost_[id];
  const Node& node = nodes_[id];
  uint64_t cost = 1;
  if (node.kind == Node::kValue && node.value.isString()) cost += node.value.toStringRef().size();
  for (const NodeId x : node.items) cost = std::min(cost + key_cost(x), kCostCap);
  key_cost_[id] = cost;
  return cost;
}

}  // namespace dpx::detail
