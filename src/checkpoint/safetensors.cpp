#include "checkpoint/safetensors.h"

#include <ATen/ATen.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

#include "dpx/checkpoint/checkpoint_file.h"

namespace dpx::detail {
namespace {

const std::vector<std::pair<at::ScalarType, const char*>>& dtype_names() {
  static const std::vector<std::pair<at::ScalarType, const char*>> names = {
      {at::kDouble, "F64"}, {at::kFloat, "F32"}, {at::kHalf, "F16"}, {at::kBFloat16, "BF16"},
      {at::kLong, "I64"},   {at::kInt, "I32"},   {at::kShort, "I16"}, {at::kChar, "I8"},
      {at::kByte, "U8"},    {at::kBool, "BOOL"}};
  return names;
}

}  // namespace

std::string safetensors_bytes(const NamedTensors& tensors) {
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}};
  std::vector<at::Tensor> data;
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    at::Tensor c = t.detach().to(at::kCPU).contiguous();
    const auto it = std::find_if(dtype_names().begin(), dtype_names().end(),
                                 [&](const auto& p) { return p.first == c.scalar_type(); });
    TORCH_CHECK(it != dtype_names().end(), "safetensors has no dtype for ", c.scalar_type(),
                " (tensor ", name, ")");
    const size_t n = c.numel() * c.element_size();
    header[name] = {{"dtype", it->second}, {"shape", c.sizes().vec()},
                    {"data_offsets", {offset, offset + n}}};
    offset += n;
    data.push_back(c);
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string out(8, '\0');
  const uint64_t size = json.size();
  std::memcpy(out.data(), &size, 8);
  out += json;
  for (const auto& c : data) out.append(static_cast<const char*>(c.data_ptr()), c.nbytes());
  return out;
}

NamedTensors read_safetensors(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw CheckpointError("checkpoint " + path + " cannot be opened");
  std::stringstream ss;
  ss << file.rdbuf();
  const std::string all = ss.str();
  auto bad = [&](const std::string& what) {
    return CheckpointError("checkpoint " + path + " is not a safetensors file: " + what);
  };
  uint64_t size = 0;
  if (all.size() < 8) throw bad("it is shorter than its 8-byte header size");
  std::memcpy(&size, all.data(), 8);
  if (size > all.size() - 8) {
    throw bad("its header says " + std::to_string(size) + " bytes, the file holds " +
              std::to_string(all.size() - 8) + " after the size");
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(all.substr(8, size));
  } catch (const std::exception& e) {
    throw bad(std::string("its header is not JSON (") + e.what() + ")");
  }
  if (!header.is_object()) throw bad("its header is not a JSON object");
  const size_t data_start = 8 + size, data_size = all.size() - data_start;
  std::vector<std::tuple<size_t, std::string, at::Tensor>> found;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    try {
      const std::string dtype = entry.at("dtype").get<std::string>();
      const auto it = std::find_if(dtype_names().begin(), dtype_names().end(),
                                   [&](const auto& p) { return dtype == p.second; });
      if (it == dtype_names().end()) throw bad("tensor " + name + " has dtype " + dtype);
      const auto shape = entry.at("shape").get<std::vector<int64_t>>();
      const auto offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
      auto t = at::empty(shape, at::TensorOptions().dtype(it->first));
      if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > data_size ||
          offsets[1] - offsets[0] != t.nbytes()) {
        throw bad("tensor " + name + "'s data_offsets do not fit its shape or the file");
      }
      std::memcpy(t.data_ptr(), all.data() + data_start + offsets[0], t.nbytes());
      found.emplace_back(offsets[0], name, t);
    } catch (const nlohmann::json::exception& e) {
      throw bad("tensor " + name + "'s entry is malformed (" + e.what() + ")");
    } catch (const c10::Error& e) {
      throw bad("tensor " + name + "'s shape is invalid");
    }
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return std::get<0>(a) < std::get<0>(b); });
  NamedTensors out;
  for (auto& [offset, name, t] : found) out.emplace_back(name, t);
  return out;
}

}  // namespace dpx::detail
