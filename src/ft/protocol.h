// The keys and records of fault-tolerant training (Note [Fault-tolerant steps]), shared by the
// coordinator, the agents' beats and the training ranks' Manager.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dpx::ft::detail {

// A replica group as one of its lives: a restarted group is a new incarnation of the same id.
struct Member {
  int group = 0;
  int incarnation = 0;
  bool operator==(const Member& o) const {
    return group == o.group && incarnation == o.incarnation;
  }
};

// The coordinator's answer to attempt `attempt` (decision 0 is the first quorum): whether its
// step commits, and the quorum of the next attempt.
struct Decision {
  std::int64_t attempt = 0;
  bool commit = false;
  std::int64_t step = 0;    // the step the next attempt trains (steps committed so far)
  std::int64_t quorum = 0;  // changes whenever the cross-group groups must be made again
  std::vector<Member> members;  // the next attempt's groups, by group id
  int source = -1;              // the group the joiners heal from; -1: none heals
  std::vector<int> joiners;     // groups that take the source's state before the next attempt
  bool finished = false;        // every member finished: a joiner has nothing to join
  std::string failed;           // non-empty: the job cannot go on, and why

  bool has(const Member& m) const;
  int index_of(int group) const;  // the group's place in `members`, -1 if absent
  bool joining(int group) const;
};

std::string encode(const Decision& d);
// Throws std::runtime_error naming the text when it is not a decision.
Decision decode(const std::string& text);

// Every key, under the job's prefix.
class Keys {
 public:
  explicit Keys(std::string prefix) : p_(std::move(prefix)) {}
  std::string groups() const { return p_ + "groups"; }  // counter: the next group id
  std::string beat(int g) const { return p_ + "beat/" + std::to_string(g); }
  std::string left(int g) const { return p_ + "left/" + std::to_string(g); }
  std::string done(int g) const { return p_ + "done/" + std::to_string(g); }
  // The group's newest incarnation, set by its agent as soon as the old one failed.
  std::string incarnation(int g) const { return p_ + "inc/" + std::to_string(g); }
  std::string join(int g) const { return p_ + "join/" + std::to_string(g); }
  std::string vote(std::int64_t a, int g) const {
    return p_ + "vote/" + std::to_string(a) + "/" + std::to_string(g);
  }
  std::string decision(std::int64_t a) const { return p_ + "decision/" + std::to_string(a); }
  std::string latest() const { return p_ + "latest"; }
  // Counted up by the coordinator while it runs: ranks waiting for a decision watch it.
  std::string coordinator() const { return p_ + "coordinator"; }
  // Where the cross-group group of `quorum` for one local rank, and a group's own, are made.
  std::string cross(std::int64_t quorum, int local_rank) const {
    return p_ + "cross/" + std::to_string(quorum) + "/" + std::to_string(local_rank) + "/";
  }
  std::string inside(int g, int incarnation) const {
    return p_ + "group/" + std::to_string(g) + "/" + std::to_string(incarnation) + "/";
  }
  const std::string& prefix() const { return p_; }

 private:
  std::string p_;
};

// When each group's beat last moved, as this process saw it: a beat that stands still for
// drop_after means its agent is gone or stopped.
class BeatWatch {
 public:
  // How long group g's beat, read now as `value`, has stood still (zero when first seen).
  std::chrono::steady_clock::duration still(int g, const std::string& value) {
    const auto now = std::chrono::steady_clock::now();
    auto [it, fresh] = seen_.try_emplace(g, Seen{value, now});
    if (!fresh && value != it->second.beat) it->second = {value, now};
    return now - it->second.changed;
  }

 private:
  struct Seen {
    std::string beat;
    std::chrono::steady_clock::time_point changed;
  };
  std::map<int, Seen> seen_;
};

}  // namespace dpx::ft::detail
