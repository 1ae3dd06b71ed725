// torch.save's container: a zip (LibTorch's own PyTorchStreamWriter/Reader, the classes Python's
// torch.save and torch.load use) holding data.pkl, byteorder and one data/<key> record per storage.
#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "checkpoint/python_format/torch_file.h"
#include "checkpoint/python_format/zip_crc.h"
#include "dpx/checkpoint/python_format.h"

namespace dpx {

void torch_save(const c10::IValue& value, const std::string& path,
                const CheckpointWriteOptions& write) {
  write_file_atomically(path, detail::torch_save_bytes(value), write);
}

namespace detail {

std::string torch_save_bytes(const c10::IValue& value) {
  std::vector<at::Tensor> storages;
  const std::string pickle = detail::pickle_dump(value, storages);
  std::string bytes;
  {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
      bytes.append(static_cast<const char*>(data), size);
      return size;
    });
    writer.writeRecord("data.pkl", pickle.data(), pickle.size());
    writer.writeRecord("byteorder", "little", 6);
    for (size_t i = 0; i < storages.size(); ++i) {
      const auto& s = storages[i];
      writer.writeRecord("data/" + std::to_string(i), s.data_ptr(), s.nbytes());
    }
    writer.writeEndOfFile();
  }
  return bytes;
}

}  // namespace detail

namespace detail {

bool is_safetensors(const std::string& path) {
  const std::string ext = ".safetensors";
  return path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
}

namespace {

// data/<key> as a 1-D tensor of `dtype`.
at::Tensor read_storage(caffe2::serialize::PyTorchStreamReader& reader, const std::string& key,
                        c10::ScalarType dtype, const std::string& what) {
  const std::string name = "data/" + key;
  if (!reader.hasRecord(name)) throw CheckpointError(what + ": record " + name + " missing");
  auto [data, size] = reader.getRecord(name);
  const size_t elem = c10::elementSize(dtype);
  if (size % elem != 0) {
    throw CheckpointError(what + ": record " + name + " has " + std::to_string(size) +
                          " bytes, not a multiple of its element size");
  }
  auto t = at::empty({static_cast<int64_t>(size / elem)}, at::TensorOptions(dtype));
  std::memcpy(t.data_ptr(), data.get(), size);
  return t;
}

Unpickled read_zip(const std::string& bytes, const std::string& what,
                   const TorchLoadLimits& limits) {
  std::istringstream stream(bytes);
  caffe2::serialize::PyTorchStreamReader reader(&stream);
  if (reader.hasRecord("byteorder")) {
    const auto [data, size] = reader.getRecord("byteorder");
    if (std::string(static_cast<const char*>(data.get()), size) != "little") {
      throw CheckpointError(what + ": big-endian files are not read");
    }
  }
  if (!reader.hasRecord("data.pkl")) {
    throw CheckpointError(what + ": no data.pkl record; not a torch.save file");
  }
  const auto [pkl, pkl_size] = reader.getRecord("data.pkl");
  const std::string pickle(static_cast<const char*>(pkl.get()), pkl_size);
  return pickle_load(
      pickle,
      [&](const std::string& key, c10::ScalarType dtype) {
        return read_storage(reader, key, dtype, what);
      },
      what, limits);
}

}  // namespace

Unpickled read_torch_bytes(const std::string& bytes, const std::string& what,
                           const TorchLoadLimits& limits) {
  verify_zip_crcs(bytes, what);
  try {
    return read_zip(bytes, what, limits);
  } catch (const CheckpointError&) {
    throw;
  } catch (const c10::Error& e) {
    throw CheckpointError(what +
                          " is not a readable torch.save file (truncated, corrupt or another "
                          "format): " +
                          e.what_without_backtrace());
  }
}

Unpickled read_torch_file(const std::string& path, const TorchLoadLimits& limits) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError("torch_load: cannot open " + path);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return read_torch_bytes(buffer.str(), "torch_load " + path, limits);
}

}  // namespace detail

c10::IValue torch_load(const std::string& path, const TorchLoadLimits& limits) {
  return detail::read_torch_file(path, limits).value;
}

}  // namespace dpx
