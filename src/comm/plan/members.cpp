#include "comm/plan/members.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "store/round.h"
#include "dpx/errors.h"

namespace dpx::detail {
namespace {

// How long rank 0 keeps the store up for a rank that has not joined yet (step 3 of
// Note [Members]).
constexpr std::chrono::milliseconds kLateRank{1000};

// What a rank published: "<world size> <host>:<pid>", or a mark "- <world size> <rank>" that
// rank <rank>, of that world size, left where nobody joined (step 2 of Note [Members]).
struct Member {
  bool joined = false;
  int world = 0;
  std::string who;  // "host:pid" of a rank that joined; for a mark, the rank whose size it read
};

Member parse(const std::string& v) {
  Member m;
  m.joined = v.rfind("- ", 0) != 0;
  const std::string rest = m.joined ? v : v.substr(2);
  const auto space = rest.find(' ');
  m.world = std::stoi(rest.substr(0, space));
  m.who = rest.substr(space + 1);
  return m;
}

std::string this_process() {
  char host[HOST_NAME_MAX + 1] = {0};
  ::gethostname(host, sizeof(host) - 1);
  return std::string(host) + ":" + std::to_string(::getpid());
}

std::string disagreement(int size, int other_rank, const Member& other) {
  const std::string named = other.joined
      ? "rank " + std::to_string(other_rank) + " (" + other.who + ") has " +
            std::to_string(other.world)
      : "no rank " + std::to_string(other_rank) + " joined, as rank " + other.who + " has " +
            std::to_string(other.world);
  return "ranks disagree on the world size: this rank has " + std::to_string(size) + ", " +
         named + ". Start every rank with the same world size (WORLD_SIZE, or world_size in "
         "the init method or InitOptions).";
}

// Reads every rank up to the largest world size seen, marking those nobody published.
std::vector<Member> read_all(Store& store, const std::string& round, std::vector<Member> seen,
                             int rank, int size) {
  int largest = size;
  for (const auto& m : seen) largest = std::max(largest, m.world);
  const std::string mark = "- " + std::to_string(size) + " " + std::to_string(rank);
  for (int r = static_cast<int>(seen.size()); r < largest; ++r) {
    seen.push_back(parse(store.compare_set(round + std::to_string(r), "", mark)));
    largest = std::max(largest, seen.back().world);
  }
  return seen;
}

// The ranks that will fail too: those that read a world size other than their own, or a mark.
std::vector<int> failing_peers(const std::vector<Member>& all, int rank) {
  std::vector<int> peers;
  for (int k = 0; k < static_cast<int>(all.size()); ++k) {
    if (k == rank || !all[k].joined) continue;
    const int known = std::min(all[k].world, static_cast<int>(all.size()));
    for (int j = 0; j < known; ++j) {
      if (!all[j].joined || all[j].world != all[k].world) {
        peers.push_back(k);
        break;
      }
    }
  }
  return peers;
}

std::string list_string(const std::vector<int>& ranks) {
  std::string s = "[";
  for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

}  // namespace

int place_in(const std::vector<int>& members, int rank, int world_size, const std::string& where) {
  const std::string list = "the member list " + list_string(members);
  if (members.empty()) {
    throw std::invalid_argument(where + "the member list is empty; name the group's members, "
                                "as ranks of the world, in group-rank order");
  }
  std::vector<bool> seen(world_size, false);
  for (int r : members) {
    if (r < 0 || r >= world_size) {
      throw std::invalid_argument(where + list + " names rank " + std::to_string(r) + ", out of "
                                  "range for world size " + std::to_string(world_size) +
                                  "; members are ranks of the world, 0 to world size - 1");
    }
    if (seen[r]) {
      throw std::invalid_argument(where + list + " names rank " + std::to_string(r) + " twice; "
                                  "name each member once");
    }
    seen[r] = true;
  }
  const auto it = std::find(members.begin(), members.end(), rank);
  if (it == members.end()) {
    throw std::invalid_argument(where + "this rank (" + std::to_string(rank) + ") is not in " +
                                list + "; only the members make a group: skip the call on the "
                                "other ranks");
  }
  return static_cast<int>(it - members.begin());
}

std::string members_key(const std::vector<int>& members) {
  std::string list;
  for (int r : members) list += (list.empty() ? "" : ",") + std::to_string(r);
  if (list.size() <= 80) return "subgroup/" + list;
  // A long list becomes its size and a hash (FNV-1a, the same on every host), so that every
  // key of the group stays short.
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : list) h = (h ^ c) * 1099511628211ull;
  return "subgroup/" + std::to_string(members.size()) + "#" + std::to_string(h);
}

void check_members(Store& store, int rank, int size, std::chrono::milliseconds timeout,
                   const std::string& where) {
  const std::string round = next_round(store, "members", rank);
  store.set(round + std::to_string(rank), std::to_string(size) + " " + this_process());
  if (size == 1) return;  // published for peers that think otherwise; nobody to wait for
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(round + std::to_string(r));
  store.wait(keys, timeout);
  std::vector<Member> seen;
  int differs = -1;
  for (int r = 0; r < size; ++r) {
    seen.push_back(parse(store.get(keys[r])));
    if (differs < 0 && (!seen[r].joined || seen[r].world != size)) differs = r;
  }
  if (differs < 0) return;
  const std::vector<Member> all = read_all(store, round, seen, rank, size);
  if (rank == 0) {
    wait_until_read(store, round, failing_peers(all, rank), std::min(timeout, kReadLimit));
    // A rank whose key holds a mark may just be late (a slow start): it replaces the mark when
    // it comes, and needs the store to read why it fails. A moment, for a rank that may not exist.
    std::vector<int> unjoined;
    for (int k = 0; k < static_cast<int>(all.size()); ++k) {
      if (!all[k].joined) unjoined.push_back(k);
    }
    wait_until_read(store, round, unjoined, std::min(timeout, kLateRank));
  } else {
    done_reading(store, round, rank);
  }
  throw DistributedError(where + disagreement(size, differs, seen[differs]));
}

void claim_rank(Store& store, int rank, const std::string& where) {
  const std::string me = this_process();
  const std::string holder = store.compare_set("ranks/" + std::to_string(rank), "", me);
  if (holder == me) return;
  throw DistributedError(where + "rank " + std::to_string(rank) + " is taken by another process (" +
                         holder + "); every process of the job needs a rank of its own (RANK, "
                         "or rank in the init method or InitOptions). With file://, a file left "
                         "by an earlier run still holds its ranks: start from a new file.");
}

}  // namespace dpx::detail
