// Note [Shared buckets over MPI] in shared.h.
#if DPX_WITH_MPI
#include "comm/backends/mpi/shared.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include <c10/util/Exception.h>

#include "comm/plan/placement.h"
#include "dpx/errors.h"

namespace dpx::detail::mpi {
namespace {

constexpr std::size_t kPage = 4096;
// The reduce and its copies go a segment a round (Note [Shared buckets over MPI], step 2): a
// round's segments of every other rank's copy come to about this many bytes.
constexpr std::int64_t kSegmentBytes = 1 << 20;

std::string mib(std::size_t bytes) {
  return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB";
}

// Rank 0: a memory file of `total` bytes, reserved and mapped; "" or why not into `error`.
char* create(int& fd, std::size_t total, std::string& error) {
  fd = ::memfd_create("dpx-mpi-buckets", MFD_CLOEXEC);
  if (fd < 0) {
    error = std::string("memfd_create: ") + std::strerror(errno);
    return nullptr;
  }
  int e = ::ftruncate(fd, static_cast<off_t>(total)) == 0 ? 0 : errno;
  // Reserved now: else a short memory limit shows as SIGBUS inside a later all-reduce.
  if (e == 0) e = ::posix_fallocate(fd, 0, static_cast<off_t>(total));
  if (e != 0 && e != EOPNOTSUPP) {
    error = "reserving " + mib(total) + ": " + std::strerror(e);
    ::close(fd);
    fd = -1;
    return nullptr;
  }
  // MAP_POPULATE: the pages' tables now, not inside the first timed collective.
  void* p = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    error = std::string("mmap: ") + std::strerror(errno);
    ::close(fd);
    fd = -1;
    return nullptr;
  }
  return static_cast<char*>(p);
}

// The others: rank 0's file through /proc; "" or why not into `error`.
char* attach(std::int64_t pid, std::int64_t fd, std::size_t total, std::string& error) {
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  const int mine = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (mine < 0) {
    error = "open(" + path + "): " + std::strerror(errno);
    return nullptr;
  }
  struct stat st {};
  if (::fstat(mine, &st) != 0 || static_cast<std::size_t>(st.st_size) != total) {
    error = path + " has " + std::to_string(st.st_size) + " bytes, expected " +
            std::to_string(total) + " (do all ranks build the same model?)";
    ::close(mine);
    return nullptr;
  }
  void* p = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, mine, 0);
  const int e = errno;
  ::close(mine);
  if (p == MAP_FAILED) {
    error = "mmap of " + path + ": " + std::strerror(e);
    return nullptr;
  }
  return static_cast<char*>(p);
}

class SharedAllreduce {
 public:
  SharedAllreduce(std::shared_ptr<SharedBlock> block, std::size_t offset, const at::Tensor& tensor,
                  MPI_Datatype type, MPI_Op op, int rank, int size, int segments)
      : block_(std::move(block)), offset_(offset), tensor_(tensor), type_(type), op_(op),
        rank_(rank), size_(size), segments_(segments), elem_(tensor.element_size()),
        begin_(tensor.numel() * rank / size),
        length_(tensor.numel() * (rank + 1) / size - begin_) {}

  // Rounds 0 .. segments_ - 1 reduce and copy a segment of this rank's slice; the rest are the
  // barrier's.
  int round(MPI_Comm comm, int j, int tag, MPI_Request* requests) {
    if (j < segments_) return reduce(j);
    const auto [from, to] = peers(j);
    int rc = MPI_Irecv(&sink_, 0, MPI_BYTE, from, tag, comm, &requests[1]);
    if (rc != MPI_SUCCESS) return rc;
    return MPI_Isend(&sink_, 0, MPI_BYTE, to, tag, comm, &requests[0]);
  }

  // The rank round j receives from and the one it sends to: none in a segment's round, rank
  // r - 2^i and r + 2^i in the barrier's round i.
  std::pair<int, int> peers(int j) const {
    if (j < segments_) return {-1, -1};
    const int step = 1 << (j - segments_);
    return {((rank_ - step) % size_ + size_) % size_, (rank_ + step) % size_};
  }

 private:
  // Rank 0's copy of the segment takes the result, reduced in rank order whoever reduces it:
  // ((c0 op c1) op c2) ..., as MPI_Reduce_local computes inout = in op inout and MPI's ops
  // commute (a op b is b op a, bit for bit). Only this rank reads that part of any copy. Then
  // it goes to every other copy.
  int reduce(int s) {
    const std::int64_t from = begin_ + length_ * s / segments_;
    const std::int64_t to = begin_ + length_ * (s + 1) / segments_;
    if (to == from) return MPI_SUCCESS;
    const std::size_t at = offset_ + static_cast<std::size_t>(from) * elem_;
    const std::size_t bytes = static_cast<std::size_t>(to - from) * elem_;
    char* result = block_->copy(0) + at;
    for (int q = 1; q < size_; ++q) {
      const int rc = MPI_Reduce_local(block_->copy(q) + at, result, static_cast<int>(to - from),
                                      type_, op_);
      if (rc != MPI_SUCCESS) return rc;
    }
    for (int q = 1; q < size_; ++q) std::memcpy(block_->copy(q) + at, result, bytes);
    return MPI_SUCCESS;
  }

  std::shared_ptr<SharedBlock> block_;
  std::size_t offset_;
  at::Tensor tensor_;  // kept alive (it keeps the block mapped too)
  MPI_Datatype type_;
  MPI_Op op_;
  int rank_;
  int size_;
  int segments_;
  std::size_t elem_;
  std::int64_t begin_;   // this rank's slice, in elements
  std::int64_t length_;
  char sink_ = 0;        // the barrier's empty messages
};

}  // namespace

SharedBlock::~SharedBlock() { ::munmap(base_, stride_ * static_cast<std::size_t>(size_)); }

std::shared_ptr<SharedBlock> make_shared_block(std::size_t bytes, int rank, int size,
                                               std::uint64_t host, Wish wish,
                                               const GatherInts& gather, const std::string& where) {
  // 1. Where every rank is and what it wants, before anything is made: a group across hosts
  // (mpi's main use) must not reserve world x the gradients' bytes on rank 0 for nothing.
  const auto pid_ns = static_cast<std::int64_t>(std::hash<std::string>()(namespace_of("pid")));
  const std::vector<std::int64_t> all =
      gather({static_cast<std::int64_t>(host), pid_ns, static_cast<std::int64_t>(wish)});
  bool required = false;
  for (int r = 0; r < size; ++r) {
    const std::int64_t* e = &all[static_cast<std::size_t>(r) * 3];
    if (e[0] != all[0] || e[1] != all[1] || e[2] == static_cast<std::int64_t>(Wish::kOff)) {
      return nullptr;  // not one host, or not wanted somewhere: private buckets on every rank
    }
    required = required || e[2] == static_cast<std::int64_t>(Wish::kRequired);
  }
  // 2. Rank 0 makes it; its pid and descriptor (-1: it could not) reach the others, who map it.
  const std::size_t stride = (std::max<std::size_t>(bytes, 1) + kPage - 1) / kPage * kPage;
  const std::size_t total = stride * static_cast<std::size_t>(size);
  int fd = -1;
  char* base = nullptr;
  std::string error;
  const auto release = [&] {
    if (fd >= 0) ::close(fd);
    fd = -1;
    if (base) ::munmap(base, total);
    base = nullptr;
  };
  if (rank == 0) base = create(fd, total, error);
  std::vector<std::int64_t> mapped;
  try {
    const std::vector<std::int64_t> made = gather({::getpid(), fd});
    if (rank != 0 && made[1] >= 0) base = attach(made[0], made[1], total, error);
    // 3. Whether every rank mapped it; rank 0's file stays open until then.
    mapped = gather({base ? 1 : 0});
  } catch (...) {
    release();
    throw;
  }
  if (fd >= 0) ::close(fd);
  fd = -1;
  const auto failed = std::find(mapped.begin(), mapped.end(), 0);
  if (failed == mapped.end()) return std::make_shared<SharedBlock>(base, stride, size);
  release();
  const int who = static_cast<int>(failed - mapped.begin());
  const std::string what =
      who == 0 && rank != 0 ? "rank 0 could not make " + mib(total) + " of shared memory" :
                              "rank " + std::to_string(who) + " could not " +
                                  (who == 0 ? "make " + mib(total) + " of" : "map rank 0's") +
                                  " shared memory";
  const std::string why = who == rank && !error.empty() ? " (" + error + ")" : "";
  if (required) {
    throw DistributedError(where + "mpi: " + what + " for DDP's buckets (world x the model's "
                           "gradient bytes)" + why + ", and DPX_MPI_SHARED_BUCKETS=1 asks for "
                           "it. Free memory or raise the memory limit; ranks on one host must "
                           "run as one user in one pid namespace to share it; or unset "
                           "DPX_MPI_SHARED_BUCKETS to let DDP keep its buckets private.");
  }
  if (rank == who || rank == 0) {
    TORCH_WARN(where, "mpi: ", what, " for DDP's buckets", why, "; every rank keeps its buckets "
               "private (slower: the all-reduce copies through MPI). DPX_MPI_SHARED_BUCKETS=1 "
               "makes this an error, 0 skips the attempt.");
  }
  return nullptr;
}

void add_shared_allreduce(DataStep& step, std::shared_ptr<SharedBlock> block, std::size_t offset,
                          const at::Tensor& tensor, MPI_Datatype type, MPI_Op op, int rank,
                          int size, int tag_ub) {
  int barrier = 0;
  while ((1 << barrier) < size) ++barrier;
  // A round reads and writes a segment of every other rank's copy: about kSegmentBytes in all.
  const std::int64_t slice = (tensor.numel() + size - 1) / size * tensor.element_size();
  const std::int64_t wanted = (slice * (size - 1) + kSegmentBytes - 1) / kSegmentBytes;
  const std::int64_t allowed = round_stride(tag_ub) - barrier;
  const int segments = static_cast<int>(std::max<std::int64_t>(1, std::min(wanted, allowed)));
  auto run = std::make_shared<SharedAllreduce>(std::move(block), offset, tensor, type, op, rank,
                                               size, segments);
  step.rounds = segments + barrier;
  step.round = [run](MPI_Comm comm, int k, int tag, MPI_Request* requests) {
    return run->round(comm, k, tag, requests);
  };
  step.peers = [run](int k) { return run->peers(k); };
}

}  // namespace dpx::detail::mpi
#endif  // DPX_WITH_MPI
