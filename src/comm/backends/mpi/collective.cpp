// Note [MPI collective steps] in collective.h.
#if DPX_WITH_MPI
#include "comm/backends/mpi/collective.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <iterator>
#include <string>

#include "dpx/errors.h"

namespace dpx::detail::mpi {
namespace {

constexpr std::chrono::microseconds kWaitSpin(50);
// Note [Waiting as long as it takes] in collective.h.
constexpr std::uint32_t kLongestSpin = 250;  // us

}  // namespace

std::size_t size_class(const CollectiveDescriptor& desc) {
  const auto item = static_cast<std::uint64_t>(
      c10::elementSize(static_cast<at::ScalarType>(desc.dtype)));
  const std::uint64_t bytes = static_cast<std::uint64_t>(desc.numel) * item;
  // The bit width of the bytes (0 for none), at most 63.
  const std::size_t width =
      bytes == 0 ? 0
                 : std::min<std::size_t>(63, 64 - static_cast<std::size_t>(__builtin_clzll(bytes)));
  const auto kind = static_cast<std::size_t>(desc.kind);
  TORCH_INTERNAL_ASSERT(kind < kSizeClasses / 64, "unknown collective kind ", kind);
  return kind * 64 + width;
}

std::exception_ptr Channel::failure() {
  std::lock_guard<std::mutex> lock(mutex);
  return failed;
}

MpiWork::MpiWork(std::shared_ptr<const Channel> channel, const CollectiveDescriptor& desc)
    : Work(channel->timeout), channel_(std::move(channel)), desc_(desc),
      size_class_(size_class(desc)) {}

std::string MpiWork::describe() {
  std::string s = to_string(desc_);
  if (!numbered_) s = s.substr(0, s.rfind(" as collective #"));
  return s;
}

void MpiWork::wait(std::chrono::milliseconds timeout) {
  const Waiting waiting(*channel_->runtime);  // the MPI thread spins rather than naps
  // A small collective finishes within microseconds, sooner than a sleeping thread wakes up:
  // make its MPI calls here for a while (Note [MPI thread], step 4), then sleep.
  // Note [Waiting as long as it takes] in collective.h.
  const auto now = std::chrono::steady_clock::now();
  auto spin_until = now + kWaitSpin;
  const std::uint32_t took = channel_->took_us[size_class_].load(std::memory_order_relaxed);
  if (took != 0 && took <= kLongestSpin) {
    spin_until = std::max(spin_until, issued_at_ + std::chrono::microseconds(took + took / 4));
  }
  channel_->runtime->help(done_, std::min(spin_until, now + timeout));
  std::unique_lock<std::mutex> lock(mutex_);
  if (!cv_.wait_for(lock, timeout, [&] { return done_.load(std::memory_order_relaxed); })) {
    throw TimeoutError(channel_->where + "mpi: " + describe() + ": " +
                       timeout_message("", timeout));
  }
  if (error_) std::rethrow_exception(error_);
}

std::exception_ptr MpiWork::exception() {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

std::chrono::steady_clock::time_point MpiWork::finished_at() {
  std::lock_guard<std::mutex> lock(mutex_);
  return finished_at_;
}

void MpiWork::number(std::uint32_t seq) {
  std::lock_guard<std::mutex> lock(mutex_);
  desc_.seq = seq;
  numbered_ = true;
}

void MpiWork::complete(std::exception_ptr error) {
  const bool ok = !error;  // only completed collectives size the spin
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::move(error);
    finished_at_ = std::chrono::steady_clock::now();
    done_.store(true, std::memory_order_release);
  }
  if (ok) {
    const auto us =
        std::chrono::duration_cast<std::chrono::microseconds>(finished_at_ - issued_at_);
    channel_->took_us[size_class_].store(
        static_cast<std::uint32_t>(std::min<std::int64_t>(us.count(), UINT32_MAX)),
        std::memory_order_relaxed);
  }
  cv_.notify_all();
}

Collective::Collective(std::shared_ptr<Channel> channel, const CollectiveDescriptor& desc,
                       DataStep step, std::shared_ptr<MpiWork> work)
    : ch_(std::move(channel)), mine_{desc}, step_(std::move(step)), work_(std::move(work)),
      deadline_(std::chrono::steady_clock::now() + ch_->timeout) {}

std::exception_ptr Collective::mpi_error(int rc, const char* call) {
  return std::make_exception_ptr(DistributedError(
      ch_->where + "mpi: " + work_->describe() + ": " + call + " failed: " + error_string(rc)));
}

bool Collective::pending() const {
  const auto live = [](MPI_Request r) { return r != MPI_REQUEST_NULL; };
  return std::any_of(std::begin(requests_), std::end(requests_), live) ||
         std::any_of(checks_.begin(), checks_.end(), live);
}

Task::State Collective::fail(std::exception_ptr error) {
  if (by_rounds_) {  // peers are in the ring's rounds, waiting for this rank's: as a timeout
    std::lock_guard<std::mutex> lock(ch_->mutex);
    if (!ch_->failed) ch_->failed = error;
  }
  work_->complete(std::move(error));
  if (pending()) {  // MPI may still write into the tensors: the closures keep them until then
    at_ = Step::kLinger;
    return State::kLingering;
  }
  step_ = {};  // the tensors go back to their owner
  return State::kDone;
}

// The clock costs about 25 ns a read here, a quarter of a poll of a collective in flight: a
// collective that is not done looks at it on every 32nd poll only. A busy task is polled
// continuously (Note [MPI thread], step 2), so its timeout fires at most 32 polls late.
bool Collective::due() { return (++polls_ & 31U) == 0; }

bool Collective::past_deadline() {
  return due() && std::chrono::steady_clock::now() >= deadline_;
}

Task::State Collective::take_in(Context& context) {
  if (auto failed = ch_->failure()) return fail(failed);
  // Freed (MPI_COMM_NULL) only once all it took in settled, and nothing comes after it
  // (Note [Destroying a group]).
  TORCH_INTERNAL_ASSERT(ch_->data != MPI_COMM_NULL, "a collective reached a destroyed group");
  mine_.call.seq = ch_->taken++;
  numbered_ = true;
  work_->number(mine_.call.seq);
  // Note [Blocking data step], step 1.
  mine_.may_block = context.alone && ch_->may_block;
  mine_.host = ch_->runtime->host();
  mine_.ring = step_.round ? 1 : 0;
  if (mine_.may_block) {
    undecided_ = true;
    ++context.undecided;
  }
  if (ch_->size == 1) {
    all_.assign(1, mine_);
    at_ = Step::kTurn;
    return advance(context);
  }
  all_.resize(ch_->size);
  const int rc = start_check();
  if (rc != MPI_SUCCESS) return fail(mpi_error(rc, "the descriptors' exchange"));
  at_ = Step::kCheck;
  return State::kBusy;
}

// Step 1's exchange (Note [Descriptors by point-to-point]): every rank's Published in all_.
int Collective::start_check() {
  constexpr int kBytes = sizeof(Published);
  if (ch_->size > kPointToPointCheck) {
    checks_.assign(1, MPI_REQUEST_NULL);
    return MPI_Iallgather(&mine_, kBytes, MPI_BYTE, all_.data(), kBytes, MPI_BYTE, ch_->check,
                          checks_.data());
  }
  all_[ch_->rank] = mine_;
  // The collective's number in the tag: matching does not rest on the order in which the MPI
  // thread and a helping waiter posted them (and the epoch: Note [Group epochs] in tags.h).
  const int tag = check_tag(ch_->epoch, mine_.call.seq, ch_->runtime->tag_ub());
  checks_.assign(2 * (ch_->size - 1), MPI_REQUEST_NULL);
  MPI_Request* next = checks_.data();
  for (int r = 0; r < ch_->size; ++r) {
    if (r == ch_->rank) continue;
    int rc = MPI_Irecv(&all_[r], kBytes, MPI_BYTE, r, tag, ch_->check, next++);
    if (rc == MPI_SUCCESS) rc = MPI_Isend(&mine_, kBytes, MPI_BYTE, r, tag, ch_->check, next++);
    if (rc != MPI_SUCCESS) return rc;
  }
  return MPI_SUCCESS;
}

// Step 2's comparison: the first peer that disagrees, as every rank finds it.
std::exception_ptr Collective::compare() {
  for (int r = 0; r < ch_->size; ++r) {
    if (r == ch_->rank) continue;
    try {
      check_same(mine_.call, all_[r].call, r, ch_->where, "mpi");
    } catch (...) {
      return std::current_exception();
    }
  }
  return nullptr;
}

Task::State Collective::poll(Context& context) {
  const State s = advance(context);
  if (s != State::kBusy && numbered_) {  // its answer is given (Note [Destroying a group])
    numbered_ = false;
    ++ch_->settled;
  }
  // Note [Blocking data step], step 3: chosen (or failed), so other blocking calls may go on.
  if (undecided_ && (s != State::kBusy || at_ == Step::kData)) {
    undecided_ = false;
    --context.undecided;
  }
  return s;
}

Task::State Collective::advance(Context& context) {
  int done = 0;
  int rc = MPI_SUCCESS;
  switch (at_) {
    case Step::kNew:
      return take_in(context);
    case Step::kCheck:
      rc = MPI_Testall(static_cast<int>(checks_.size()), checks_.data(), &done,
                       MPI_STATUSES_IGNORE);
      if (rc != MPI_SUCCESS) return fail(mpi_error(rc, "the descriptors' exchange"));
      if (!done) {
        if (!due()) return State::kBusy;
        // A collective before it timed out, perhaps a hair after this one was taken in (the
        // caller's wait can end before the group's deadline): its peers may never come.
        if (auto failed = ch_->failure()) return fail(failed);
        if (std::chrono::steady_clock::now() < deadline_) return State::kBusy;
        return time_out("every rank to issue it" + unheard_peers() +
                        " (a rank that never calls it, or is stuck before it, holds it up)");
      }
      ++context.moves;
      at_ = Step::kTurn;
      [[fallthrough]];
    case Step::kTurn: {
      if (ch_->turn != mine_.call.seq) {
        if (auto failed = ch_->failure()) return fail(failed);  // an earlier one timed out
        if (!past_deadline()) return State::kBusy;
        return time_out("the collectives before it to start");
      }
      // Note [Blocking data step], step 2: every rank sees the same bits.
      const bool block = std::all_of(all_.begin(), all_.end(), [&](const Published& p) {
        return p.may_block != 0 && p.host == mine_.host;
      });
      // Only where every rank can (DPX_MPI_RING may differ; Note [Ring all-reduce]).
      const bool ring = std::all_of(all_.begin(), all_.end(),
                                    [](const Published& p) { return p.ring != 0; });
      ++ch_->turn;
      if (auto mismatch = compare()) return fail(mismatch);
      if (block) {
        rc = step_.start(ch_->data, nullptr);
        if (rc != MPI_SUCCESS) return fail(mpi_error(rc, "the collective"));
        return finish_data_step();
      }
      if (ring) {
        by_rounds_ = true;
        return start_round();
      }
      rc = step_.start(ch_->data, &requests_[0]);
      if (rc != MPI_SUCCESS) return fail(mpi_error(rc, "starting the collective"));
      at_ = Step::kData;
      [[fallthrough]];
    }
    case Step::kData:
      rc = MPI_Testall(2, requests_, &done, MPI_STATUSES_IGNORE);
      if (rc != MPI_SUCCESS) return fail(mpi_error(rc, "MPI_Testall"));
      if (!done) {
        if (!past_deadline()) return State::kBusy;
        return time_out("the data exchange to complete" + unfinished_round() +
                        " (a peer stopped in the middle of it)");
      }
      ++context.moves;
      if (by_rounds_ && ++round_ < step_.rounds) {
        return start_round();
      }
      return finish_data_step();
    case Step::kLinger:
      // Until MPI lets go of every buffer: an error of one request says nothing of the others.
      if (!checks_.empty()) {
        int checked = 0;
        rc = MPI_Testall(static_cast<int>(checks_.size()), checks_.data(), &checked,
                         MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS || !checked) return State::kLingering;
        checks_.clear();
      }
      if (MPI_Testall(2, requests_, &done, MPI_STATUSES_IGNORE) == MPI_SUCCESS && done) {
        step_ = {};
        return State::kDone;
      }
      return State::kLingering;
  }
  TORCH_INTERNAL_ASSERT(false, "unknown step");
}

// Note [Ring all-reduce] in ring.h: round round_ of the data step, with a tag no other round of
// the collectives that can be in flight with it has. Each collective owns a stride of tags of
// its own whatever its number of rounds (collectives of different sizes have different numbers
// of segments), and kRoundCollectives, a power of two, keeps the tags unbroken when the uint32
// numbers wrap.
Task::State Collective::start_round() {
  const int stride = round_stride(ch_->runtime->tag_ub());
  TORCH_INTERNAL_ASSERT(step_.rounds <= stride, "a data step of ", step_.rounds,
                        " rounds exceeds its ", stride, " tags");
  const int tag = round_tag(ch_->epoch, mine_.call.seq, round_, ch_->runtime->tag_ub());
  int rc = MPI_SUCCESS;
  try {  // a round may allocate (a pair's scratch); it throws before it posts anything
    rc = step_.round(ch_->data, round_, tag, requests_);
  } catch (...) {
    // Its peers wait for this round's messages: fail() fails the group too (by_rounds_).
    return fail(round_error(std::current_exception()));
  }
  if (rc != MPI_SUCCESS) return fail(mpi_error(rc, "a round of the data step"));
  at_ = Step::kData;
  return State::kBusy;
}

// A round that threw (out of memory for its scratch), as the error its caller and the group
// get; the exception itself where that message cannot be made (out of memory again).
std::exception_ptr Collective::round_error(std::exception_ptr thrown) {
  try {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(thrown);
    } catch (const c10::Error& e) {
      what = e.what_without_backtrace();
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    return std::make_exception_ptr(DistributedError(
        ch_->where + "mpi: " + work_->describe() + ": a round of the data step failed: " + what +
        ". The group is now unusable (its peers wait for this round): make a new one, or end "
        "the job."));
  } catch (...) {
    return thrown;
  }
}

Task::State Collective::finish_data_step() {
  try {
    if (step_.finish) step_.finish();
  } catch (...) {
    return fail(std::current_exception());
  }
  step_ = {};
  work_->complete(nullptr);
  return State::kDone;
}

}  // namespace dpx::detail::mpi
#endif  // DPX_WITH_MPI
