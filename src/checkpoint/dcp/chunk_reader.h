// The chunks of a DCP checkpoint's entries, read where .metadata puts them (dcp_load.cpp, for
// modules and optimizers): each chunk or object a torch.save archive, read with the restricted
// reader. Inline, so that the library's unity batches keep their files (Note [Unity builds]).
#pragma once

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <string>
#include <string_view>

#include "dpx/checkpoint/python_format.h"
#include "dpx/errors.h"
#include "checkpoint/dcp/metadata.h"
#include "checkpoint/python_format/torch_file.h"

namespace dpx::detail::dcp {

// The files of one checkpoint, each mapped once (read-only) and its size known before any
// read: a chunk's bytes are read where they lie, not copied out first. (A file truncated by
// another process while it is being read would end this one with SIGBUS: checkpoints are not
// written in place, so only a foreign writer could do that.)
class ChunkFiles {
 public:
  explicit ChunkFiles(std::string dir) : dir_(std::move(dir)) {}
  ChunkFiles(const ChunkFiles&) = delete;
  ChunkFiles& operator=(const ChunkFiles&) = delete;
  ~ChunkFiles();

  // Throws unless the file is there and holds the bytes the entry names.
  void check(const StorageInfo& info, const std::string& fqn);
  std::string_view read(const StorageInfo& info, const std::string& fqn);

 private:
  struct File {
    void* data = nullptr;
    int64_t size = 0;
  };
  const File& open(const std::string& name);

  std::string dir_;
  std::map<std::string, File> files_;
};

// Rows [first, first + rows) of dimension 0 of the tensor (all of a 0-dim one), from the chunks
// that hold any of them: the others' bytes are not read.
at::Tensor read_rows(const TensorEntry& entry, const std::string& fqn, ChunkFiles& files,
                     const TorchLoadLimits& limits, int64_t first, int64_t rows);
at::Tensor read_whole(const TensorEntry& entry, const std::string& fqn, ChunkFiles& files,
                      const TorchLoadLimits& limits);

// A BytesStorageMetadata entry: the object its torch.save archive holds (a hyper-parameter, a
// step count), read with the restricted reader.
c10::IValue read_object(const StorageInfo& info, const std::string& fqn, ChunkFiles& files,
                        const TorchLoadLimits& limits);

inline ChunkFiles::~ChunkFiles() {
  for (auto& [name, f] : files_) {
    if (f.size > 0) ::munmap(f.data, static_cast<size_t>(f.size));
  }
}

inline void ChunkFiles::check(const StorageInfo& info, const std::string& fqn) {
  const auto& file = open(info.relative_path);
  if (info.offset > file.size || info.length > file.size - info.offset) {
    throw CheckpointError(dir_ + "/" + info.relative_path + " has " + std::to_string(file.size) +
                          " bytes, and .metadata puts " + fqn + " at bytes " +
                          std::to_string(info.offset) + "-" +
                          std::to_string(info.offset + info.length) +
                          " (a file cut short or from another save?)");
  }
}

inline std::string_view ChunkFiles::read(const StorageInfo& info, const std::string& fqn) {
  check(info, fqn);
  const auto& file = files_.at(info.relative_path);
  return {static_cast<const char*>(file.data) + info.offset, static_cast<size_t>(info.length)};
}

inline const ChunkFiles::File& ChunkFiles::open(const std::string& name) {
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

inline at::Tensor read_rows(const TensorEntry& entry, const std::string& fqn,
                     ChunkFiles& files, const TorchLoadLimits& limits, int64_t first,
                     int64_t rows) {
  const bool scalar = entry.size.empty();
  const auto overlap = [&](const Chunk& c) {
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
    const auto value = read_torch_bytes(files.read(chunk.storage, fqn), what, limits).value;
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

inline at::Tensor read_whole(const TensorEntry& entry, const std::string& fqn,
                      ChunkFiles& files, const TorchLoadLimits& limits) {
  return read_rows(entry, fqn, files, limits, 0, entry.size.empty() ? 1 : entry.size[0]);
}

inline c10::IValue read_object(const StorageInfo& info, const std::string& fqn, ChunkFiles& files,
                        const TorchLoadLimits& limits) {
  return read_torch_bytes(files.read(info, fqn), fqn + " in " + info.relative_path, limits).value;
}

}  // namespace dpx::detail::dcp
