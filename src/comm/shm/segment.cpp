#include "comm/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <c10/util/Exception.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <random>
#include <vector>

#include "dpx/comm/errors.h"

namespace dpx::detail::shm {
namespace {

constexpr std::uint64_t kMagic = 0x316d68732d787064;  // "dpx-shm1"
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kPage = 4096;

std::size_t round_up(std::size_t x, std::size_t to) { return (x + to - 1) / to * to; }

std::size_t data_offset(int world) {
  return round_up(sizeof(Header) + world * sizeof(RankControl), kPage);
}

std::string random_token() {
  std::random_device rd;
  std::uint64_t x = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(x));
  return buf;
}

[[noreturn]] void fail_errno(const std::string& where, const std::string& what,
                             const std::string& name) {
  int e = errno;
  throw DistributedError(where + "shm backend: " + what + " " + name + " failed: " +
                         std::strerror(e) + ". Check that /dev/shm is mounted and has room, or "
                         "use DPX_BACKEND=gloo.");
}

char* map(int fd, std::size_t bytes, const std::string& where, const std::string& name) {
  // MAP_POPULATE: fault the pages in now, not inside the first timed collective.
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) fail_errno(where, "mmap of", name);
  return static_cast<char*>(p);
}

// Rank 0: create, size and map a fresh segment and fill in its header.
char* create(const std::string& name, std::size_t bytes, int world, std::size_t slot_bytes,
             const std::string& where) {
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) fail_errno(where, "shm_open(O_CREAT) of", name);
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    fail_errno(where, "ftruncate of", name);
  }
  char* base = nullptr;
  try {
    base = map(fd, bytes, where, name);
  } catch (...) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    throw;
  }
  ::close(fd);
  auto* h = new (base) Header();
  h->world = static_cast<std::uint32_t>(world);
  h->version = kVersion;
  h->slot_bytes = slot_bytes;
  h->total_bytes = bytes;
  for (int r = 0; r < world; ++r) {
    new (base + sizeof(Header) + r * sizeof(RankControl)) RankControl();
  }
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kMagic;  // last: a mapper that sees it sees a complete header
  return base;
}

char* attach(const std::string& name, std::size_t bytes, int world, std::size_t slot_bytes,
             const std::string& where) {
  int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) fail_errno(where, "shm_open of", name);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) != bytes) {
    ::close(fd);
    throw DistributedError(where + "shm backend: segment " + name + " has " +
                           std::to_string(st.st_size) + " bytes, expected " +
                           std::to_string(bytes) + "; do all ranks run the same dpx build with "
                           "the same DPX_SHM_* settings?");
  }
  char* base = map(fd, bytes, where, name);
  ::close(fd);
  const auto* h = reinterpret_cast<const Header*>(base);
  if (h->magic != kMagic || h->version != kVersion || h->world != static_cast<std::uint32_t>(world) ||
      h->slot_bytes != slot_bytes) {
    ::munmap(base, bytes);
    throw DistributedError(where + "shm backend: segment " + name + " has another layout than "
                           "this rank expects (world size, slot size or dpx version differ)");
  }
  return base;
}

}  // namespace

Segment::Segment(std::string name, char* base, std::size_t bytes, int world,
                 std::size_t slot_bytes)
    : name_(std::move(name)), base_(base), bytes_(bytes), world_(world), slot_bytes_(slot_bytes),
      data_offset_(data_offset(world)) {}

Segment::~Segment() { ::munmap(base_, bytes_); }

std::unique_ptr<Segment> Segment::open(Store& store, int rank, int world,
                                       const SegmentOptions& options, const std::string& where) {
  const std::size_t slot = round_up(options.slot_bytes, kPage);
  const std::size_t bytes = data_offset(world) + 2 * slot * world;
  const auto gen = std::to_string(store.add("shm/gen/" + std::to_string(rank), 1));
  const std::string prefix = "shm/" + gen + "/";
  std::vector<std::string> mapped;
  for (int r = 1; r < world; ++r) mapped.push_back(prefix + "mapped/" + std::to_string(r));

  if (rank == 0) {
    const std::string name = "/dpx-" + std::to_string(::getpid()) + "-" + random_token();
    char* base = create(name, bytes, world, slot, where);
    std::unique_ptr<Segment> seg(new Segment(name, base, bytes, world, slot));
    seg->control(0).pid.store(::getpid());
    try {
      store.set(prefix + "name", name);
      if (!mapped.empty()) store.wait(mapped, options.timeout);
    } catch (...) {
      ::shm_unlink(name.c_str());
      throw;
    }
    ::shm_unlink(name.c_str());
    store.set(prefix + "ready", "1");
    return seg;
  }
  store.wait({prefix + "name"}, options.timeout);
  const std::string name = store.get(prefix + "name");
  char* base = attach(name, bytes, world, slot, where);
  std::unique_ptr<Segment> seg(new Segment(name, base, bytes, world, slot));
  seg->control(rank).pid.store(::getpid());
  store.set(prefix + "mapped/" + std::to_string(rank), "1");
  store.wait({prefix + "ready"}, options.timeout);
  return seg;
}

}  // namespace dpx::detail::shm
