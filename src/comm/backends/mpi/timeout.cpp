// What a collective that the group's timeout ends says: what it waited for and, where it can
// tell, from whom (Note [MPI collective steps] in collective.h).
#if DPX_WITH_MPI
#include "comm/backends/mpi/collective.h"

#include <string>

#include "dpx/errors.h"

namespace dpx::detail::mpi {

// Note [MPI collective steps], the group's timeout.
Task::State Collective::time_out(const std::string& waiting_for) {
  auto error = std::make_exception_ptr(TimeoutError(
      ch_->where + "mpi: " + work_->describe() + " did not finish within the group's timeout (" +
      std::to_string(ch_->timeout.count()) + " ms); it was waiting for " + waiting_for +
      ". The group is now unusable (MPI cannot cancel a collective): make a new one, or end "
      "the job (mpirun then ends every rank)."));
  {
    std::lock_guard<std::mutex> lock(ch_->mutex);
    if (!ch_->failed) ch_->failed = error;
  }
  work_->complete(error);
  at_ = Step::kLinger;
  return pending() ? State::kLingering : State::kDone;
}

// Which peers' descriptors have not come, as "; nothing yet from rank 2, 3" (ranks of the
// group); empty where the exchange is one MPI_Iallgather (it cannot tell). checks_ holds, per
// peer in rank order, the receive from it and then the send to it (start_check). MPI_Testall
// left them as they were; MPI_Request_get_status neither frees nor completes them, and where it
// fails the flag stays 1 (nothing is named rather than a wrong rank).
std::string Collective::unheard_peers() const {
  if (ch_->size > kPointToPointCheck) return "";
  std::string ranks;
  std::size_t at = 0;
  for (int r = 0; r < ch_->size; ++r) {
    if (r == ch_->rank) continue;
    int arrived = 1;
    if (checks_[at] != MPI_REQUEST_NULL) {
      MPI_Request_get_status(checks_[at], &arrived, MPI_STATUS_IGNORE);
    }
    at += 2;
    if (!arrived) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  }
  return ranks.empty() ? "" : "; nothing yet from rank " + ranks;
}

// Where a data step of rounds stands, as "; round 3 of 12: nothing yet from rank 1"; empty for
// MPI's own collectives (they cannot tell). requests_[1] is the round's receive and
// requests_[0] its send (DataStep::round), their peers DataStep::peers; as above, a request
// whose status cannot be read names no one.
std::string Collective::unfinished_round() const {
  if (!by_rounds_) return "";
  std::string s = "; round " + std::to_string(round_ + 1) + " of " + std::to_string(step_.rounds);
  if (!step_.peers) return s;
  const auto [from, to] = step_.peers(round_);
  int received = 1;
  int sent = 1;
  if (requests_[1] != MPI_REQUEST_NULL) {
    MPI_Request_get_status(requests_[1], &received, MPI_STATUS_IGNORE);
  }
  if (requests_[0] != MPI_REQUEST_NULL) {
    MPI_Request_get_status(requests_[0], &sent, MPI_STATUS_IGNORE);
  }
  if (!received && from >= 0) s += ": nothing yet from rank " + std::to_string(from);
  if (!sent && to >= 0) {
    s += std::string(!received && from >= 0 ? ", and " : ": ") + "rank " + std::to_string(to) +
         " has not taken this rank's part";
  }
  return s;
}

}  // namespace dpx::detail::mpi
#endif  // DPX_WITH_MPI
