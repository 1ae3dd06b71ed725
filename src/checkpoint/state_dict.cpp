// Python's state_dict names on LibTorch modules, and load_state_dict with Python's strictness.
#include <torch/torch.h>

#include <map>
#include <sstream>

#include "dpx/checkpoint/python_format.h"

namespace dpx {
namespace {

bool is_safetensors(const std::string& path) {
  const std::string ext = ".safetensors";
  return path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
}

std::string quoted(const std::vector<std::string>& keys) {
  std::string s;
  for (const auto& k : keys) s += (s.empty() ? "\"" : ", \"") + k + "\"";
  return s;
}

std::vector<std::pair<std::string, at::Tensor>> tensors_of(const c10::IValue& v,
                                                           const std::string& path) {
  if (!v.isGenericDict()) throw CheckpointError(path + " does not hold a dict of tensors");
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& kv : v.toGenericDict()) {
    if (!kv.key().isString() || !kv.value().isTensor()) {
      throw CheckpointError(path + " holds a dict that is not a state_dict (str -> tensor)");
    }
    out.emplace_back(kv.key().toStringRef(), kv.value().toTensor());
  }
  return out;
}

}  // namespace

std::vector<std::pair<std::string, at::Tensor>> state_dict(const torch::nn::Module& module) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& p : module.named_parameters(/*recurse=*/true))
    out.emplace_back(p.key(), p.value());
  for (const auto& b : module.named_buffers(/*recurse=*/true)) out.emplace_back(b.key(), b.value());
  return out;
}

void save_state_dict(const torch::nn::Module& module, const std::string& path) {
  const auto tensors = state_dict(module);
  if (is_safetensors(path)) {
    safetensors_save(tensors, path);
    return;
  }
  auto dict = c10::impl::GenericDict(c10::StringType::get(), c10::TensorType::get());
  for (const auto& [name, t] : tensors) dict.insert(name, t);
  torch_save(dict, path);
}

LoadStateDictResult load_state_dict(torch::nn::Module& module, const std::string& path,
                                    const LoadStateDictOptions& options) {
  const auto tensors =
      is_safetensors(path) ? safetensors_load(path) : tensors_of(torch_load(path), path);
  try {
    return load_state_dict(module, tensors, options);
  } catch (const CheckpointError& e) {
    throw CheckpointError(std::string(e.what()) + " (file " + path + ")");
  }
}

LoadStateDictResult load_state_dict(torch::nn::Module& module,
                                    const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                                    const LoadStateDictOptions& options) {
  std::map<std::string, at::Tensor> given(tensors.begin(), tensors.end());
  LoadStateDictResult result;
  std::vector<std::string> mismatched;
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // (destination, source)
  for (const auto& [name, dst] : state_dict(module)) {
    const auto it = given.find(name);
    if (it == given.end()) {
      result.missing_keys.push_back(name);
      continue;
    }
    if (it->second.sizes() != dst.sizes()) {
      std::ostringstream m;
      m << "size mismatch for " << name << ": copying a param with shape " << it->second.sizes()
        << " from checkpoint, the shape in current model is " << dst.sizes() << ".";
      mismatched.push_back(m.str());
    } else {
      copies.emplace_back(dst, it->second);
    }
    given.erase(it);
  }
  for (const auto& kv : given) result.unexpected_keys.push_back(kv.first);
  std::string errors;
  if (options.strict && !result.missing_keys.empty()) {
    errors += "\n\tMissing key(s) in state_dict: " + quoted(result.missing_keys) + ".";
  }
  if (options.strict && !result.unexpected_keys.empty()) {
    errors += "\n\tUnexpected key(s) in state_dict: " + quoted(result.unexpected_keys) + ".";
  }
  for (const auto& m : mismatched) errors += "\n\t" + m;
  if (!errors.empty()) {
    throw CheckpointError("Error(s) in loading state_dict for " + module.name() + ":" + errors);
  }
  torch::NoGradGuard no_grad;
  for (auto& [dst, src] : copies) dst.copy_(src);
  return result;
}

}  // namespace dpx
