#include "dpx/ft/manager.h"

#include <algorithm>
#include <cstdio>

#include "dpx/comm/init.h"
#include "dpx/errors.h"
#include "ft/protocol.h"
#include "ft/state.h"
#include "runtime/env_read.h"
#include "store/agent_store.h"

namespace dpx::ft {

using detail::Decision;
using detail::Keys;
using detail::Member;

namespace {
// How long a rank waits for a decision before it checks that the coordinator still runs.
constexpr std::chrono::milliseconds kDecisionSlice{5000};
}  // namespace

Manager::Manager(ManagerOptions options) : options_(std::move(options)) {
  if (!options_.store) {
    auto env = [](const char* name) {
      auto v = dpx::detail::env_string(name);
      TORCH_CHECK(v, "dpx::ft::Manager: environment variable ", name, " is not set; run the "
                  "program under dpxrun --fault-tolerant, or fill ManagerOptions yourself");
      return *v;
    };
    options_.store = dpx::detail::connect_agent_store(env("DPX_FT_STORE"), "DPX_FT_STORE",
                                                      std::chrono::seconds(60));
    options_.prefix = env("DPX_FT_PREFIX");
    env("DPX_FT_GROUP");
    options_.group = static_cast<int>(*dpx::detail::env_int("DPX_FT_GROUP", 0));
    options_.incarnation = static_cast<int>(dpx::detail::env_int("DPX_FT_INCARNATION", 0).value_or(0));
    options_.local_rank = static_cast<int>(dpx::detail::env_int("LOCAL_RANK", 0).value_or(0));
    options_.local_size = static_cast<int>(dpx::detail::env_int("LOCAL_WORLD_SIZE", 1).value_or(1));
  }
  TORCH_CHECK(options_.group >= 0 && options_.local_rank >= 0 &&
                  options_.local_rank < options_.local_size,
              "dpx::ft::Manager: group ", options_.group, ", local rank ", options_.local_rank,
              " of ", options_.local_size, " is not a place in a replica group");
  options_.store->set_timeout(options_.store_timeout);
  const Keys keys(options_.prefix);
  local_ = new_process_group(
      "shm", Store::prefix(keys.inside(options_.group, options_.incarnation), options_.store),
      options_.local_rank, options_.local_size);
  current_ = std::make_unique<Decision>();
}

Manager::~Manager() = default;

std::string Manager::where() const {
  return "[group " + std::to_string(options_.group) + " rank " +
         std::to_string(options_.local_rank) + "/" + std::to_string(options_.local_size) + " " +
         local_->where().substr(local_->where().find(' ', local_->where().find(' ') + 1) + 1);
}

void Manager::register_state(torch::nn::Module& module, torch::optim::Optimizer& optimizer,
                             std::vector<at::Tensor> extra) {
  state_ = std::make_unique<State>(State{&module, &optimizer, std::move(extra)});
}

int Manager::participants() const { return static_cast<int>(current_->members.size()); }
int Manager::participant() const { return current_->index_of(options_.group); }

// Local rank 0's lines carry the wall clock, so that a lost host's kill and the survivors'
// next commit can be compared across hosts (tests/scripts/cluster/fault_tolerant.sh).
void Manager::say(const std::string& line) const {
  if (options_.local_rank != 0) return;
  const double t = std::chrono::duration<double>(
                       std::chrono::system_clock::now().time_since_epoch()).count();
  std::fprintf(stderr, "dpx ft: group %d at %.3f: %s\n", options_.group, t, line.c_str());
}

Decision Manager::wait_decision(std::int64_t attempt) {
  const Keys keys(options_.prefix);
  Decision d;
  const auto deadline = std::chrono::steady_clock::now() + options_.decision_timeout;
  try {
    // In slices: between two, the coordinator's count must have moved, else it is stopped or
    // gone while its store still answers (or the store does not answer either: that throws).
    std::string coordinator = options_.store->get(keys.coordinator());
    bool timed_out = false;
    for (;;) {
      try {
        options_.store->wait({keys.decision(attempt)}, kDecisionSlice);
        break;
      } catch (const TimeoutError&) {
        const std::string now = options_.store->get(keys.coordinator());
        if (now == coordinator) {
          throw DistributedError("the coordinator's count stood still for " +
                                 std::to_string(kDecisionSlice.count() / 1000) +
                                 " s while this rank waited for step " + std::to_string(step_) +
                                 "'s decision: it stopped");
        }
        coordinator = now;
        if (std::chrono::steady_clock::now() >= deadline) {
          timed_out = true;
          break;
        }
      }
    }
    if (timed_out) {
      throw std::runtime_error(where() + "no decision on step " + std::to_string(step_) +
                               " within decision_timeout (" +
                               std::to_string(options_.decision_timeout.count() / 1000) +
                               " s), though the coordinator runs: too few groups for too long?");
    }
    d = detail::decode(options_.store->get(keys.decision(attempt)));
  } catch (const DistributedError& e) {
    lost_coordinator(e);
  }
  if (!d.failed.empty()) {
    throw DistributedError("fault-tolerant training cannot go on: " + d.failed);
  }
  return d;
}

void Manager::lost_coordinator(const std::exception& e) const {
  throw DistributedError(where() + "lost the fault-tolerance coordinator (it runs with the store on the "
                         "rendezvous host, " + options_.store->describe() +
                         "; that host died, stopped, or the network is cut): " + e.what());
}

bool Manager::decided(std::int64_t attempt) {
  try {
    return options_.store->check({detail::Keys(options_.prefix).decision(attempt)});
  } catch (const DistributedError& e) {
    lost_coordinator(e);
  }
}

bool Manager::join() {
  const Keys keys(options_.prefix);
  // Rank 0 reads where the decisions stand before it asks, and every rank of the group starts
  // from there: each then finds the same first decision that lists the group.
  auto from = torch::zeros({1}, torch::kInt64);
  if (options_.local_rank == 0) {
    try {
      if (options_.store->check({keys.latest()}))
        from[0] = static_cast<int64_t>(std::stoll(options_.store->get(keys.latest())));
      options_.store->set(keys.join(options_.group), std::to_string(options_.incarnation));
    } catch (const DistributedError& e) {
      lost_coordinator(e);
    }
  }
  local_->broadcast(from)->wait();
  std::int64_t a = from[0].item<int64_t>();
  const Member me{options_.group, options_.incarnation};
  for (;; ++a) {
    Decision d = wait_decision(a);
    if (d.has(me)) {
      *current_ = std::move(d);
      break;
    }
    if (d.finished) return false;
  }
  attempt_ = current_->attempt;
  step_ = current_->step;
  joined_ = pending_ = true;
  return true;
}

bool Manager::start_step() {
  if (!joined_ && !join()) {
    say("every other group finished training before this one could join");
    return false;
  }
  if (pending_) {
    pending_ = false;
    cross_ok_ = true;
    if (current_->quorum != quorum_) make_cross(*current_);
    if (!cross_ok_ && current_->joining(options_.group)) {
      // It would train from its own weights, and no later decision lists it as a joiner: it
      // ends, its agent restarts it, and it joins again.
      throw DistributedError(where() + "this group joins at step " +
                             std::to_string(current_->step) + " but could not connect to the "
                             "other groups to take their state");
    }
    if (!current_->joiners.empty() && cross_ok_) heal(*current_);
  }
  return true;
}

void Manager::make_cross(const Decision& d) {
  // A group whose last collective may still run is kept until it completed.
  abandoned_.erase(std::remove_if(abandoned_.begin(), abandoned_.end(),
                                  [](const auto& a) { return !a.second || a.second->is_completed(); }),
                   abandoned_.end());
  if (cross_) abandoned_.emplace_back(std::move(cross_), std::move(cross_work_));
  cross_work_.reset();
  quorum_ = d.quorum;
  ++stats_.quorums;
  std::string groups;
  for (const auto& m : d.members) groups += (groups.empty() ? "" : ",") + std::to_string(m.group);
  say("step " + std::to_string(d.step) + ": quorum " + std::to_string(d.quorum) + " of " +
      std::to_string(d.members.size()) + " group(s) [" + groups + "]");
  if (d.members.size() < 2) return;
  const Keys keys(options_.prefix);
  ProcessGroup::Options o;
  o.timeout = options_.cross_timeout;
  o.stall_threshold = std::chrono::milliseconds(0);
  try {
    cross_ = new_process_group(
        "gloo", Store::prefix(keys.cross(d.quorum, options_.local_rank), options_.store),
        d.index_of(options_.group), static_cast<int>(d.members.size()), o);
  } catch (const DistributedError& e) {
    say(std::string("cannot make the group across replica groups (the step will not "
                    "commit): ") + e.what());
    cross_ok_ = false;
  }
}

void Manager::allreduce_gradients(const std::vector<at::Tensor>& parameters) {
  TORCH_CHECK(joined_ && !pending_, "dpx::ft::Manager: call start_step() before "
              "allreduce_gradients()");
  std::vector<at::Tensor> grads;
  for (const auto& p : parameters) {
    if (!p.requires_grad()) continue;
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    grads.push_back(p.grad());
  }
  if (grads.empty()) return;
  auto flat = torch::cat([&] {
    std::vector<at::Tensor> v;
    for (const auto& g : grads) v.push_back(g.reshape(-1));
    return v;
  }());
  local_->allreduce(flat)->wait();  // a failure here throws: the agent restarts the group
  if (cross_ && cross_ok_) {
    cross_work_ = cross_->allreduce(flat);
    const auto start = std::chrono::steady_clock::now();
    // Wait in slices: a lost peer's decision may come first (Note [Fault-tolerant steps], 4).
    for (;;) {
      try {
        cross_work_->wait(std::chrono::milliseconds(50));
        break;
      } catch (const TimeoutError& e) {
        // A collective that itself timed out is complete (and rethrows at once): failed.
        if (cross_work_->is_completed() ||
            std::chrono::steady_clock::now() - start >= options_.cross_timeout) {
          say(std::string("the reduction across groups timed out (the step will not commit): ") +
              e.what());
          cross_ok_ = false;
          break;
        }
        if (decided(attempt_ + 1)) {
          cross_ok_ = false;
          break;
        }
      } catch (const DistributedError& e) {
        say(std::string("the reduction across groups failed (the step will not commit): ") +
            e.what());
        cross_ok_ = false;
        break;
      }
    }
  }
  flat.div_(static_cast<double>(participants() * options_.local_size));
  int64_t offset = 0;
  for (auto& g : grads) {
    const auto n = g.numel();
    g.copy_(flat.narrow(0, offset, n).view_as(g));
    offset += n;
  }
}

bool Manager::should_commit() {
  TORCH_CHECK(joined_ && !pending_, "dpx::ft::Manager: call start_step() before "
              "should_commit()");
  auto ok = torch::full({1}, cross_ok_ ? 1.0f : 0.0f);
  local_->allreduce(ok, {.op = ReduceOp::kMin})->wait();
  const Keys keys(options_.prefix);
  const std::int64_t a = attempt_ + 1;
  if (options_.local_rank == 0 && !decided(a)) {
    try {
      options_.store->set(keys.vote(a, options_.group), ok.item<float>() == 1.0f ? "1" : "0");
    } catch (const DistributedError& e) {
      lost_coordinator(e);
    }
  }
  Decision d = wait_decision(a);
  if (!d.has({options_.group, options_.incarnation})) {
    throw DistributedError(where() + "replica group " + std::to_string(options_.group) +
                           " was dropped from the quorum at step " + std::to_string(step_) +
                           " (the coordinator lost its agent's beat); its agent restarts it "
                           "and it heals from a peer");
  }
  const bool commit = d.commit;
  commit ? ++stats_.commits : ++stats_.aborts;
  if (commit && quorum_ != committed_quorum_) {
    committed_quorum_ = quorum_;
    say("step " + std::to_string(step_) + " committed with " + std::to_string(participants()) +
        " group(s)");
  }
  if (!commit) say("step " + std::to_string(step_) + " did not commit everywhere; running it again");
  attempt_ = a;
  step_ = d.step;
  *current_ = std::move(d);
  pending_ = true;
  return commit;
}

}  // namespace dpx::ft
