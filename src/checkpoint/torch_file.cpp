#include "checkpoint/torch_file.h"

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/istream_adapter.h>

#include <fstream>
#include <sstream>

#include "checkpoint/pickle.h"
#include "dpx/checkpoint/checkpoint_file.h"

namespace dpx::detail {
namespace {

std::string first_line(const std::exception& e) {
  const std::string what = e.what();
  return what.substr(0, what.find('\n'));
}

}  // namespace

std::string torch_file_bytes(const c10::IValue& value) {
  std::vector<at::Tensor> storages;
  const std::string pickle = pickle_weights(value, storages);
  std::string out;
  caffe2::serialize::PyTorchStreamWriter zip([&](const void* data, size_t n) {
    out.append(static_cast<const char*>(data), n);
    return n;
  });
  zip.writeRecord("data.pkl", pickle.data(), pickle.size());
  zip.writeRecord("byteorder", "little", 6);
  for (size_t i = 0; i < storages.size(); ++i) {
    const at::Tensor& t = storages[i];
    zip.writeRecord("data/" + std::to_string(i), t.data_ptr(), t.numel() * t.element_size());
  }
  zip.writeEndOfFile();
  return out;
}

c10::IValue read_torch_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw CheckpointError("checkpoint " + path + " cannot be opened");
  std::stringstream bytes;
  bytes << file.rdbuf();
  const std::string all = bytes.str();
  if (all.size() < 4 || all.compare(0, 4, "PK\x03\x04") != 0) {
    throw CheckpointError("checkpoint " + path + " is not a torch.save file (no zip magic \"PK\"; "
                          "a file of torch.save's legacy format or torch::save's TorchScript "
                          "archive cannot be read here)");
  }
  std::istringstream in(all);
  try {
    caffe2::serialize::PyTorchStreamReader zip(
        std::make_shared<caffe2::serialize::IStreamAdapter>(&in));
    if (zip.hasRecord("byteorder")) {
      auto [data, n] = zip.getRecord("byteorder");
      const std::string order(static_cast<const char*>(data.get()), n);
      if (order != "little") {
        throw CheckpointError("checkpoint " + path + " holds " + order + "-endian tensors");
      }
    }
    auto [pkl, size] = zip.getRecord("data.pkl");
    const std::string pickle(static_cast<const char*>(pkl.get()), size);
    return unpickle_weights(pickle, [&](const std::string& key, at::ScalarType dtype,
                                        int64_t numel) {
      const std::string record = "data/" + key;
      if (!zip.hasRecord(record)) {
        throw CheckpointError("checkpoint " + path + " lacks the record " + record);
      }
      auto [data, n] = zip.getRecord(record);
      const size_t want = static_cast<size_t>(numel) * c10::elementSize(dtype);
      if (numel < 0 || n < want) {
        throw CheckpointError("checkpoint " + path + ": record " + record + " holds " +
                              std::to_string(n) + " bytes, its tensor needs " +
                              std::to_string(want));
      }
      auto t = at::empty({numel}, at::TensorOptions().dtype(dtype));
      std::memcpy(t.data_ptr(), data.get(), want);
      return t;
    }, path);
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& e) {
    throw CheckpointError("checkpoint " + path + " is not a readable torch.save file: " +
                          first_line(e));
  }
}

}  // namespace dpx::detail
