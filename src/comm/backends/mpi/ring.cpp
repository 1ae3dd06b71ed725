// Note [Ring all-reduce] in ring.h.
#if DPX_WITH_MPI
#include "comm/backends/mpi/ring.h"

#include <memory>

namespace dpx::detail::mpi {
namespace {

// Tags left for each round of one collective: a group keeps this many collectives apart.
constexpr int kCollectivesInFlight = 1024;

class Ring {
 public:
  Ring(const at::Tensor& tensor, MPI_Datatype type, MPI_Op op, int rank, int size)
      : tensor_(tensor), type_(type), op_(op), rank_(rank), size_(size),
        elem_(tensor.element_size()), count_(tensor.numel()),
        scratch_(at::empty({count_ / size + 1}, tensor.options())) {}

  int round(MPI_Comm comm, int k, int tag, MPI_Request* requests) {
    const int right = (rank_ + 1) % size_;
    const int left = (rank_ + size_ - 1) % size_;
    if (k > 0 && k <= size_ - 1) {  // the previous round received a chunk to reduce (step 1)
      const int c = chunk(rank_ - k);
      const int rc = MPI_Reduce_local(scratch_.data_ptr(), at(c), length(c), type_, op_);
      if (rc != MPI_SUCCESS) return rc;
    }
    int send = 0;
    int receive = 0;
    void* into = scratch_.data_ptr();
    if (k < size_ - 1) {
      send = chunk(rank_ - k);
      receive = chunk(rank_ - k - 1);
    } else {  // step 2
      const int s = k - (size_ - 1);
      send = chunk(rank_ + 1 - s);
      receive = chunk(rank_ - s);
      into = at(receive);
    }
    int rc = MPI_Irecv(into, length(receive), type_, left, tag, comm, &requests[1]);
    if (rc != MPI_SUCCESS) return rc;
    return MPI_Isend(at(send), length(send), type_, right, tag, comm, &requests[0]);
  }

 private:
  int chunk(int c) const { return ((c % size_) + size_) % size_; }
  std::int64_t begin(int c) const { return count_ * c / size_; }
  int length(int c) const { return static_cast<int>(begin(c + 1) - begin(c)); }
  void* at(int c) const {
    return static_cast<char*>(tensor_.data_ptr()) + begin(c) * static_cast<std::int64_t>(elem_);
  }

  at::Tensor tensor_;
  MPI_Datatype type_;
  MPI_Op op_;
  int rank_;
  int size_;
  std::size_t elem_;
  std::int64_t count_;
  at::Tensor scratch_;  // one chunk from the left neighbour (step 1)
};

}  // namespace

bool use_ring(const at::Tensor& tensor, int size, int tag_ub) {
  const std::int64_t least = size == 2 ? kRingBytesTwoRanks : kRingChunkBytes * size;
  return size > 1 && tensor.is_cpu() && static_cast<std::int64_t>(tensor.nbytes()) >= least &&
         tag_ub / (2 * (size - 1)) >= kCollectivesInFlight;
}

void add_ring(DataStep& step, const at::Tensor& tensor, MPI_Datatype type, MPI_Op op, int rank,
              int size) {
  auto ring = std::make_shared<Ring>(tensor, type, op, rank, size);
  step.rounds = 2 * (size - 1);
  step.round = [ring](MPI_Comm comm, int k, int tag, MPI_Request* requests) {
    return ring->round(comm, k, tag, requests);
  };
}

}  // namespace dpx::detail::mpi
#endif  // DPX_WITH_MPI
