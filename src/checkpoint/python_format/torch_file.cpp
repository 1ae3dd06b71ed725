// torch.save's container: a zip (LibTorch's own PyTorchStreamWriter/Reader, the classes Python's
// torch.save and torch.load use) holding data.pkl, byteorder and one data/<key> record per storage.
#include <ATen/ATen.h>
#include <caffe2/serialize/in_memory_adapter.h>
#include <caffe2/serialize/inline_container.h>

#include <cstring>
#include <exception>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string_view>

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
  std::string bytes;
  torch_save_to(value, [&](const char* data, size_t size) { bytes.append(data, size); });
  return bytes;
}

void torch_save_to(const c10::IValue& value, const ByteSink& sink) {
  std::vector<at::Tensor> storages;
  const std::string pickle = detail::pickle_dump(value, storages);
  // A sink that throws (a full disk, a test's hook) must not throw through the writer: its
  // destructor finishes the archive through the same sink, and an exception from there ends the
  // process. The first failure is kept, later bytes are dropped, and it is rethrown here.
  std::exception_ptr failure;
  {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
      if (failure) return size;
      try {
        sink(static_cast<const char*>(data), size);
      } catch (...) {
        failure = std::current_exception();
      }
      return size;
    });
    writer.writeRecord("data.pkl", pickle.data(), pickle.size());
    writer.writeRecord("byteorder", "little", 6);
    for (size_t i = 0; i < storages.size() && !failure; ++i) {
      const auto& s = storages[i];
      writer.writeRecord("data/" + std::to_string(i), s.data_ptr(), s.nbytes());
    }
    if (!failure) writer.writeEndOfFile();
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace detail

namespace detail {

bool is_safetensors(const std::string& path) {
  const std::string ext = ".safetensors";
  return path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
}

namespace {

// data/<key> as a 1-D tensor of `dtype`, copied once from the record's verified bytes.
at::Tensor read_storage(const std::map<std::string, std::string_view>& records,
                        const std::string& prefix, const std::string& key,
                        c10::ScalarType dtype, const std::string& what) {
  const std::string name = "data/" + key;
  const auto found = records.find(prefix + name);
  if (found == records.end()) throw CheckpointError(what + ": record " + name + " missing");
  const auto bytes = found->second;
  const size_t elem = c10::elementSize(dtype);
  if (bytes.size() % elem != 0) {
    throw CheckpointError(what + ": record " + name + " has " + std::to_string(bytes.size()) +
                          " bytes, not a multiple of its element size");
  }
  auto t = at::empty({static_cast<int64_t>(bytes.size() / elem)}, at::TensorOptions(dtype));
  std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

// The records' common folder ("archive/"), as PyTorchStreamReader strips it: that of data.pkl.
std::string archive_prefix(const std::map<std::string, std::string_view>& records) {
  const std::string pkl = "/data.pkl";
  for (const auto& [name, bytes] : records) {
    if (name.size() > pkl.size() && name.compare(name.size() - pkl.size(), pkl.size(), pkl) == 0 &&
        name.find('/') == name.size() - pkl.size()) {
      return name.substr(0, name.size() - pkl.size() + 1);
    }
  }
  return "";
}

// `records`: the zip's verified records (verify_zip_crcs), whose stored bytes the storages are
// copied from; the reader parses the zip's layout and gives data.pkl and byteorder.
Unpickled read_zip(std::string_view bytes,
                   const std::map<std::string, std::string_view>& records,
                   const std::string& what, const TorchLoadLimits& limits) {
  caffe2::serialize::PyTorchStreamReader reader(
      std::make_shared<caffe2::serialize::MemoryReadAdapter>(bytes.data(),
                                                             static_cast<off_t>(bytes.size())));
  if (reader.hasRecord("byteorder")) {
    const auto [data, size] = reader.getRecord("byteorder");
    if (std::string(static_cast<const char*>(data.get()), size) != "little") {
      throw CheckpointError(what + ": big-endian files are not read");
    }
  }
  if (!reader.hasRecord("data.pkl")) {
    throw CheckpointError(what + ": no data.pkl record; not a torch.save file");
  }
  const std::string prefix = archive_prefix(records);
  const auto [pkl, pkl_size] = reader.getRecord("data.pkl");
  const std::string pickle(static_cast<const char*>(pkl.get()), pkl_size);
  return pickle_load(
      pickle,
      [&](const std::string& key, c10::ScalarType dtype) {
        return read_storage(records, prefix, key, dtype, what);
      },
      what, limits);
}

}  // namespace

Unpickled read_torch_bytes(std::string_view bytes, const std::string& what,
                           const TorchLoadLimits& limits) {
  const auto records = verify_zip_crcs(bytes, what);
  try {
    return read_zip(bytes, records, what, limits);
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
