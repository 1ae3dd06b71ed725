// Note [Ring all-reduce] in ring.h.
#if DPX_WITH_MPI
#include "comm/backends/mpi/ring.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "dpx/errors.h"

namespace dpx::detail::mpi {
namespace {

// Segments: a chunk moves in pieces of at most kSegmentBytes, each reduced as soon as it is in
// (Note [Ring all-reduce], segments).
constexpr std::int64_t kSegmentBytes = 1 << 20;

// How many segments each chunk of a `bytes` all-reduce over `size` ranks moves in: enough to keep
// each under kSegmentBytes, as far as the collective's tags allow (round_stride).
int segments(std::int64_t bytes, int size, int tag_ub) {
  const std::int64_t chunk = (bytes + size - 1) / size;  // the largest, within an element
  const std::int64_t wanted = (chunk + kSegmentBytes - 1) / kSegmentBytes;
  const std::int64_t allowed = round_stride(tag_ub) / (2 * (size - 1));
  return static_cast<int>(std::max<std::int64_t>(1, std::min(wanted, allowed)));
}

class Ring {
 public:
  Ring(const at::Tensor& tensor, MPI_Datatype type, MPI_Op op, int rank, int size, int segments,
       std::shared_ptr<ScratchPool> pool)
      : tensor_(tensor), type_(type), op_(op), rank_(rank), size_(size), segments_(segments),
        elem_(tensor.element_size()), count_(tensor.numel()), scratch_(std::move(pool)) {
    scratch_.take(static_cast<std::size_t>(count_ / size / segments + 2) * elem_);
  }

  // The rank every round receives from (the left neighbour) and the one it sends to.
  std::pair<int, int> peers() const { return {(rank_ + size_ - 1) % size_, (rank_ + 1) % size_}; }

  // Round j moves segment j % segments_ of the chunks of ring step j / segments_.
  int round(MPI_Comm comm, int j, int tag, MPI_Request* requests) {
    const auto [left, right] = peers();
    if (j > 0 && (j - 1) / segments_ < size_ - 1) {
      // The previous round received a segment to reduce (step 1): chunk rank - k - 1 of its k.
      const int k = (j - 1) / segments_;
      const Piece in = piece(rank_ - k - 1, (j - 1) % segments_);
      const int rc = MPI_Reduce_local(scratch_.data(), in.at, in.length, type_, op_);
      if (rc != MPI_SUCCESS) return rc;
    }
    const int k = j / segments_;
    const int s = j % segments_;
    Piece send;
    Piece receive;
    void* into = scratch_.data();
    if (k < size_ - 1) {
      send = piece(rank_ - k, s);
      receive = piece(rank_ - k - 1, s);
    } else {  // step 2
      const int t = k - (size_ - 1);
      send = piece(rank_ + 1 - t, s);
      receive = piece(rank_ - t, s);
      into = receive.at;
    }
    int rc = MPI_Irecv(into, receive.length, type_, left, tag, comm, &requests[1]);
    if (rc != MPI_SUCCESS) return rc;
    return MPI_Isend(send.at, send.length, type_, right, tag, comm, &requests[0]);
  }

 private:
  struct Piece {
    void* at = nullptr;
    int length = 0;
  };
  // Segment s of chunk c (c taken modulo the ranks).
  Piece piece(int c, int s) const {
    c = ((c % size_) + size_) % size_;
    const std::int64_t begin = count_ * c / size_;
    const std::int64_t length = count_ * (c + 1) / size_ - begin;
    const std::int64_t from = begin + length * s / segments_;
    const std::int64_t to = begin + length * (s + 1) / segments_;
    return {static_cast<char*>(tensor_.data_ptr()) + from * static_cast<std::int64_t>(elem_),
            static_cast<int>(to - from)};
  }

  at::Tensor tensor_;
  MPI_Datatype type_;
  MPI_Op op_;
  int rank_;
  int size_;
  int segments_;
  std::size_t elem_;
  std::int64_t count_;
  Scratch scratch_;  // one segment from the left neighbour (step 1): Note [Scratch reuse]
};

// Note [Pair exchange] in ring.h.
class Pair {
 public:
  Pair(const at::Tensor& tensor, MPI_Datatype type, MPI_Op op, int rank,
       std::shared_ptr<ScratchPool> pool)
      : tensor_(tensor), type_(type), op_(op), peer_(1 - rank), scratch_(std::move(pool)) {}

  int peer() const { return peer_; }

  int round(MPI_Comm comm, int tag, MPI_Request* requests) {
    const int count = static_cast<int>(tensor_.numel());
    void* into = scratch_.take(tensor_.nbytes());  // here: a step that blocks never needs it
    int rc = MPI_Irecv(into, count, type_, peer_, tag, comm, &requests[1]);
    if (rc != MPI_SUCCESS) return rc;
    return MPI_Isend(tensor_.data_ptr(), count, type_, peer_, tag, comm, &requests[0]);
  }

  // After the round: the peer's tensor into this one. Nothing where the ranks ran MPI's own
  // collective instead, so no round ran (a rank with DPX_MPI_RING=0: Note [Ring all-reduce]; a
  // blocking data step: Note [Blocking data step]); a round that failed fails the collective
  // before this.
  void sum() const {
    if (!scratch_.taken()) return;
    // MPI_Reduce_local belongs to no communicator: its errors go to MPI_COMM_WORLD's handler
    // (MPI_COMM_SELF's under MPI-4), which aborts unless the program made it return them.
    const int rc = MPI_Reduce_local(scratch_.data(), tensor_.data_ptr(),
                                    static_cast<int>(tensor_.numel()), type_, op_);
    if (rc != MPI_SUCCESS) throw DistributedError("mpi: MPI_Reduce_local failed: " +
                                                  error_string(rc));
  }

 private:
  at::Tensor tensor_;
  MPI_Datatype type_;
  MPI_Op op_;
  int peer_;
  Scratch scratch_;  // the peer's tensor, once the round started: Note [Scratch reuse]
};

}  // namespace

bool use_pair(const at::Tensor& tensor, int size, ReduceOp op) {
  return tensor.is_cpu() && pair_sizes(static_cast<std::int64_t>(tensor.nbytes()), size, op);
}

void add_pair(DataStep& step, const at::Tensor& tensor, MPI_Datatype type, MPI_Op mpi_op,
              int rank, std::shared_ptr<ScratchPool> pool) {
  auto pair = std::make_shared<Pair>(tensor, type, mpi_op, rank, std::move(pool));
  step.rounds = 1;
  step.round = [pair](MPI_Comm comm, int /*k*/, int tag, MPI_Request* requests) {
    return pair->round(comm, tag, requests);
  };
  step.peers = [pair](int /*k*/) { return std::make_pair(pair->peer(), pair->peer()); };
  step.finish = [pair] { pair->sum(); };
}

bool use_ring(const at::Tensor& tensor, int size, int tag_ub) {
  return tensor.is_cpu() && ring_sizes(static_cast<std::int64_t>(tensor.nbytes()), size, tag_ub);
}

void add_ring(DataStep& step, const at::Tensor& tensor, MPI_Datatype type, MPI_Op op, int rank,
              int size, int tag_ub, std::shared_ptr<ScratchPool> pool) {
  const int pieces = segments(static_cast<std::int64_t>(tensor.nbytes()), size, tag_ub);
  auto ring = std::make_shared<Ring>(tensor, type, op, rank, size, pieces, std::move(pool));
  step.rounds = 2 * (size - 1) * pieces;
  step.round = [ring](MPI_Comm comm, int k, int tag, MPI_Request* requests) {
    return ring->round(comm, k, tag, requests);
  };
  step.peers = [ring](int /*k*/) { return ring->peers(); };
}

}  // namespace dpx::detail::mpi
#endif  // DPX_WITH_MPI
