// Note [One creation at a time] and Note [Destroying a group] in setup.h.
#if DPX_WITH_MPI
#include "comm/backends/mpi/setup.h"

#include <algorithm>

#include "comm/backends/mpi/collective.h"
#include "dpx/errors.h"

namespace dpx::detail::mpi {

// Note [Destroying a group] in setup.h.
Task::State CloseTask::poll(Context& /*context*/) {
  if (ch_->settled != ch_->taken) return State::kBusy;
  MPI_Comm_free(&ch_->data);
  MPI_Comm_free(&ch_->check);
  work_->complete(nullptr);
  return State::kDone;
}

void SetupTask::answer(std::exception_ptr error) {
  if (answered_) return;
  answered_ = true;
  work_->complete(std::move(error));
}

Task::State SetupTask::finish(Context& context) {
  if (context.creating == this) {
    context.creating = nullptr;
    context.creation_abandoned = false;
  }
  return State::kDone;
}

// Note [One creation at a time] in setup.h.
Task::State SetupTask::poll(Context& context) {
  if (request_ != MPI_REQUEST_NULL) {
    int done = 0;
    const int rc = MPI_Test(&request_, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      answer(std::make_exception_ptr(
          DistributedError(where_ + "mpi: setting up the group failed: " + error_string(rc))));
      return finish(context);
    }
    if (!done) {
      // The caller's own wait times out; MPI still owns the request, and it holds the turn of
      // every later creation (Context::creation_abandoned).
      if (std::chrono::steady_clock::now() >= deadline_) {
        answered_ = true;
        context.creation_abandoned = true;
      }
      return answered_ ? State::kLingering : State::kBusy;
    }
    if (agreeing_) {
      // Recorded even when the caller gave up: the other members may have taken this epoch,
      // so this process must not propose it again (Note [Group epochs] in tags.h).
      context.epochs = std::max(context.epochs, *epoch_);
    } else {
      // MPI's default handler aborts the job on an error; errors are dpx's exceptions instead,
      // from the group's first call on (the epoch's all-reduce included).
      MPI_Comm_set_errhandler(*outs_[next_ - 1], MPI_ERRORS_RETURN);
    }
  }
  // The caller gave up: issue nothing more.
  if (answered_) return finish(context);
  if (next_ == outs_.size()) {
    if (agreeing_) {
      answer(nullptr);
      return finish(context);
    }
    agreeing_ = true;
    proposed_ = context.epochs + 1;
    const int rc = MPI_Iallreduce(&proposed_, epoch_, 1, MPI_UINT32_T, MPI_MAX, *outs_.back(),
                                  &request_);
    if (rc != MPI_SUCCESS) {
      request_ = MPI_REQUEST_NULL;
      answer(std::make_exception_ptr(DistributedError(
          where_ + "mpi: agreeing on the group's epoch failed: " + error_string(rc))));
      return finish(context);
    }
    return State::kBusy;
  }
  if (context.creating != nullptr && context.creating != this) {
    // Another group's creation first. One whose caller gave up may never complete: say so at
    // once rather than time out blaming the peers. Past the deadline this one never starts.
    if (context.creation_abandoned) {
      answer(std::make_exception_ptr(DistributedError(
          where_ + "mpi: an earlier group's set-up in this process timed out, and MPI still has "
          "its communicator creation in flight (it cannot be cancelled); MPI makes one at a "
          "time, so no group can be made after it. End the job and start again (every rank "
          "must make each group, in the same order).")));
      return State::kDone;
    }
    if (std::chrono::steady_clock::now() < deadline_) return State::kBusy;
    answered_ = true;
    return State::kDone;
  }
  context.creating = this;
  const int rc = MPI_Comm_idup(parent_, outs_[next_++], &request_);
  if (rc != MPI_SUCCESS) {
    request_ = MPI_REQUEST_NULL;
    answer(std::make_exception_ptr(
        DistributedError(where_ + "mpi: MPI_Comm_idup failed: " + error_string(rc))));
    return finish(context);
  }
  return State::kBusy;
}

}  // namespace dpx::detail::mpi
#endif  // DPX_WITH_MPI
