// Note [MPI sub-groups] in subgroup.h.
#if DPX_WITH_MPI
#include "comm/backends/mpi/subgroup.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "dpx/comm/work.h"
#include "dpx/errors.h"

namespace dpx::detail::mpi {
namespace {

using Clock = std::chrono::steady_clock;

// 32767 is the least MPI_TAG_UB an MPI may have: every MPI has these tags.
constexpr int kJoinTag = 32765;     // member to leader: join, withdraw
constexpr int kVerdictTag = 32766;  // leader to member
constexpr int kCreateTag = 32767;   // MPI_Comm_create_group's own messages

enum Kind : std::uint64_t { kJoin, kWithdraw, kGo, kMismatch, kGaveUp };

// Every message of step 1-3: its kind, and the creation it belongs to. A verdict carries the
// creation of the join it answers.
struct Message {
  std::uint64_t kind = kJoin;
  std::uint64_t list = 0;   // a hash of the member list
  std::uint64_t count = 0;  // groups of this list the sender made before
  bool same_creation(const Message& o) const { return list == o.list && count == o.count; }
};
constexpr int kWords = sizeof(Message) / sizeof(std::uint64_t);

std::uint64_t hash_list(const std::vector<int>& members) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the ranks' bytes
  for (int r : members) {
    for (int shift = 0; shift < 32; shift += 8) {
      h ^= (static_cast<std::uint32_t>(r) >> shift) & 0xffu;
      h *= 1099511628211ull;
    }
  }
  return h;
}

std::string list_string(const std::vector<int>& ranks) {
  std::string s = "[";
  for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

struct Outcome {
  MPI_Comm comm = MPI_COMM_NULL;
};

// Steps 1-4 on the MPI thread. Never throws (the MPI thread runs on); MPI_COMM_WORLD's
// default error handler ends the job on an MPI error.
class Handshake : public Task {
 public:
  Handshake(std::vector<int> members, bool leading, Message mine,
            std::chrono::milliseconds timeout, std::string what,
            std::shared_ptr<CompletionWork> work, std::shared_ptr<Outcome> out)
      : members_(std::move(members)), leading_(leading),
        mine_(mine), timeout_(timeout), deadline_(Clock::now() + timeout),
        what_(std::move(what)), work_(std::move(work)), out_(std::move(out)),
        in_(members_.size()), joined_(members_.size(), false),
        recv_(members_.size(), MPI_REQUEST_NULL), joins_(members_.size()) {
    outbox_.reserve(std::max<std::size_t>(members_.size(), 2));  // Isend buffers stay put
  }

  State poll(Context& context) override {
    if (answered_) return linger();
    if (!started_) {
      if (context.undecided > 0) return State::kBusy;  // Note [MPI sub-groups], step 1
      started_ = true;
      return start();
    }
    return leading_ ? lead() : follow();
  }

 private:
  void send(const Message& m, int to, int tag) {
    outbox_.push_back(m);
    MPI_Request r = MPI_REQUEST_NULL;
    MPI_Isend(&outbox_.back(), kWords, MPI_UINT64_T, to, tag, MPI_COMM_WORLD, &r);
    pending_.push_back(r);
  }
  void receive_from(std::size_t i) {
    MPI_Irecv(&in_[i], kWords, MPI_UINT64_T, members_[i], kJoinTag, MPI_COMM_WORLD, &recv_[i]);
  }
  void receive_verdict() {
    MPI_Irecv(&verdict_, kWords, MPI_UINT64_T, members_[0], kVerdictTag, MPI_COMM_WORLD,
              &verdict_request_);
  }

  // Step 1.
  State start() {
    if (members_.size() == 1) return create();
    if (leading_) {
      for (std::size_t i = 1; i < members_.size(); ++i) receive_from(i);
    } else {
      receive_verdict();
      send(mine_, members_[0], kJoinTag);
    }
    return State::kBusy;
  }

  // Step 2.
  State lead() {
    bool all_in = true;
    for (std::size_t i = 1; i < members_.size(); ++i) {
      int done = 0;
      MPI_Test(&recv_[i], &done, MPI_STATUS_IGNORE);
      if (done) {
        const Message m = in_[i];
        if (m.kind == kJoin && !joined_[i]) {
          joined_[i] = true;
          joins_[i] = m;
          if (!m.same_creation(mine_) && mismatched_ < 0) mismatched_ = members_[i];
        } else if (m.kind == kWithdraw && m.same_creation(mine_)) {
          return decide(kGaveUp, std::make_exception_ptr(TimeoutError(
              what_ + "rank " + std::to_string(members_[i]) + " gave up waiting (its timeout "
              "passed); " + missing_text())));
        }  // else a withdraw of an earlier creation: dropped
        receive_from(i);  // its withdraw, if one comes
      }
      all_in = all_in && joined_[i];
    }
    if (all_in) {
      if (mismatched_ < 0) return decide(kGo, nullptr);
      return decide(kMismatch, std::make_exception_ptr(MismatchError(
          what_ + "rank " + std::to_string(mismatched_) + " asked for a group of other members "
          "(or in another order), or made a different number of groups of these members before; "
          "every member must pass the same list, in the same order")));
    }
    if (Clock::now() < deadline_) return State::kBusy;
    return decide(kGaveUp, std::make_exception_ptr(TimeoutError(what_ + missing_text())));
  }

  std::string missing_text() const {
    std::vector<int> missing;
    for (std::size_t i = 1; i < members_.size(); ++i) {
      if (!joined_[i]) missing.push_back(members_[i]);
    }
    return "ranks " + list_string(missing) + " did not make the group within " +
           std::to_string(timeout_.count()) + " ms (a member that never calls "
           "new_process_group for it, or is stuck before it, holds it up)";
  }

  State decide(Kind verdict, std::exception_ptr error) {
    for (std::size_t i = 1; i < members_.size(); ++i) {
      if (joined_[i]) send({verdict, joins_[i].list, joins_[i].count}, members_[i], kVerdictTag);
      MPI_Cancel(&recv_[i]);  // completes, cancelled or with a late message: both ignored
      pending_.push_back(recv_[i]);
      recv_[i] = MPI_REQUEST_NULL;
    }
    if (verdict == kGo) return create();
    return finish(std::move(error));
  }

  // Step 3.
  State follow() {
    int done = 0;
    MPI_Test(&verdict_request_, &done, MPI_STATUS_IGNORE);
    if (done) {
      if (verdict_.same_creation(mine_)) return on_verdict();
      receive_verdict();  // a verdict for an earlier creation that this rank gave up on
    }
    const auto now = Clock::now();
    if (!withdrew_ && now >= deadline_) {
      send({kWithdraw, mine_.list, mine_.count}, members_[0], kJoinTag);
      withdrew_ = true;
      grace_ = now + kAnswerGrace;
    }
    if (!withdrew_ || now < grace_) return State::kBusy;
    MPI_Cancel(&verdict_request_);
    MPI_Status status;
    MPI_Wait(&verdict_request_, &status);  // returns at once for a cancelled receive
    int cancelled = 0;
    MPI_Test_cancelled(&status, &cancelled);
    if (!cancelled && verdict_.same_creation(mine_)) return on_verdict();
    return finish(std::make_exception_ptr(TimeoutError(
        what_ + "rank " + std::to_string(members_[0]) + " (the first member) did not answer "
        "within " + std::to_string((timeout_ + kAnswerGrace).count()) + " ms: it has not "
        "started making this group, or is stuck before it")));
  }

  State on_verdict() {
    const std::string leader = std::to_string(members_[0]);
    switch (verdict_.kind) {
      case kGo: return create();
      case kMismatch:
        return finish(std::make_exception_ptr(MismatchError(
            what_ + "the members disagree on who the members are: rank " + leader + " (the "
            "first member) heard another list (or order) from one of them; every member must "
            "pass the same list, in the same order")));
      default:
        return finish(std::make_exception_ptr(TimeoutError(
            what_ + "rank " + leader + " (the first member) gave up: not every member came "
            "within the timeout (" + std::to_string(timeout_.count()) + " ms; its error names "
            "who did not)")));
    }
  }

  // Step 4: every member has the verdict "go", so this waits on no one.
  State create() {
    MPI_Group world = MPI_GROUP_NULL;
    MPI_Group group = MPI_GROUP_NULL;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_incl(world, static_cast<int>(members_.size()), members_.data(), &group);
    const int rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, kCreateTag, &out_->comm);
    MPI_Group_free(&group);
    MPI_Group_free(&world);
    if (rc != MPI_SUCCESS) {
      return finish(std::make_exception_ptr(DistributedError(
          what_ + "MPI_Comm_create_group failed: " + error_string(rc))));
    }
    return finish(nullptr);
  }

  State finish(std::exception_ptr error) {
    answered_ = true;
    work_->complete(std::move(error));
    return linger();
  }

  // Sends and cancelled receives still own buffers of this task until MPI completes them.
  State linger() {
    if (!pending_.empty()) {
      int done = 0;
      MPI_Testall(static_cast<int>(pending_.size()), pending_.data(), &done,
                  MPI_STATUSES_IGNORE);
      if (!done) return State::kLingering;
    }
    return State::kDone;
  }

  const std::vector<int> members_;
  const bool leading_;
  const Message mine_;
  const std::chrono::milliseconds timeout_;
  const Clock::time_point deadline_;
  const std::string what_;
  std::shared_ptr<CompletionWork> work_;
  std::shared_ptr<Outcome> out_;
  bool started_ = false;
  bool answered_ = false;
  std::vector<MPI_Request> pending_;
  std::vector<Message> outbox_;
  // The leader's, indexed as members_: each member's next message, its join.
  std::vector<Message> in_;
  std::vector<bool> joined_;
  std::vector<MPI_Request> recv_;
  std::vector<Message> joins_;
  int mismatched_ = -1;
  // A member's.
  Message verdict_;
  MPI_Request verdict_request_ = MPI_REQUEST_NULL;
  bool withdrew_ = false;
  Clock::time_point grace_;
};

std::mutex g_making;  // one sub-group at a time per process (Note [MPI sub-groups])
std::map<std::uint64_t, std::uint64_t> g_made;  // groups made per member list, under g_making

}  // namespace

MPI_Comm create_subgroup_comm(Runtime& runtime, const std::vector<int>& members,
                              std::chrono::milliseconds timeout, const std::string& where) {
  std::lock_guard<std::mutex> lock(g_making);
  const std::uint64_t list = hash_list(members);
  const Message mine{kJoin, list, g_made[list]++};
  const std::string what = where + "mpi: making the group of ranks " + list_string(members) +
                           ": ";
  auto work = std::make_shared<CompletionWork>(timeout, where);
  auto out = std::make_shared<Outcome>();
  const bool leading = members[0] == runtime.rank();
  runtime.submit(std::make_shared<Handshake>(members, leading, mine, timeout, what, work, out));
  // The handshake ends itself within timeout + kAnswerGrace; this bounds a stuck MPI thread.
  const Waiting waiting(runtime);  // the MPI thread spins for it
  work->wait(timeout + kAnswerGrace + std::chrono::seconds(10));
  return out->comm;
}

}  // namespace dpx::detail::mpi
#endif  // DPX_WITH_MPI
