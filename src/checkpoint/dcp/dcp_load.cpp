// Reading a DCP checkpoint (dcp.h): each chunk's bytes, where the metadata says they are, are a
// torch.save archive of that chunk, read with the restricted reader; a tensor is assembled whole,
// or, for a fully_shard module, as the rows this rank holds, from the chunks that overlap them.
// An optimizer's state (Note [DCP optimizer state] in dcp.h) is read the same way, then handed to
// load_full_optimizer_state_dict as a name-keyed state of this rank's rows.
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <map>
#include <set>
#include <unordered_map>

#include "dpx/algorithms/zero_redundancy_optimizer.h"
#include "dpx/checkpoint/dcp.h"
#include "dpx/checkpoint/fsdp_checkpoint.h"
#include "dpx/errors.h"
#include "dpx/fsdp/fsdp_state_dict.h"
#include "checkpoint/dcp/chunk_reader.h"
#include "checkpoint/dcp/metadata.h"

namespace dpx {
namespace {

using detail::dcp::ChunkFiles;
using detail::dcp::read_rows;
using detail::dcp::read_whole;

// Into a fully_shard module: each rank reads the rows of its shards (and buffers and unsharded
// parameters whole), with the strictness of load_state_dict.
LoadStateDictResult load_sharded(torch::nn::Module& module, const std::string& directory,
                                 const DcpLoadOptions& options) {
  const auto metadata = detail::dcp::read_metadata(directory, options.limits);
  std::unordered_map<const c10::TensorImpl*, ParameterShard> shards;
  for (auto& s : parameter_shards(module)) {
    if (s.sharded) shards.emplace(s.param.unsafeGetTensorImpl(), std::move(s));
  }
  const auto entries = state_dict(module);
  LoadStateDictResult result;
  std::set<std::string> names;
  for (const auto& [name, t] : entries) {
    names.insert(options.prefix + name);
    if (!metadata.tensors.count(options.prefix + name)) result.missing_keys.push_back(name);
  }
  for (const auto& [fqn, entry] : metadata.tensors) {
    if (fqn.rfind(options.prefix, 0) == 0 && !names.count(fqn)) {
      result.unexpected_keys.push_back(fqn.substr(options.prefix.size()));
    }
  }
  if (options.strict && (!result.missing_keys.empty() || !result.unexpected_keys.empty())) {
    std::string msg = "loading " + directory + " into a sharded module:";
    for (const auto& k : result.missing_keys) msg += " missing " + k + ";";
    for (const auto& k : result.unexpected_keys) msg += " unexpected " + k + ";";
    throw CheckpointError(msg + " (DcpLoadOptions::strict = false loads the others)");
  }
  ChunkFiles files(directory);
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // (target, value): all read first
  for (const auto& [name, t] : entries) {
    const auto found = metadata.tensors.find(options.prefix + name);
    if (found == metadata.tensors.end()) continue;
    const auto shard = shards.find(t.unsafeGetTensorImpl());
    const auto whole = shard == shards.end() ? t.sizes().vec() : shard->second.full_sizes;
    if (whole != found->second.size) {
      throw CheckpointError(directory + ": " + found->first + " has shape " +
                            c10::str(at::IntArrayRef(found->second.size)) + " there, " +
                            c10::str(at::IntArrayRef(whole)) + " in the module");
    }
    const int64_t first = shard == shards.end() ? 0 : shard->second.row_offset;
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    copies.emplace_back(t, read_rows(found->second, found->first, files, options.limits, first,
                                     rows));
  }
  at::NoGradGuard no_grad;  // nothing changes unless everything was read
  for (auto& [target, value] : copies) target.copy_(value);
  return result;
}

using AnyDict = c10::impl::GenericDict;

AnyDict any_dict() { return AnyDict(c10::AnyType::get(), c10::AnyType::get()); }

bool is_index(const std::string& s) {
  return !s.empty() && s.size() < 10 && s.find_first_not_of("0123456789") == std::string::npos;
}

// The hyper-parameters LibTorch's optimizer takes, each required; and the Python flags whose
// other values would make another optimizer than this one (LibTorch has no maximize, and Adam
// with decoupled_weight_decay is AdamW).
void check_group(const torch::optim::Optimizer& optimizer, const AnyDict& group,
                 const std::string& where) {
  const bool sgd = dynamic_cast<const torch::optim::SGD*>(&optimizer) != nullptr;
  const bool adamw = dynamic_cast<const torch::optim::AdamW*>(&optimizer) != nullptr;
  const std::vector<const char*> needed =
      sgd ? std::vector<const char*>{"lr", "momentum", "dampening", "weight_decay", "nesterov",
                                     "params"}
          : std::vector<const char*>{"lr", "betas", "eps", "weight_decay", "amsgrad", "params"};
  for (const char* key : needed) {
    if (!group.contains(key)) throw CheckpointError(where + "." + key + " is missing");
  }
  const auto flag = [&](const char* key) {
    return group.contains(key) && group.at(key).isBool() && group.at(key).toBool();
  };
  if (flag("maximize")) {
    throw CheckpointError(where + ".maximize is True: LibTorch's optimizers do not maximize");
  }
  if (!sgd && group.contains("decoupled_weight_decay") && flag("decoupled_weight_decay") != adamw) {
    throw CheckpointError(where + ".decoupled_weight_decay is " +
                          (adamw ? "False (Adam's state" : "True (AdamW's state") +
                          "), and the optimizer given is " + (adamw ? "AdamW" : "Adam"));
  }
}

// state.<name>.<key>, keyed by name: a tensor shaped like the parameter (exp_avg) as the rows of
// its shard; anything else (step, 0-dim) is the same on every rank and read whole.
AnyDict read_optimizer_state(const torch::nn::Module& module,
                             const detail::dcp::Metadata& metadata, ChunkFiles& files,
                             const DcpLoadOptions& options, const std::string& directory,
                             std::set<std::string>& read) {
  auto state = any_dict();
  for (const auto& s : parameter_shards(module)) {
    const std::string start = options.prefix + "state." + s.name + ".";
    auto entry = any_dict();
    for (auto it = metadata.tensors.lower_bound(start);
         it != metadata.tensors.end() && it->first.rfind(start, 0) == 0; ++it) {
      const auto& [fqn, tensor] = *it;
      const std::string key = fqn.substr(start.size());
      if (key.find('.') != std::string::npos) continue;  // reported as unexpected
      at::Tensor value;
      if (tensor.size.empty()) {
        value = read_whole(tensor, fqn, files, options.limits);
      } else if (tensor.size == s.full_sizes) {
        value = read_rows(tensor, fqn, files, options.limits, s.row_offset,
                          s.param.dim() == 0 ? 1 : s.param.size(0));
      } else {
        throw CheckpointError(directory + ": " + fqn + " has shape " +
                              c10::str(at::IntArrayRef(tensor.size)) + " there, the parameter " +
                              s.name + " " + c10::str(at::IntArrayRef(s.full_sizes)));
      }
      entry.insert(key, value);
      read.insert(fqn);
    }
    if (!entry.empty()) state.insert(s.name, entry);
  }
  return state;
}

// param_groups.<group index>.<hyper-parameter>, by group index: each an object (a torch.save of
// a float, a tuple, a list of names), the form get_optimizer_state_dict's default options give.
std::map<int64_t, AnyDict> read_param_groups(const detail::dcp::Metadata& metadata,
                                             ChunkFiles& files, const DcpLoadOptions& options,
                                             const std::string& directory,
                                             std::set<std::string>& read) {
  std::map<int64_t, AnyDict> groups;
  const std::string start = options.prefix + "param_groups.";
  for (const auto& [fqn, info] : metadata.objects) {
    if (fqn.rfind(start, 0) != 0) continue;
    const std::string rest = fqn.substr(start.size());
    const auto dot = rest.find('.');
    if (dot == std::string::npos || !is_index(rest.substr(0, dot))) {
      throw CheckpointError(directory + ": " + fqn + " is not " + start +
                            "<group index>.<hyper-parameter>, the layout of "
                            "get_optimizer_state_dict's default options (dpx does not read "
                            "flatten_optimizer_state_dict=True's)");
    }
    auto& group = groups.try_emplace(std::stoll(rest.substr(0, dot)), any_dict()).first->second;
    group.insert(rest.substr(dot + 1), detail::dcp::read_object(info, fqn, files, options.limits));
    read.insert(fqn);
  }
  return groups;
}

// The checkpoint's group names the parameters of the optimizer's group, in its order: otherwise
// a parameter's state would go to another parameter.
void check_group_params(const torch::nn::Module& module,
                        const torch::optim::OptimizerParamGroup& ours, const AnyDict& group,
                        const std::string& where) {
  std::unordered_map<const c10::TensorImpl*, std::string> name_of;
  for (const auto& s : parameter_shards(module)) {
    name_of.emplace(s.param.unsafeGetTensorImpl(), s.name);
  }
  std::vector<std::string> theirs, mine;
  const auto params = group.at("params");
  if (params.isList()) {
    for (const auto& n : params.toListRef()) {
      if (!n.isString()) throw CheckpointError(where + ".params holds a non-name");
      theirs.push_back(n.toStringRef());
    }
  }
  for (const auto& p : ours.params()) {
    const auto it = name_of.find(p.unsafeGetTensorImpl());
    TORCH_CHECK(it != name_of.end(), "dcp_load_optimizer_state_dict: the optimizer holds a "
                "tensor that is no parameter of the module given");
    mine.push_back(it->second);
  }
  if (theirs != mine) {
    throw CheckpointError(where + ".params names " + c10::Join(", ", theirs) +
                          "; the optimizer's group holds " + c10::Join(", ", mine));
  }
}

// `whole` (the optimizer's state keyed by names, every parameter's) cut to what `local` (a
// ZeroRedundancyOptimizer's over this rank's share) holds: its parameters' state, and its groups
// naming them.
c10::IValue local_share(const torch::nn::Module& module, const torch::optim::Optimizer& local,
                        const c10::impl::GenericDict& whole) {
  std::unordered_map<const c10::TensorImpl*, std::string> name_of;
  for (const auto& s : parameter_shards(module)) {
    name_of.emplace(s.param.unsafeGetTensorImpl(), s.name);
  }
  auto state = any_dict();
  auto groups = c10::impl::GenericList(c10::AnyType::get());
  const auto all_state = whole.at("state").toGenericDict();
  const auto all_groups = whole.at("param_groups").toListRef();
  for (size_t g = 0; g < local.param_groups().size(); ++g) {
    auto group = all_groups[g].toGenericDict().copy();
    auto names = c10::impl::GenericList(c10::StringType::get());
    for (const auto& p : local.param_groups()[g].params()) {
      const auto& name = name_of.at(p.unsafeGetTensorImpl());
      names.push_back(name);
      if (all_state.contains(name)) state.insert(name, all_state.at(name));
    }
    group.insert_or_assign("params", names);
    groups.push_back(group);
  }
  auto out = any_dict();
  out.insert("state", state);
  out.insert("param_groups", groups);
  return out;
}

}  // namespace

std::vector<std::pair<std::string, at::Tensor>> dcp_read_tensors(const std::string& directory,
                                                                 const std::string& prefix,
                                                                 const TorchLoadLimits& limits) {
  const auto metadata = detail::dcp::read_metadata(directory, limits);
  ChunkFiles files(directory);
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [fqn, entry] : metadata.tensors) {
    if (fqn.rfind(prefix, 0) != 0) continue;
    out.emplace_back(fqn.substr(prefix.size()), read_whole(entry, fqn, files, limits));
  }
  return out;
}

LoadStateDictResult dcp_load_state_dict(torch::nn::Module& module, const std::string& directory,
                                        const DcpLoadOptions& options) {
  if (fsdp_process_group(module)) return load_sharded(module, directory, options);
  LoadStateDictOptions load;
  load.strict = options.strict;
  load.limits = options.limits;
  return load_state_dict(module, dcp_read_tensors(directory, options.prefix, options.limits),
                         load);
}

void dcp_load_optimizer_state_dict(const torch::nn::Module& module,
                                   torch::optim::Optimizer& optimizer,
                                   const std::string& directory,
                                   const DcpLoadOptions& options) {
  const auto metadata = detail::dcp::read_metadata(directory, options.limits);
  const std::string& prefix = options.prefix;
  ChunkFiles files(directory);
  std::set<std::string> read;  // the keys under `prefix` that found their place
  const auto state = read_optimizer_state(module, metadata, files, options, directory, read);
  const auto groups = read_param_groups(metadata, files, options, directory, read);

  std::vector<std::string> unexpected;
  for (const auto& [fqn, t] : metadata.tensors) {
    if (fqn.rfind(prefix, 0) == 0 && !read.count(fqn)) unexpected.push_back(fqn);
  }
  for (const auto& [fqn, info] : metadata.objects) {
    if (fqn.rfind(prefix, 0) == 0 && !read.count(fqn)) unexpected.push_back(fqn);
  }
  if (!unexpected.empty()) {
    std::string msg = directory + ": entries that are no state of this module's parameters:";
    for (const auto& k : unexpected) msg += " " + k;
    throw CheckpointError(msg);
  }
  if (groups.empty()) {
    throw CheckpointError(directory + ": no " + prefix + "param_groups.* entries (not an "
                          "optimizer's state under the prefix '" + prefix + "'?)");
  }
  if (groups.size() != optimizer.param_groups().size() ||
      groups.rbegin()->first != static_cast<int64_t>(groups.size()) - 1) {
    throw CheckpointError(directory + ": " + std::to_string(groups.size()) +
                          " param groups there, " +
                          std::to_string(optimizer.param_groups().size()) + " in the optimizer");
  }
  // A ZeroRedundancyOptimizer steps its rank's share through an optimizer of its own: that one
  // gets the state of the share, and both the hyper-parameters (its step hands its own on).
  auto* zero = dynamic_cast<ZeroRedundancyOptimizer*>(&optimizer);
  auto& stepping = zero ? zero->local_optimizer() : optimizer;
  auto list = c10::impl::GenericList(c10::AnyType::get());
  for (const auto& [index, group] : groups) {
    const std::string where = directory + ": " + prefix + "param_groups." + std::to_string(index);
    check_group(stepping, group, where);
    check_group_params(module, optimizer.param_groups()[static_cast<size_t>(index)], group, where);
    list.push_back(group);
  }
  auto whole = any_dict();
  whole.insert("state", state);
  whole.insert("param_groups", list);
  try {
    if (zero) {
      load_full_optimizer_state_dict(module, stepping, local_share(module, stepping, whole));
      for (size_t g = 0; g < zero->param_groups().size(); ++g) {
        zero->param_groups()[g].set_options(stepping.param_groups()[g].options().clone());
      }
    } else {
      load_full_optimizer_state_dict(module, optimizer, whole);
    }
  } catch (const c10::Error& e) {
    throw CheckpointError(directory + ": " + e.what_without_backtrace());
  }
}

}  // namespace dpx
