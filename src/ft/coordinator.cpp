#include "dpx/ft/coordinator.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

#include "dpx/errors.h"
#include "ft/protocol.h"

namespace dpx::ft {

// Note [Fault-tolerant steps]
// Replica groups (a host each, under dpxrun --fault-tolerant) train side by side; inside a group
// the ranks reduce over shm, across groups rank k of every group reduces with rank k of the
// others over gloo. A step commits everywhere or nowhere, decided in one place:
//   1. Every group's agent beats (GroupBeat: beat/<g> counted up every 100 ms from a thread of
//      the agent, never from a training rank, so a long step cannot look like a dead group) and
//      sets inc/<g> the moment its workers fail, before it restarts them.
//   2. A group's leader (local rank 0) asks to join with join/<g> = its incarnation. The
//      coordinator forms the first quorum from the groups that asked (max_groups at once, or
//      min_groups after first_quorum_wait) and publishes decision/0: every member heals from the
//      first one, so all replicas start from the same bytes.
//   3. Attempt a (a >= 1) trains one step with decision/<a-1>'s members: backward, the
//      reduction inside the group, the reduction across groups. The group's ranks agree (a min
//      over the group) whether all of it succeeded and the leader votes vote/<a>/<g> = 1 or 0.
//   4. The coordinator publishes decision/<a> when every member voted, or as soon as one member
//      is lost (its beat stood still for drop_after, or inc/<g> moved past its incarnation, or
//      its agent left): commit only if every member voted 1. The members of the next attempt
//      are the live ones plus the groups that asked to join meanwhile; after a failure or a
//      change of members the quorum number moves on and every rank makes its cross-group
//      group again. Ranks stuck in a cross-group collective with a lost peer stop waiting when
//      the decision appears.
//   5. Every rank reads decision/<a>: commit -> optimizer.step(), step + 1; abort -> the same
//      step again with the new members (its samples are redone, none skipped). A rank whose
//      group is no longer a member throws (its agent restarts it and it joins as a new
//      incarnation). Joiners take the model and optimizer state from the source group (a
//      survivor, at the newest step) by broadcast over the new cross-group group, checksummed,
//      before the next attempt; no file is read.
// The coordinator is a single point: it lives with the store in the agent that hosts the
// rendezvous; if that host dies, every rank loses the store and fails with a DistributedError
// naming it (docs/fault_tolerance.md).

using Clock = std::chrono::steady_clock;
using detail::BeatWatch;
using detail::Decision;
using detail::Keys;
using detail::Member;

class Coordinator::Loop {
 public:
  Loop(Store& store, Keys keys, const CoordinatorOptions& options, const std::atomic<bool>& stop,
       std::atomic<std::int64_t>& published)
      : store_(store), keys_(std::move(keys)), options_(options), stop_(stop),
        published_(published) {}

  void run() {
    beat();
    Decision d = first_quorum();
    if (stop_) return;
    publish(d);
    while (!stop_ && d.failed.empty() && !d.finished) {
      d = next(d);
      if (!stop_) publish(d);
    }
  }

 private:
  // At most every 100 ms, from every waiting loop: ranks that wait for a decision take a count
  // that stands still for a stopped coordinator (Manager::wait_decision).
  void beat() {
    const auto now = Clock::now();
    if (now - last_beat_ < std::chrono::milliseconds(100)) return;
    last_beat_ = now;
    store_.add(keys_.coordinator(), 1);
  }

  int incarnation_now(int g) {
    const auto k = keys_.incarnation(g);
    return store_.check({k}) ? std::stoi(store_.get(k)) : 0;
  }

  bool flag(const std::string& key) { return store_.check({key}); }

  // Its agent's beat moved within drop_after and the agent did not leave.
  bool alive(int g) {
    const auto k = keys_.beat(g);
    if (!store_.check({k}) || flag(keys_.left(g))) return false;
    return beats_.still(g, store_.get(k)) < options_.drop_after;
  }

  bool lost(const Member& m) {
    return dropped_.count({m.group, m.incarnation}) > 0 ||
           incarnation_now(m.group) > m.incarnation || !alive(m.group);
  }

  // Groups that asked to join as their current incarnation, are alive, and are not members.
  std::vector<Member> asking(const std::vector<Member>& members) {
    std::vector<Member> out;
    const int ids = static_cast<int>(store_.add(keys_.groups(), 0));
    for (int g = 0; g < ids; ++g) {
      const auto k = keys_.join(g);
      if (!store_.check({k})) continue;
      const Member m{g, std::stoi(store_.get(k))};
      const bool member = std::any_of(members.begin(), members.end(),
                                      [&](const Member& x) { return x.group == g; });
      // A life once dropped never comes back (a stopped host whose agent beats again before its
      // ranks noticed): its next incarnation joins instead.
      if (!member && !dropped_.count({g, m.incarnation}) && m.incarnation == incarnation_now(g) &&
          !flag(keys_.done(g)) && alive(g))
        out.push_back(m);
    }
    return out;
  }

  // A member whose agent beats but whose vote is vote_timeout behind the first one's: its ranks
  // hang (the agent's --heartbeat-timeout, off by default, is what would notice them).
  bool late(std::int64_t a, const Member& m, std::optional<Clock::time_point>& first_vote) {
    if (store_.check({keys_.vote(a, m.group)})) {
      if (!first_vote) first_vote = Clock::now();
      return false;
    }
    if (!first_vote || Clock::now() - *first_vote < options_.vote_timeout) return false;
    std::fprintf(stderr, "dpx ft: coordinator: group %d has not voted on attempt %lld %lld s "
                 "after the first group did; dropping it\n", m.group,
                 static_cast<long long>(a), static_cast<long long>(options_.vote_timeout.count() / 1000));
    return true;
  }

  // Of the groups asking to join, those that fit under max_groups, first come first; the others
  // stand by (hot spares) until a member is lost.
  std::vector<Member> room(const std::vector<Member>& members, std::vector<Member> asking) {
    const size_t free = members.size() < static_cast<size_t>(options_.max_groups)
                            ? options_.max_groups - members.size()
                            : 0;
    if (asking.size() > free) asking.resize(free);
    return asking;
  }

  Decision failed(std::int64_t attempt, std::string why) {
    Decision d;
    d.attempt = attempt;
    d.failed = std::move(why);
    return d;
  }

  Decision first_quorum() {
    const auto start = Clock::now();
    std::optional<Clock::time_point> enough_since;
    while (!stop_) {
      auto ready = asking({});
      const int n = static_cast<int>(ready.size());
      if (n >= options_.min_groups && !enough_since) enough_since = Clock::now();
      if (n >= options_.max_groups ||
          (enough_since && Clock::now() - *enough_since >= options_.first_quorum_wait)) {
        ready.resize(std::min<size_t>(ready.size(), options_.max_groups));  // the rest stand by
        Decision d;
        d.members = ready;
        d.source = ready.front().group;
        for (size_t i = 1; i < ready.size(); ++i) d.joiners.push_back(ready[i].group);
        return d;
      }
      if (Clock::now() - start >= options_.too_few_timeout) {
        return failed(0, too_few(n, "to start"));
      }
      beat();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return {};
  }

  std::string too_few(int n, const char* what) {
    return "only " + std::to_string(n) + " replica group(s) alive, fewer than the " +
           std::to_string(options_.min_groups) + " needed " + what + " (--nnodes MIN), for " +
           std::to_string(options_.too_few_timeout.count() / 1000) +
           " s; start more hosts or lower MIN";
  }

  // Waits for attempt cur.attempt + 1's votes, or a lost member; then decides.
  Decision next(const Decision& cur) {
    const std::int64_t a = cur.attempt + 1;
    std::vector<std::string> votes;
    for (const auto& m : cur.members) votes.push_back(keys_.vote(a, m.group));
    std::vector<Member> gone;
    std::optional<Clock::time_point> first_vote;
    auto last_check = Clock::now() - std::chrono::hours(1);
    while (!stop_) {
      if (store_.check(votes)) break;
      if (Clock::now() - last_check >= std::chrono::milliseconds(20)) {
        last_check = Clock::now();
        size_t done = 0;
        for (const auto& m : cur.members) {
          // done is read again after lost(): an agent sets done, then left as it ends.
          if (flag(keys_.done(m.group))) {
            ++done;
          } else if (lost(m) || late(a, m, first_vote)) {
            if (flag(keys_.done(m.group))) ++done;
            else gone.push_back(m);
          }
        }
        if (done == cur.members.size()) {
          Decision d = cur;
          d.attempt = a, d.finished = true;
          return d;
        }
        if (!gone.empty()) break;
        beat();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    for (const auto& m : gone) dropped_.insert({m.group, m.incarnation});
    bool ok = gone.empty();
    std::vector<Member> members;
    for (const auto& m : cur.members) {
      if (std::find(gone.begin(), gone.end(), m) != gone.end()) continue;
      const auto k = keys_.vote(a, m.group);
      if (store_.check({k})) {
        ok = ok && store_.get(k) == "1";
      } else {
        ok = false;  // decided before its vote came, because another member was lost
      }
      members.push_back(m);
    }
    Decision d;
    d.attempt = a;
    d.commit = ok;
    d.step = cur.step + (ok ? 1 : 0);
    const auto joiners = room(members, asking(members));
    if (!joiners.empty()) {
      if (members.empty()) {
        return failed(a, "every replica group that held the model was lost at step " +
                             std::to_string(cur.step) + "; no group can heal the others: "
                             "resume from a checkpoint");
      }
      d.source = members.front().group;
      for (const auto& j : joiners) d.joiners.push_back(j.group);
      members.insert(members.end(), joiners.begin(), joiners.end());
      std::sort(members.begin(), members.end(),
                [](const Member& x, const Member& y) { return x.group < y.group; });
    }
    d.members = members;
    d.quorum = cur.quorum + (ok && members == cur.members ? 0 : 1);
    if (static_cast<int>(members.size()) < options_.min_groups) {
      return wait_for_enough(d);
    }
    return d;
  }

  // Fewer members than min_groups: the decision waits for joiners, or fails the job. Only a
  // survivor (a member that is not itself joining) can be the source.
  Decision wait_for_enough(Decision d) {
    const auto start = Clock::now();
    std::fprintf(stderr, "dpx ft: coordinator: %zu replica group(s) alive at step %lld, waiting "
                 "for %d (--nnodes MIN)\n", d.members.size(), static_cast<long long>(d.step),
                 options_.min_groups);
    while (!stop_ && static_cast<int>(d.members.size()) < options_.min_groups) {
      if (Clock::now() - start >= options_.too_few_timeout)
        return failed(d.attempt, too_few(static_cast<int>(d.members.size()), "to go on"));
      beat();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::vector<Member> survivors, joiners;
      for (const auto& m : d.members) {
        if (lost(m)) {
          dropped_.insert({m.group, m.incarnation});
        } else {
          (d.joining(m.group) ? joiners : survivors).push_back(m);
        }
      }
      for (const auto& j : room(d.members, asking(d.members))) joiners.push_back(j);
      if (survivors.empty()) {
        return failed(d.attempt, "every replica group that held the model was lost; resume "
                                 "from a checkpoint");
      }
      d.members = survivors;
      d.members.insert(d.members.end(), joiners.begin(), joiners.end());
      std::sort(d.members.begin(), d.members.end(),
                [](const Member& x, const Member& y) { return x.group < y.group; });
      d.source = joiners.empty() ? -1 : survivors.front().group;
      d.joiners.clear();
      for (const auto& j : joiners) d.joiners.push_back(j.group);
    }
    return d;
  }

  void publish(const Decision& d) {
    store_.set(keys_.decision(d.attempt), detail::encode(d));
    store_.set(keys_.latest(), std::to_string(d.attempt));
    published_ = d.attempt + 1;
  }

  Store& store_;
  Keys keys_;
  const CoordinatorOptions& options_;
  const std::atomic<bool>& stop_;
  std::atomic<std::int64_t>& published_;
  BeatWatch beats_;
  std::set<std::pair<int, int>> dropped_;  // (group, incarnation) lives dropped for good
  Clock::time_point last_beat_{};
};

Coordinator::Coordinator(std::shared_ptr<Store> store, std::string prefix,
                         CoordinatorOptions options)
    : store_(std::move(store)), prefix_(std::move(prefix)), options_(options) {
  TORCH_CHECK(options_.min_groups >= 1 && options_.max_groups >= options_.min_groups,
              "fault-tolerant training needs 1 <= min_groups <= max_groups, got ",
              options_.min_groups, " and ", options_.max_groups);
  thread_ = std::thread([this] { run(); });
}

Coordinator::~Coordinator() {
  stop_ = true;
  thread_.join();
}

void Coordinator::run() {
  try {
    Loop(*store_, Keys(prefix_), options_, stop_, decisions_).run();
  } catch (const std::exception& e) {
    if (!stop_) std::fprintf(stderr, "dpx ft: the coordinator stopped: %s\n", e.what());
  }
}

void Coordinator::await_groups(std::chrono::milliseconds timeout) {
  const Keys keys(prefix_);
  const auto deadline = Clock::now() + timeout;
  BeatWatch beats;
  try {
    while (Clock::now() < deadline) {
      const int ids = static_cast<int>(store_->add(keys.groups(), 0));
      bool all = true;
      for (int g = 0; g < ids && all; ++g) {
        if (store_->check({keys.done(g)}) || store_->check({keys.left(g)})) continue;
        const std::string beat = store_->check({keys.beat(g)}) ? store_->get(keys.beat(g)) : "";
        all = beats.still(g, beat) >= options_.drop_after;
      }
      if (all) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  } catch (const std::exception&) {
    // The store is this process's: it cannot be lost; a failing read ends the wait.
  }
}

GroupBeat::GroupBeat(std::shared_ptr<Store> store, std::string prefix,
                     std::chrono::milliseconds period)
    : store_(std::move(store)), prefix_(std::move(prefix)) {
  const Keys keys(prefix_);
  group_ = static_cast<int>(store_->add(keys.groups(), 1) - 1);
  store_->add(keys.beat(group_), 1);
  thread_ = std::thread([this, period] { run(period); });
}

GroupBeat::~GroupBeat() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  try {
    store_->set(Keys(prefix_).left(group_), "1");
  } catch (const std::exception&) {
    // The store's host is gone: nobody is left to read it.
  }
}

void GroupBeat::failed(int incarnation) {
  store_->set(Keys(prefix_).incarnation(group_), std::to_string(incarnation));
}

void GroupBeat::done() { store_->set(Keys(prefix_).done(group_), "1"); }

void GroupBeat::run(std::chrono::milliseconds period) {
  const std::string key = Keys(prefix_).beat(group_);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, period, [this] { return stop_; })) {
    lock.unlock();
    try {
      store_->add(key, 1);
    } catch (const std::exception&) {
      // Lost the store: the agent's own calls say so; keep trying while it lives.
    }
    lock.lock();
  }
}

}  // namespace dpx::ft
