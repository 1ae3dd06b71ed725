#include "comm/backends/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <c10/util/Exception.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <stdexcept>
#include <vector>

#include "comm/plan/placement.h"
#include "store/round.h"
#include "dpx/errors.h"

namespace dpx::detail::shm {
namespace {

constexpr std::uint64_t kMagic = 0x316d68732d787064;  // "dpx-shm1"
constexpr std::uint32_t kVersion = 4;  // 2: RankControl::inline_data; 3: LineDescriptor; 4: digests
constexpr std::size_t kPage = 4096;

std::size_t round_up(std::size_t x, std::size_t to) { return (x + to - 1) / to * to; }

std::size_t data_offset(int world) {
  return round_up(sizeof(Header) + world * sizeof(RankControl), kPage);
}

std::string mib(std::size_t bytes) {
  return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB";
}

[[noreturn]] void fail_errno(const std::string& where, const std::string& what, int e) {
  throw DistributedError(where + "shm backend: " + what + " failed: " + std::strerror(e) +
                         ". Use DPX_BACKEND=gloo if shared memory cannot be used here.");
}

char* map(int fd, std::size_t bytes, const std::string& where) {
  // MAP_POPULATE: fault the pages in now, not inside the first timed collective.
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) fail_errno(where, "mmap of the segment", errno);
  return static_cast<char*>(p);
}

// Sizes the memory file and reserves every page of it now: without the reservation a short
// memory limit shows up as SIGBUS inside the first collective that touches a missing page.
void reserve(int fd, std::size_t bytes, const std::string& purpose, const std::string& where) {
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    fail_errno(where, "sizing the segment to " + std::to_string(bytes) + " bytes", errno);
  }
  int e = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (e != 0 && e != EOPNOTSUPP) {
    throw DistributedError(where + "shm backend: could not reserve " + mib(bytes) +
                           " of shared memory for the group (" + std::strerror(e) + "). " +
                           purpose);
  }
}

// Rank 0: create, size, reserve and map a fresh memory file and fill in its header. Returns
// the mapping; `fd` stays open until every peer has mapped it (Note [No name] in segment.h).
char* create(int& fd, std::size_t bytes, int world, std::size_t slot_bytes,
             const std::string& purpose, const std::string& where) {
  fd = ::memfd_create("dpx-shm", MFD_CLOEXEC);
  if (fd < 0) fail_errno(where, "memfd_create", errno);
  char* base = nullptr;
  try {
    reserve(fd, bytes, purpose, where);
    base = map(fd, bytes, where);
  } catch (...) {
    ::close(fd);
    fd = -1;
    throw;
  }
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

// Why a rank cannot use rank 0's segment, without the rank's prefix: every rank of the group
// raises it (Note [Attach failures] in segment.h).
class AttachError : public std::runtime_error {
 public:
  explicit AttachError(int rank, const std::string& why)
      : std::runtime_error("rank " + std::to_string(rank) + " cannot open rank 0's segment: " +
                           why + ". Ranks must run as one user in one pid namespace to share "
                           "memory; else use DPX_BACKEND=gloo.") {}
};

// The pid in "/proc/<pid>/fd/<n>".
std::string pid_of(const std::string& path) {
  const auto begin = std::strlen("/proc/");
  return path.substr(begin, path.find('/', begin) - begin);
}

int open_peer_file(const std::string& path, const std::string& owner_pid_ns, int rank,
                   const std::string& where) {
  const std::string mine = namespace_of("pid");
  if (!owner_pid_ns.empty() && !mine.empty() && owner_pid_ns != mine) {
    throw AttachError(rank, "rank 0 runs in another pid namespace (" + owner_pid_ns +
                            "; this rank's is " + mine + "), where " + path +
                            " does not lead to it");
  }
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd >= 0) return fd;
  const int e = errno;
  struct stat st {};
  if (e == ENOENT && ::stat(("/proc/" + pid_of(path)).c_str(), &st) != 0) {
    throw PeerLostError(where + "shm backend: rank 0 exited during set-up (" + path +
                        " is gone); see its log");
  }
  throw AttachError(rank, "open(" + path + "): " + std::strerror(e));
}

char* attach(const std::string& path, const std::string& owner_pid_ns, std::size_t bytes,
             int world, std::size_t slot_bytes, int rank, const std::string& where) {
  int fd = open_peer_file(path, owner_pid_ns, rank, where);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) != bytes) {
    ::close(fd);
    throw AttachError(rank, path + " has " + std::to_string(st.st_size) + " bytes, expected " +
                            std::to_string(bytes) + " (do all ranks run the same dpx build?)");
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  const int e = errno;
  ::close(fd);
  if (p == MAP_FAILED) throw AttachError(rank, "mmap of " + path + ": " + std::strerror(e));
  char* base = static_cast<char*>(p);
  const auto* h = reinterpret_cast<const Header*>(base);
  if (h->magic != kMagic || h->version != kVersion || h->world != static_cast<std::uint32_t>(world) ||
      h->slot_bytes != slot_bytes) {
    ::munmap(base, bytes);
    throw AttachError(rank, path + " has another layout than this rank expects (world size, "
                            "slot size or dpx version differ)");
  }
  return base;
}

constexpr const char* kErrorMark = "error:";

}  // namespace

Segment::Segment(std::string name, char* base, std::size_t bytes, int world,
                 std::size_t slot_bytes, int slots)
    : name_(std::move(name)), base_(base), bytes_(bytes), world_(world), slot_bytes_(slot_bytes),
      slots_(static_cast<std::size_t>(slots)), data_offset_(data_offset(world)) {}

Segment::~Segment() { ::munmap(base_, bytes_); }

std::unique_ptr<Segment> Segment::open(Store& store, int rank, int world,
                                       const SegmentOptions& options, const std::string& where) {
  const std::size_t slot = round_up(options.slot_bytes, kPage);
  const std::size_t bytes = data_offset(world) + options.slots_per_rank * slot * world;
  const std::string prefix = next_round(store, options.round, rank);
  if (rank == 0) {
    return open_as_creator(store, prefix, bytes, world, slot, options, where);
  }
  store.wait({prefix + "name"}, options.timeout);
  const std::string path = store.get(prefix + "name");
  if (path.rfind(kErrorMark, 0) == 0) {
    done_reading(store, prefix, rank);
    throw DistributedError(where + "shm backend: rank 0 could not set the group up: " +
                           path.substr(std::strlen(kErrorMark)));
  }
  const std::string mapped = prefix + "mapped/" + std::to_string(rank);
  char* base = nullptr;
  try {
    base = attach(path, store.get(prefix + "pid_ns"), bytes, world, slot, rank, where);
  } catch (const AttachError& e) {
    try {
      store.set(mapped, kErrorMark + std::string(e.what()));
    } catch (const std::exception&) {
      // The store is gone with rank 0: nobody is left to tell.
    }
    done_reading(store, prefix, rank);
    throw DistributedError(where + "shm backend: " + e.what());
  }
  std::unique_ptr<Segment> seg(
      new Segment(path, base, bytes, world, slot, options.slots_per_rank));
  seg->control(rank).pid.store(::getpid());
  store.set(mapped, "1");
  store.wait({prefix + "ready"}, options.timeout);
  const std::string ready = store.get(prefix + "ready");
  if (ready.rfind(kErrorMark, 0) == 0) {
    done_reading(store, prefix, rank);
    throw DistributedError(where + "shm backend: " + ready.substr(std::strlen(kErrorMark)));
  }
  return seg;
}

std::unique_ptr<Segment> Segment::open_as_creator(Store& store, const std::string& prefix,
                                                  std::size_t bytes, int world, std::size_t slot,
                                                  const SegmentOptions& options,
                                                  const std::string& where) {
  int fd = -1;
  char* base = nullptr;
  try {
    base = create(fd, bytes, world, slot, options.purpose, where);
  } catch (const std::exception& e) {
    store.set(prefix + "name", kErrorMark + std::string(e.what()));
    wait_until_read(store, prefix, ranks_but_0(world), std::min(options.timeout, kReadLimit));
    throw;
  }
  const std::string path = "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(fd);
  std::unique_ptr<Segment> seg(
      new Segment(path, base, bytes, world, slot, options.slots_per_rank));
  seg->control(0).pid.store(::getpid());
  std::vector<std::string> mapped;
  for (int r = 1; r < world; ++r) mapped.push_back(prefix + "mapped/" + std::to_string(r));
  std::string failure;
  try {
    store.set(prefix + "pid_ns", namespace_of("pid"));
    store.set(prefix + "name", path);
    if (!mapped.empty()) store.wait(mapped, options.timeout);
    for (const auto& key : mapped) {
      const std::string v = store.get(key);
      if (failure.empty() && v.rfind(kErrorMark, 0) == 0) failure = v.substr(std::strlen(kErrorMark));
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  if (!failure.empty()) {
    // Note [Attach failures] in segment.h: every rank fails with the reason.
    store.set(prefix + "ready", kErrorMark + failure);
    wait_until_read(store, prefix, ranks_but_0(world), std::min(options.timeout, kReadLimit));
    throw DistributedError(where + "shm backend: " + failure);
  }
  store.set(prefix + "ready", "1");
  return seg;
}

}  // namespace dpx::detail::shm
