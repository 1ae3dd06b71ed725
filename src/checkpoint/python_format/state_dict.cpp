// Python's state_dict names and order on LibTorch modules, and load_state_dict with Python's
// rules (Note [Python's loading rules]).
#include <torch/torch.h>

#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "checkpoint/python_format/torch_file.h"
#include "dpx/checkpoint/python_format.h"

namespace dpx {
namespace {

using Tensors = std::vector<std::pair<std::string, at::Tensor>>;
using ModuleVersions = std::map<std::string, int64_t>;  // module prefix ("1", "" the root)

std::string quoted(const std::vector<std::string>& keys) {
  std::string s;
  for (const auto& k : keys) s += (s.empty() ? "\"" : ", \"") + k + "\"";
  return s;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

Tensors tensors_of(const c10::IValue& v, const std::string& path) {
  if (!v.isGenericDict()) throw CheckpointError(path + " does not hold a dict of tensors");
  Tensors out;
  for (const auto& kv : v.toGenericDict()) {
    if (!kv.key().isString() || !kv.value().isTensor()) {
      throw CheckpointError(path + " holds a dict that is not a state_dict (str -> tensor)");
    }
    out.emplace_back(kv.key().toStringRef(), kv.value().toTensor());
  }
  return out;
}

// The modules' versions of Python's OrderedDict state dict: its BUILD state's _metadata,
// {prefix: {"version": n, ...}}. Empty for a plain dict (no _metadata), as Python reads it.
ModuleVersions module_versions(const detail::Unpickled& file) {
  ModuleVersions versions;
  for (const auto& [dict, state] : file.dict_states) {
    if (!dict.is(file.value)) continue;
    const auto attributes = state.toGenericDict();
    if (!attributes.contains("_metadata") || !attributes.at("_metadata").isGenericDict()) continue;
    for (const auto& kv : attributes.at("_metadata").toGenericDict()) {
      if (!kv.key().isString() || !kv.value().isGenericDict()) continue;
      const auto local = kv.value().toGenericDict();
      if (local.contains("version") && local.at("version").isInt()) {
        versions[kv.key().toStringRef()] = local.at("version").toInt();
      }
    }
  }
  return versions;
}

void collect(const torch::nn::Module& m, const std::string& prefix, Tensors& out) {
  for (const auto& p : m.named_parameters(/*recurse=*/false)) {
    out.emplace_back(prefix + p.key(), p.value());
  }
  for (const auto& b : m.named_buffers(/*recurse=*/false)) {
    out.emplace_back(prefix + b.key(), b.value());
  }
  for (const auto& c : m.named_children()) collect(*c.value(), prefix + c.key() + ".", out);
}

// Note [Python's loading rules]
// Python's nn.Module.load_state_dict walks the modules as state_dict() does and, in each, applies
// _load_from_state_dict to the keys under the module's prefix. dpx does the same:
//  1. A norm layer with running statistics (_NormBase in Python: BatchNorm, InstanceNorm,
//     SyncBatchNorm; here any module holding a buffer of its own named num_batches_tracked)
//     whose version in the file's _metadata is absent or below 2 (files older than the buffer,
//     torchvision's original weights, and any file without _metadata: a plain dict, safetensors)
//     and whose num_batches_tracked is missing keeps its own value, and the key is not reported
//     missing (PyTorch 2.x; 1.13 set it to 0: dpx follows 2.x in both builds).
//  2. A 0-dim parameter or buffer takes a 1-D tensor of one element (checkpoints from 0.3).
//  3. Missing keys come in module order. Unexpected keys come module by module, in the file's
//     order: under a module's prefix, a key whose next name is not a child module, or whose
//     last name is not one of the module's own parameters and buffers.
// Unlike Python, nothing is copied unless every key loads: on an error the module is unchanged.
class Loader {
 public:
  Loader(const Tensors& file, const ModuleVersions& versions) : file_(file), versions_(versions) {
    for (size_t i = 0; i < file_.size(); ++i) {
      const auto [it, fresh] = index_.emplace(file_[i].first, i);
      if (fresh) {
        order_.push_back(i);
      } else {
        it->second = i;  // a repeated key: the last tensor wins, as in a dict
      }
    }
  }

  void load(const torch::nn::Module& m, const std::string& prefix, const std::vector<size_t>& keys);
  void load(const torch::nn::Module& m) { load(m, "", order_); }

  LoadStateDictResult result;
  std::vector<std::string> mismatched;
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // (destination, source)

 private:
  bool keeps_num_batches_tracked(const torch::nn::Module& m, const std::string& prefix) const;
  void load_own(const std::string& key, const at::Tensor& dst);
  void find_unexpected(const torch::nn::Module& m, const std::string& prefix,
                       const std::vector<size_t>& keys);

  const Tensors& file_;
  const ModuleVersions& versions_;
  std::unordered_map<std::string, size_t> index_;
  std::vector<size_t> order_;  // the file's keys, each once, in the file's order
};

void Loader::load(const torch::nn::Module& m, const std::string& prefix,
                  const std::vector<size_t>& keys) {
  const bool keep = keeps_num_batches_tracked(m, prefix);
  for (const auto& p : m.named_parameters(/*recurse=*/false)) load_own(prefix + p.key(), p.value());
  for (const auto& b : m.named_buffers(/*recurse=*/false)) {
    if (keep && b.key() == "num_batches_tracked") continue;
    load_own(prefix + b.key(), b.value());
  }
  find_unexpected(m, prefix, keys);
  for (const auto& c : m.named_children()) {
    const std::string child = prefix + c.key() + ".";
    std::vector<size_t> under;
    for (const size_t i : keys) {
      if (starts_with(file_[i].first, child)) under.push_back(i);
    }
    load(*c.value(), child, under);
  }
}

bool Loader::keeps_num_batches_tracked(const torch::nn::Module& m,
                                       const std::string& prefix) const {
  if (!m.named_buffers(/*recurse=*/false).contains("num_batches_tracked")) return false;
  if (index_.count(prefix + "num_batches_tracked") != 0) return false;
  const auto v = versions_.find(prefix.empty() ? "" : prefix.substr(0, prefix.size() - 1));
  return v == versions_.end() || v->second < 2;
}

void Loader::load_own(const std::string& key, const at::Tensor& dst) {
  const auto it = index_.find(key);
  if (it == index_.end()) {
    result.missing_keys.push_back(key);
    return;
  }
  at::Tensor src = file_[it->second].second;
  if (dst.dim() == 0 && src.dim() == 1 && src.size(0) == 1) src = src.select(0, 0);
  if (src.sizes() != dst.sizes()) {
    std::ostringstream m;
    m << "size mismatch for " << key << ": copying a param with shape " << src.sizes()
      << " from checkpoint, the shape in current model is " << dst.sizes() << ".";
    mismatched.push_back(m.str());
    return;
  }
  copies.emplace_back(dst, src);
}

void Loader::find_unexpected(const torch::nn::Module& m, const std::string& prefix,
                             const std::vector<size_t>& keys) {
  std::unordered_set<std::string> own, children;
  for (const auto& p : m.named_parameters(/*recurse=*/false)) own.insert(p.key());
  for (const auto& b : m.named_buffers(/*recurse=*/false)) own.insert(b.key());
  for (const auto& c : m.named_children()) children.insert(c.key());
  for (const size_t i : keys) {
    const std::string rest = file_[i].first.substr(prefix.size());
    const auto dot = rest.find('.');
    const bool known =
        dot == std::string::npos ? own.count(rest) != 0 : children.count(rest.substr(0, dot)) != 0;
    if (!known) result.unexpected_keys.push_back(file_[i].first);
  }
}

LoadStateDictResult load_with_versions(torch::nn::Module& module, const Tensors& tensors,
                                       const LoadStateDictOptions& options,
                                       const ModuleVersions& versions) {
  Loader loader(tensors, versions);
  loader.load(module);
  auto& result = loader.result;
  std::string errors;
  if (options.strict && !result.missing_keys.empty()) {
    errors += "\n\tMissing key(s) in state_dict: " + quoted(result.missing_keys) + ".";
  }
  if (options.strict && !result.unexpected_keys.empty()) {
    errors += "\n\tUnexpected key(s) in state_dict: " + quoted(result.unexpected_keys) + ".";
  }
  for (const auto& m : loader.mismatched) errors += "\n\t" + m;
  if (!errors.empty()) {
    throw CheckpointError("Error(s) in loading state_dict for " + module.name() + ":" + errors);
  }
  torch::NoGradGuard no_grad;
  for (auto& [dst, src] : loader.copies) dst.copy_(src);
  return result;
}

}  // namespace

Tensors state_dict(const torch::nn::Module& module) {
  Tensors out;
  collect(module, "", out);
  return out;
}

void save_state_dict(const torch::nn::Module& module, const std::string& path) {
  const auto tensors = state_dict(module);
  if (detail::is_safetensors(path)) {
    safetensors_save(tensors, path);
    return;
  }
  auto dict = c10::impl::GenericDict(c10::StringType::get(), c10::TensorType::get());
  for (const auto& [name, t] : tensors) dict.insert(name, t);
  torch_save(dict, path);
}

LoadStateDictResult load_state_dict(torch::nn::Module& module, const std::string& path,
                                    const LoadStateDictOptions& options) {
  Tensors tensors;
  ModuleVersions versions;
  if (detail::is_safetensors(path)) {
    tensors = safetensors_load(path);
  } else {
    const auto file = detail::read_torch_file(path, options.limits);
    tensors = tensors_of(file.value, path);
    versions = module_versions(file);
  }
  try {
    return load_with_versions(module, tensors, options, versions);
  } catch (const CheckpointError& e) {
    throw CheckpointError(std::string(e.what()) + " (file " + path + ")");
  }
}

LoadStateDictResult load_state_dict(torch::nn::Module& module, const Tensors& tensors,
                                    const LoadStateDictOptions& options) {
  return load_with_versions(module, tensors, options, {});
}

}  // namespace dpx
