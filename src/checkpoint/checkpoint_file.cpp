#include "dpx/checkpoint/checkpoint_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>

namespace dpx {
namespace {

constexpr char kMagic[8] = {'D', 'P', 'X', 'C', 'K', 'P', 'T', '1'};
constexpr size_t kHeaderSize = 24;

uint32_t crc_of(const std::string& data) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto* p = reinterpret_cast<const Bytef*>(data.data());
  size_t left = data.size();
  while (left > 0) {  // crc32 takes a uInt length
    const uInt chunk = static_cast<uInt>(std::min<size_t>(left, 1u << 30));
    crc = crc32(crc, p, chunk);
    p += chunk;
    left -= chunk;
  }
  return static_cast<uint32_t>(crc);
}

template <typename T>
void put_le(std::string& out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) {
    out.push_back(static_cast<char>((static_cast<uint64_t>(value) >> (8 * i)) & 0xff));
  }
}

template <typename T>
T get_le(const char* p) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) {
    v |= uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  }
  return static_cast<T>(v);
}

[[noreturn]] void fail_io(const std::string& what, const std::string& path) {
  throw CheckpointError("checkpoint: " + what + " " + path + ": " + std::strerror(errno));
}

void write_all(int fd, const char* data, size_t size, const std::string& path) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      fail_io("cannot write", path);
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
}

void fsync_directory_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) {
    fail_io("cannot open directory", dir);
  }
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) {
    fail_io("cannot fsync directory", dir);
  }
}

}  // namespace

void write_checkpoint_file(const std::string& path, const std::string& payload,
                           const CheckpointWriteOptions& options) {
  std::string data;
  data.reserve(kHeaderSize + payload.size());
  data.append(kMagic, sizeof(kMagic));
  put_le<uint64_t>(data, payload.size());
  put_le<uint32_t>(data, crc_of(payload));
  put_le<uint32_t>(data, 0);
  data += payload;
  write_file_atomically(path, data, options);
}

void write_file_atomically(const std::string& path, const std::string& data,
                           const CheckpointWriteOptions& options) {
  write_file_atomically(
      path, [&](const ByteSink& sink) { sink(data.data(), data.size()); }, options);
}

void write_file_atomically(const std::string& path,
                           const std::function<void(const ByteSink&)>& produce,
                           const CheckpointWriteOptions& options) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    fail_io("cannot create", tmp);
  }
  try {
    size_t written = 0;
    bool hooked = !options.after_partial_write;
    produce([&](const char* data, size_t size) {
      if (!hooked && written + size >= options.partial_bytes) {  // the test hook's moment
        const size_t first = options.partial_bytes - written;
        write_all(fd, data, first, tmp);
        hooked = true;
        options.after_partial_write();
        data += first;
        size -= first;
        written += first;
      }
      write_all(fd, data, size, tmp);
      written += size;
    });
    if (!hooked) options.after_partial_write();  // a file shorter than partial_bytes
    if (::fsync(fd) != 0) {
      fail_io("cannot fsync", tmp);
    }
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    fail_io("cannot rename " + tmp + " to", path);
  }
  fsync_directory_of(path);
}

std::string read_checkpoint_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw CheckpointError("checkpoint " + path + ": cannot open: " + std::strerror(errno));
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  const std::string data = buffer.str();
  if (data.size() < kHeaderSize) {
    throw CheckpointError("checkpoint " + path + " is truncated: " + std::to_string(data.size()) +
                          " bytes, shorter than its header");
  }
  if (std::memcmp(data.data(), kMagic, sizeof(kMagic)) != 0) {
    throw CheckpointError("checkpoint " + path +
                          " is not a dpx checkpoint (bad magic; expected \"DPXCKPT1\")");
  }
  const auto size = get_le<uint64_t>(data.data() + 8);
  const auto crc = get_le<uint32_t>(data.data() + 16);
  const uint64_t actual = data.size() - kHeaderSize;
  if (actual != size) {
    throw CheckpointError("checkpoint " + path + " is " +
                          (actual < size ? "truncated" : "longer than written") + ": header says " +
                          std::to_string(size) + " payload bytes, file holds " +
                          std::to_string(actual));
  }
  std::string payload = data.substr(kHeaderSize);
  const uint32_t got = crc_of(payload);
  if (got != crc) {
    std::ostringstream msg;
    msg << "checkpoint " << path << " is corrupt: CRC32 of the payload is 0x" << std::hex << got
        << ", the header says 0x" << crc;
    throw CheckpointError(msg.str());
  }
  return payload;
}

}  // namespace dpx
