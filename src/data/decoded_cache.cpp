#include "data/decoded_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "dpx/runtime/files.h"

namespace dpx::detail {
namespace {

// The file: this header, then the bytes. 64 bytes keep the data aligned for any reader.
struct Header {
  std::array<char, 8> magic;
  int64_t dims;
  std::array<int64_t, 6> sizes;
};
static_assert(sizeof(Header) == 64);
constexpr std::array<char, 8> kMagic = {'D', 'P', 'X', 'U', '8', 'v', '1', '\0'};

// "<file name>-<hash of where and which version of the source>.u8", or "" when the source
// cannot be stat'ed (decode() then reports it).
std::string cache_name(const std::string& source) {
  struct stat st {};
  if (::stat(source.c_str(), &st) != 0) return "";
  // Not std::filesystem: Note [LibTorch's std::filesystem] (dpx/runtime/files.h).
  char* real = ::realpath(source.c_str(), nullptr);
  const std::string where = real ? real : absolute_path(source);
  std::free(real);
  const std::string identity = where + '\n' + std::to_string(st.st_size) +
                               '\n' + std::to_string(st.st_mtim.tv_sec) + '.' +
                               std::to_string(st.st_mtim.tv_nsec) + '\n' +
                               std::to_string(st.st_ino);
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016zx", std::hash<std::string>{}(identity));
  return source.substr(source.find_last_of('/') + 1) + "-" + hash + ".u8";
}

// The cached tensor mapped from `path`, or undefined when the file is missing or not whole.
torch::Tensor map_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  struct stat st {};
  Header h {};
  const bool read_ok = ::fstat(fd, &st) == 0 && ::pread(fd, &h, sizeof h, 0) == sizeof h;
  int64_t bytes = 1;
  bool ok = read_ok && h.magic == kMagic && h.dims >= 1 && h.dims <= 6;
  std::vector<int64_t> sizes;
  for (int64_t d = 0; ok && d < h.dims; ++d) {
    ok = h.sizes[d] >= 0 && (h.sizes[d] == 0 || bytes <= INT64_MAX / h.sizes[d]);
    bytes *= ok ? h.sizes[d] : 1;
    sizes.push_back(h.sizes[d]);
  }
  ok = ok && st.st_size == static_cast<off_t>(sizeof h + bytes);
  // Private and writable: pages stay shared with the other processes until one writes to its
  // tensor, which then gets a copy of its own instead of a fault (or a change under the others).
  void* base = ok ? ::mmap(nullptr, st.st_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0)
                  : MAP_FAILED;
  ::close(fd);
  if (base == MAP_FAILED) return {};
  const size_t length = st.st_size;
  return torch::from_blob(
      static_cast<char*>(base) + sizeof h, sizes, [base, length](void*) { ::munmap(base, length); },
      torch::TensorOptions(torch::kUInt8));
}

// Writes `bytes` to `path` whole or not at all, unless `path` exists already (the first writer
// wins: the file others may have mapped is never replaced, so a host keeps one copy even when
// all its ranks decode at once on a cold start). False when it could not write.
bool write_file(const std::string& path, const torch::Tensor& bytes) {
  Header h {};
  h.magic = kMagic;
  h.dims = bytes.dim();
  if (h.dims < 1 || h.dims > 6) return false;
  for (int64_t d = 0; d < h.dims; ++d) h.sizes[d] = bytes.size(d);
  std::string temporary = path + ".tmp-XXXXXX";
  const int fd = ::mkstemp(temporary.data());
  if (fd < 0) return false;
  const auto data = bytes.contiguous();
  bool ok = ::write(fd, &h, sizeof h) == sizeof h;
  const char* p = static_cast<const char*>(data.data_ptr());
  for (size_t left = data.numel(); ok && left > 0;) {
    const ssize_t n = ::write(fd, p, left);
    ok = n > 0 || (n < 0 && errno == EINTR);
    if (n > 0) p += n, left -= static_cast<size_t>(n);
  }
  // On disk before it has its name: after a crash a whole-looking file holds its bytes.
  ok = ok && ::fchmod(fd, 0644) == 0 && ::fsync(fd) == 0;
  ok = ::close(fd) == 0 && ok;
  ok = ok && (::link(temporary.c_str(), path.c_str()) == 0 || errno == EEXIST);
  ::unlink(temporary.c_str());
  return ok;
}

}  // namespace

std::string data_cache_folder() {
  const char* set = std::getenv("DPX_DATA_CACHE");
  if (set && *set) return std::strcmp(set, "off") == 0 ? "" : set;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return std::string(xdg) + "/dpx/data";
  if (const char* home = std::getenv("HOME"); home && *home)
    return std::string(home) + "/.cache/dpx/data";
  return "";
}

torch::Tensor decoded_bytes(const std::string& source,
                            const std::function<torch::Tensor()>& decode) {
  const std::string folder = data_cache_folder();
  const std::string name = folder.empty() ? "" : cache_name(source);
  if (name.empty()) return decode();
  const std::string path = folder + "/" + name;
  if (auto mapped = map_file(path); mapped.defined()) return mapped;
  // A file there that does not map is not whole (files get their name only once whole: it was
  // cut short since, or is of another format); no process maps it. It makes way.
  ::unlink(path.c_str());
  auto bytes = decode();
  TORCH_CHECK(bytes.scalar_type() == torch::kUInt8, "decoded_bytes: decode() must give uint8");
  try {
    make_dirs(folder);
  } catch (const std::runtime_error&) {
    return bytes;  // no cache folder to be had: this process keeps its own copy
  }
  if (!write_file(path, bytes)) return bytes;
  // Map what was written (or what a faster process wrote first: the same bytes), so this process
  // shares the host's copy and frees its own.
  auto mapped = map_file(path);
  return mapped.defined() ? mapped : bytes;
}

}  // namespace dpx::detail
