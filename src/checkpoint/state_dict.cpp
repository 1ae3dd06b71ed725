#include "dpx/checkpoint/state_dict.h"

#include <torch/torch.h>

#include <map>
#include <sstream>

#include "checkpoint/safetensors.h"
#include "checkpoint/torch_file.h"
#include "dpx/checkpoint/checkpoint_file.h"

namespace dpx {
namespace {

bool is_safetensors(const std::string& path, WeightsFormat format) {
  if (format != WeightsFormat::kAuto) return format == WeightsFormat::kSafetensors;
  const std::string ext = ".safetensors";
  return path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
}

std::string shape(const at::Tensor& t) {
  std::ostringstream s;
  s << "torch.Size(" << t.sizes() << ")";
  return s.str();
}

std::string quoted(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "\"" : ", \"") + k + "\"";
  return out;
}

}  // namespace

NamedTensors state_dict(const torch::nn::Module& module) {
  NamedTensors out;
  for (const auto& item : module.named_parameters()) out.emplace_back(item.key(), item.value());
  for (const auto& item : module.named_buffers()) out.emplace_back(item.key(), item.value());
  return out;
}

void save_weights(const NamedTensors& tensors, const std::string& path, WeightsFormat format) {
  if (is_safetensors(path, format)) {
    write_file_atomically(path, detail::safetensors_bytes(tensors));
    return;
  }
  auto dict = c10::impl::GenericDict(c10::StringType::get(), c10::TensorType::get());
  for (const auto& [name, t] : tensors) dict.insert(name, t);
  write_file_atomically(path, detail::torch_file_bytes(dict));
}

NamedTensors load_weights(const std::string& path, WeightsFormat format) {
  if (is_safetensors(path, format)) return detail::read_safetensors(path);
  const c10::IValue v = detail::read_torch_file(path);
  if (!v.isGenericDict()) {
    throw CheckpointError("checkpoint " + path + " holds a " + v.tagKind() +
                          ", not a dict of tensors (a state_dict)");
  }
  NamedTensors out;
  for (const auto& kv : v.toGenericDict()) {
    if (!kv.key().isString() || !kv.value().isTensor()) {
      throw CheckpointError("checkpoint " + path + " is a dict but not of names to tensors "
                            "(a state_dict); its entry " + (kv.key().isString() ?
                            "\"" + kv.key().toStringRef() + "\"" : "with a non-string key") +
                            " holds a " + kv.value().tagKind());
    }
    out.emplace_back(kv.key().toStringRef(), kv.value().toTensor());
  }
  return out;
}

LoadStateDictResult load_state_dict(torch::nn::Module& module, const std::string& path,
                                    LoadStateDictOptions options) {
  const NamedTensors file = load_weights(path, options.format);
  std::map<std::string, at::Tensor> in_file(file.begin(), file.end());
  LoadStateDictResult result;
  std::vector<std::string> mismatched;
  const NamedTensors mine = state_dict(module);
  std::map<std::string, at::Tensor> in_module(mine.begin(), mine.end());
  for (const auto& [name, t] : mine) {
    auto it = in_file.find(name);
    if (it == in_file.end()) {
      result.missing_keys.push_back(name);
    } else if (!it->second.sizes().equals(t.sizes())) {
      mismatched.push_back("size mismatch for " + name + ": copying a param with shape " +
                           shape(it->second) + " from checkpoint, the shape in current model "
                           "is " + shape(t) + ".");
    }
  }
  for (const auto& [name, t] : file) {
    if (!in_module.count(name)) result.unexpected_keys.push_back(name);
  }
  std::string errors;
  if (options.strict && !result.missing_keys.empty()) {
    errors += "\n\tMissing key(s) in state_dict: " + quoted(result.missing_keys) + ". ";
  }
  if (options.strict && !result.unexpected_keys.empty()) {
    errors += "\n\tUnexpected key(s) in state_dict: " + quoted(result.unexpected_keys) + ". ";
  }
  for (const auto& m : mismatched) errors += "\n\t" + m;
  if (!errors.empty()) {
    throw CheckpointError("Error(s) in loading state_dict for " + module.name() + " from " +
                          path + ":" + errors + (options.strict ? "\n(Pass strict = false to "
                          "load the keys both have.)" : ""));
  }
  torch::NoGradGuard no_grad;
  for (const auto& [name, t] : mine) {
    auto it = in_file.find(name);
    if (it != in_file.end()) t.copy_(it->second);
  }
  return result;
}

}  // namespace dpx
