// Reading a DCP checkpoint's tensors whole (dcp.h): each chunk's bytes, where the metadata says
// they are, are a torch.save archive of that chunk, read with the restricted reader.
#include <sys/stat.h>

#include <fstream>
#include <map>

#include "dpx/checkpoint/dcp.h"
#include "dpx/errors.h"
#include "checkpoint/dcp/metadata.h"
#include "checkpoint/python_format/torch_file.h"

namespace dpx {
namespace {

// The files of one checkpoint, opened once each, their sizes known before any read.
class ChunkFiles {
 public:
  struct File {
    std::ifstream in;
    int64_t size = 0;
  };

  explicit ChunkFiles(std::string dir) : dir_(std::move(dir)) {}

  // Throws unless the file is there and holds the bytes the entry names.
  File& check(const detail::dcp::StorageInfo& info, const std::string& fqn) {
    auto& file = open(info.relative_path);
    if (info.offset > file.size || info.length > file.size - info.offset) {
      throw CheckpointError(dir_ + "/" + info.relative_path + " has " +
                            std::to_string(file.size) + " bytes, and .metadata puts " + fqn +
                            " at bytes " + std::to_string(info.offset) + "-" +
                            std::to_string(info.offset + info.length) +
                            " (a file cut short or from another save?)");
    }
    return file;
  }

  std::string read(const detail::dcp::StorageInfo& info, const std::string& fqn) {
    auto& file = check(info, fqn);
    std::string bytes(static_cast<size_t>(info.length), '\0');
    file.in.seekg(info.offset);
    file.in.read(bytes.data(), info.length);
    if (!file.in) throw CheckpointError("cannot read " + dir_ + "/" + info.relative_path);
    return bytes;
  }

 private:

  File& open(const std::string& name) {
    auto it = files_.find(name);
    if (it != files_.end()) return it->second;
    const std::string path = dir_ + "/" + name;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      throw CheckpointError(path + " is missing (named by " + dir_ + "/.metadata)");
    }
    File f;
    f.in.open(path, std::ios::binary);
    if (!f.in) throw CheckpointError("cannot open " + path);
    f.size = st.st_size;
    return files_.emplace(name, std::move(f)).first->second;
  }

  std::string dir_;
  std::map<std::string, File> files_;
};

at::Tensor read_whole(const detail::dcp::TensorEntry& entry, const std::string& fqn,
                      ChunkFiles& files, const TorchLoadLimits& limits) {
  for (const auto& chunk : entry.chunks) files.check(chunk.storage, fqn);
  auto whole = at::empty(entry.size, at::TensorOptions(entry.dtype));
  for (const auto& chunk : entry.chunks) {
    const std::string what = "chunk of " + fqn + " in " + chunk.storage.relative_path;
    const auto value = detail::read_torch_bytes(files.read(chunk.storage, fqn), what, limits).value;
    if (!value.isTensor()) throw CheckpointError(what + " does not hold a tensor");
    const auto part = value.toTensor();
    if (part.sizes() != at::IntArrayRef(chunk.sizes) || part.scalar_type() != entry.dtype) {
      throw CheckpointError(what + " holds a " + std::string(c10::toString(part.scalar_type())) +
                            " tensor of shape " + c10::str(part.sizes()) + ", .metadata says " +
                            c10::toString(entry.dtype) + " " +
                            c10::str(at::IntArrayRef(chunk.sizes)));
    }
    auto target = whole;
    for (size_t d = 0; d < chunk.offsets.size(); ++d) {
      target = target.narrow(static_cast<int64_t>(d), chunk.offsets[d], chunk.sizes[d]);
    }
    target.copy_(part);
  }
  return whole;
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
  LoadStateDictOptions load;
  load.strict = options.strict;
  load.limits = options.limits;
  return load_state_dict(module, dcp_read_tensors(directory, options.prefix, options.limits),
                         load);
}

}  // namespace dpx
