// Reading a DCP checkpoint (dcp.h): each chunk's bytes, where the metadata says they are, are a
// torch.save archive of that chunk, read with the restricted reader; a tensor is assembled whole,
// or, for a fully_shard module, as the rows this rank holds, from the chunks that overlap them.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <map>
#include <set>
#include <unordered_map>

#include "dpx/checkpoint/dcp.h"
#include "dpx/errors.h"
#include "dpx/fsdp/fsdp_state_dict.h"
#include "checkpoint/dcp/metadata.h"
#include "checkpoint/python_format/torch_file.h"

namespace dpx {
namespace {

// The files of one checkpoint, each mapped once (read-only) and its size known before any
// read: a chunk's bytes are read where they lie, not copied out first. (A file truncated by
// another process while it is being read would end this one with SIGBUS: checkpoints are not
// written in place, so only a foreign writer could do that.)
class ChunkFiles {
 public:
  explicit ChunkFiles(std::string dir) : dir_(std::move(dir)) {}
  ChunkFiles(const ChunkFiles&) = delete;
  ChunkFiles& operator=(const ChunkFiles&) = delete;
  ~ChunkFiles() {
    for (auto& [name, f] : files_) {
      if (f.size > 0) ::munmap(f.data, static_cast<size_t>(f.size));
    }
  }

  // Throws unless the file is there and holds the bytes the entry names.
  void check(const detail::dcp::StorageInfo& info, const std::string& fqn) {
    const auto& file = open(info.relative_path);
    if (info.offset > file.size || info.length > file.size - info.offset) {
      throw CheckpointError(dir_ + "/" + info.relative_path + " has " +
                            std::to_string(file.size) + " bytes, and .metadata puts " + fqn +
                            " at bytes " + std::to_string(info.offset) + "-" +
                            std::to_string(info.offset + info.length) +
                            " (a file cut short or from another save?)");
    }
  }

  std::string_view read(const detail::dcp::StorageInfo& info, const std::string& fqn) {
    check(info, fqn);
    const auto& file = files_.at(info.relative_path);
    return {static_cast<const char*>(file.data) + info.offset,
            static_cast<size_t>(info.length)};
  }

 private:
  struct File {
    void* data = nullptr;
    int64_t size = 0;
  };

  const File& open(const std::string& name) {
    auto it = files_.find(name);
    if (it != files_.end()) return it->second;
    const std::string path = dir_ + "/" + name;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      if (fd >= 0) ::close(fd);
      throw CheckpointError(path + " is missing (named by " + dir_ + "/.metadata)");
    }
    File f;
    f.size = st.st_size;
    if (f.size > 0) {
      f.data = ::mmap(nullptr, static_cast<size_t>(f.size), PROT_READ, MAP_PRIVATE, fd, 0);
    }
    ::close(fd);
    if (f.data == MAP_FAILED) {
      throw CheckpointError("cannot map " + path + ": " + std::strerror(errno));
    }
    return files_.emplace(name, f).first->second;
  }

  std::string dir_;
  std::map<std::string, File> files_;
};

// Rows [first, first + rows) of dimension 0 of the tensor (all of a 0-dim one), from the chunks
// that hold any of them: the others' bytes are not read.
at::Tensor read_rows(const detail::dcp::TensorEntry& entry, const std::string& fqn,
                     ChunkFiles& files, const TorchLoadLimits& limits, int64_t first,
                     int64_t rows) {
  const bool scalar = entry.size.empty();
  const auto overlap = [&](const detail::dcp::Chunk& c) {
    if (scalar) return std::pair<int64_t, int64_t>{0, 1};
    return std::pair<int64_t, int64_t>{std::max(first, c.offsets[0]),
                                       std::min(first + rows, c.offsets[0] + c.sizes[0])};
  };
  for (const auto& chunk : entry.chunks) {
    const auto [lo, hi] = overlap(chunk);
    if (lo < hi) files.check(chunk.storage, fqn);
  }
  auto sizes = entry.size;
  if (!scalar) sizes[0] = rows;
  auto out = at::empty(sizes, at::TensorOptions(entry.dtype));
  for (const auto& chunk : entry.chunks) {
    const auto [lo, hi] = overlap(chunk);
    if (lo >= hi) continue;
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
    if (scalar) {
      out.copy_(part);
      continue;
    }
    auto source = part.narrow(0, lo - chunk.offsets[0], hi - lo);
    auto target = out.narrow(0, lo - first, hi - lo);
    for (size_t d = 1; d < chunk.offsets.size(); ++d) {
      target = target.narrow(static_cast<int64_t>(d), chunk.offsets[d], chunk.sizes[d]);
    }
    target.copy_(source);
  }
  return out;
}

at::Tensor read_whole(const detail::dcp::TensorEntry& entry, const std::string& fqn,
                      ChunkFiles& files, const TorchLoadLimits& limits) {
  return read_rows(entry, fqn, files, limits, 0, entry.size.empty() ? 1 : entry.size[0]);
}

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

}  // namespace dpx
