// safetensors: 8-byte little-endian header length, a JSON header {name: {dtype, shape,
// data_offsets: [begin, end)}, "__metadata__": {str: str}} padded with spaces to 8 bytes, then
// the raw little-endian tensor bytes.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "dpx/checkpoint/python_format.h"

namespace dpx {
namespace {

struct DtypeName {
  c10::ScalarType dtype;
  const char* name;
};

constexpr DtypeName kDtypes[] = {
    {c10::kDouble, "F64"}, {c10::kFloat, "F32"}, {c10::kHalf, "F16"},  {c10::kBFloat16, "BF16"},
    {c10::kLong, "I64"},   {c10::kInt, "I32"},   {c10::kShort, "I16"}, {c10::kChar, "I8"},
    {c10::kByte, "U8"},    {c10::kBool, "BOOL"},
};

const char* name_of(c10::ScalarType t) {
  for (const auto& d : kDtypes) {
    if (d.dtype == t) return d.name;
  }
  TORCH_CHECK(false, "safetensors_save: no safetensors dtype for ", t);
}

}  // namespace

void safetensors_save(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::string& path,
                      const std::vector<std::pair<std::string, std::string>>& metadata,
                      const CheckpointWriteOptions& write) {
  // ordered_json: the header lists the tensors in the order given, as their data lies.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::vector<at::Tensor> data;
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    TORCH_CHECK(name != "__metadata__" && !header.contains(name),
                "safetensors_save: duplicate or reserved tensor name '", name, "'");
    data.push_back(t.detach().to(c10::kCPU).contiguous());
    header[name] = {{"dtype", name_of(t.scalar_type())},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + data.back().nbytes()}}};
    offset += data.back().nbytes();
  }
  if (!metadata.empty()) {
    header["__metadata__"] = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) header["__metadata__"][k] = v;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  const uint64_t n = json.size();
  std::memcpy(bytes.data(), &n, 8);
  bytes += json;
  for (const auto& t : data) bytes.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
  write_file_atomically(path, bytes, write);
}

namespace {

// One header entry -> its tensor; throws CheckpointError naming `what` and the tensor.
at::Tensor read_tensor(const std::string& name, const nlohmann::ordered_json& info,
                       const std::string& bytes, size_t base, const std::string& what) {
  const std::string dtype_name = info.at("dtype");
  const auto* d = std::find_if(std::begin(kDtypes), std::end(kDtypes),
                               [&](const DtypeName& x) { return dtype_name == x.name; });
  if (d == std::end(kDtypes)) throw CheckpointError(what + ": unsupported dtype " + dtype_name);
  const auto shape = info.at("shape").get<std::vector<int64_t>>();
  const auto offsets = info.at("data_offsets").get<std::vector<uint64_t>>();
  uint64_t nbytes = c10::elementSize(d->dtype);
  for (const int64_t s : shape) {
    if (s < 0) throw CheckpointError(what + ": negative shape for " + name);
    if (__builtin_mul_overflow(nbytes, static_cast<uint64_t>(s), &nbytes) ||
        nbytes > static_cast<uint64_t>(INT64_MAX)) {
      throw CheckpointError(what + ": tensor " + name +
                            " has a shape whose size overflows 64 bits (corrupt header)");
    }
  }
  if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] - offsets[0] != nbytes ||
      offsets[1] > bytes.size() - base) {
    throw CheckpointError(what + ": tensor " + name +
                          " has data_offsets that do not match its shape or reach past the end "
                          "of the file (truncated?)");
  }
  auto t = at::empty(shape, at::TensorOptions(d->dtype));
  std::memcpy(t.data_ptr(), bytes.data() + base + offsets[0], nbytes);
  return t;
}

}  // namespace

std::vector<std::pair<std::string, at::Tensor>> safetensors_load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError("safetensors_load: cannot open " + path);
  std::ostringstream buf;
  buf << in.rdbuf();
  const std::string bytes = buf.str();
  const std::string what = "safetensors_load " + path;
  uint64_t n = 0;
  if (bytes.size() >= 8) std::memcpy(&n, bytes.data(), 8);
  if (bytes.size() < 8 || n > bytes.size() - 8 || n < 2 || bytes[8] != '{') {
    throw CheckpointError(what + ": not a safetensors file (truncated, or its 8-byte header " +
                          "length " + std::to_string(n) + " does not fit the " +
                          std::to_string(bytes.size()) + "-byte file)");
  }
  const size_t base = 8 + n;
  // ((begin, end), tensor): Python's load_file returns the tensors in the order of their data
  // (by begin, then end; ties in the header's order).
  using Span = std::pair<uint64_t, uint64_t>;
  std::vector<std::pair<Span, std::pair<std::string, at::Tensor>>> found;
  try {
    const auto header = nlohmann::ordered_json::parse(bytes.begin() + 8, bytes.begin() + base);
    for (const auto& [name, info] : header.items()) {
      if (name == "__metadata__") continue;
      auto t = read_tensor(name, info, bytes, base, what);  // checks data_offsets
      const auto& offsets = info.at("data_offsets");
      found.push_back({{offsets.at(0).get<uint64_t>(), offsets.at(1).get<uint64_t>()},
                       {name, std::move(t)}});
    }
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(what + ": malformed header: " + e.what());
  } catch (const c10::Error& e) {
    throw CheckpointError(what + ": " + e.what_without_backtrace());
  }
  std::stable_sort(found.begin(), found.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

}  // namespace dpx
