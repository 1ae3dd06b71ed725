#include "dpxrun/rendezvous.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "dpx/errors.h"
#include "dpxrun/clock_and_say.h"
#include "dpxrun/net.h"
#include "net/route.h"

namespace dpxrun {
namespace {

std::chrono::milliseconds ms(double seconds) {
  return std::chrono::milliseconds(static_cast<long>(seconds * 1000));
}

std::string round_key(int round, const std::string& k) {
  return "r" + std::to_string(round) + "/" + k;
}

struct NodeEntry {
  int node_rank = -1;
  std::string host;
  int nproc = 0;
};

// Note [Rendezvous stores]
// Both backends' stores are dpx's own (docs/launcher.md, "The rendezvous store"): bound to the
// address given, with the job token, bounded requests and deadlines. The static backend's store
// doubles as the workers' agent store (TORCHELASTIC_USE_AGENT_STORE=True), which PyTorch programs
// join with c10d's TCPStore client: it also serves that protocol, to clients that may touch only
// the keys c10d's clients use (Note [c10d clients] in src/store/tcp_server.h), so the token still
// guards the rendezvous keys. dpxrun's agents always speak dpx's protocol, with the token.
std::shared_ptr<dpx::Store> connect(const std::string& host, int port, bool server,
                                    double timeout, const std::string& token, bool agent_store) {
  dpx::TcpStoreOptions o;
  o.host = host;
  o.port = static_cast<std::uint16_t>(port);
  o.is_server = server;
  o.timeout = ms(timeout);
  o.token = token;
  o.accept_c10d_clients = agent_store;
  return dpx::Store::tcp(o);
}

// DPX_STORE_TOKEN when the user set one (the same on every node), else the run id: random with
// --standalone, else --rdzv-id, which keeps other jobs out but is no secret.
std::string job_token(const Config& config) {
  const char* v = std::getenv("DPX_STORE_TOKEN");
  return v != nullptr && *v != '\0' ? v : config.rdzv_id;
}

}  // namespace

Rendezvous::Rendezvous(const Config& config, std::function<bool()> interrupted)
    : config_(config), interrupted_(std::move(interrupted)) {
  prefix_ = "dpxrun/" + config_.rdzv_id + "/";
  token_ = job_token(config_);
  const double connect_timeout = std::max(config_.timeouts.join, 1.0);
  if (config_.is_static()) {
    store_host_ = config_.master_addr;
    hosts_store_ = config_.node_rank == 0;
    store_ = connect(store_host_, config_.master_port, hosts_store_, connect_timeout, token_,
                     true);
    local_addr_ = config_.master_addr;
  } else {
    store_host_ = config_.rdzv_host;
    if (is_local_host(config_.rdzv_host) &&
        (config_.rdzv_port == 0 || !port_in_use(config_.rdzv_port))) {
      // The first agent on the endpoint's host serves the store; the others find the port taken
      // and join as clients (a race between two starting at once is settled by the bind).
      try {
        store_ = connect(store_host_, config_.rdzv_port, true, connect_timeout, token_, false);
        hosts_store_ = true;
      } catch (const dpx::DistributedError&) {
        if (config_.rdzv_port == 0) throw;
      }
    }
    if (!store_) {
      store_ = connect(store_host_, config_.rdzv_port, false, connect_timeout, token_, false);
    }
    // Where peers reach this host, even when every node has the same hostname (network
    // namespaces): the local address that routes to the store's host.
    local_addr_ = dpx::detail::local_address_toward(store_host_).value_or(hostname());
  }
  store_->set_timeout(ms(std::max(config_.timeouts.close, 10.0)));
}

std::shared_ptr<dpx::Store> Rendezvous::new_client() const {
  auto client = connect(store_host_, store_->port(), false, std::max(config_.timeouts.join, 1.0),
                        token_, false);
  // Short: a beat that cannot get through in 2 s is a missed beat, not a reason to hold the
  // agent's exit (its own connection has the long timeout).
  client->set_timeout(ms(2.0));
  return client;
}

std::string Rendezvous::describe_member(int group_rank) const {
  return group_rank >= 0 && group_rank < static_cast<int>(members_.size())
             ? members_[group_rank]
             : "node " + std::to_string(group_rank);
}

void Rendezvous::sleep_checked() {
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (interrupted_ && interrupted_()) throw Interrupted();
}

Rendezvous::State Rendezvous::read_state() {
  State s;
  if (!store_->check({key("state")})) return s;
  s.text = store_->get(key("state"));
  if (s.text == "failed") {
    s.failed = true;
    return s;
  }
  std::sscanf(s.text.c_str(), "%d:%d", &s.round, &s.restarts);
  return s;
}

std::string Rendezvous::wait_get(const std::string& k, double deadline, const char* what) {
  while (!store_->check({key(k)})) {
    if (now() > deadline) {
      throw dpx::TimeoutError("dpxrun: rendezvous of job '" + config_.rdzv_id + "': " + what +
                              " did not arrive within the close timeout (" +
                              std::to_string(config_.timeouts.close) +
                              " s); a node probably died during the rendezvous");
    }
    sleep_checked();
  }
  return store_->get(key(k));
}

// Returns the number of members of `round` and this node's index in it, or -1 when the round
// closed without it.
int Rendezvous::join_round(int round, double deadline, int& index) {
  index = static_cast<int>(store_->add(key(round_key(round, "joined")), 1)) - 1;
  const int my_rank = config_.is_static() ? config_.node_rank : -1;
  store_->set(key(round_key(round, "node" + std::to_string(index))),
              std::to_string(my_rank) + " " + local_addr_ + " " +
                  std::to_string(config_.nproc_per_node));
  double min_seen_at = -1;
  while (true) {
    const std::string closed = round_key(round, "closed");
    if (store_->check({key(closed)})) {
      const int members = std::stoi(store_->get(key(closed)));
      return index < members ? members : -1;
    }
    const int n = static_cast<int>(store_->add(key(round_key(round, "joined")), 0));
    int target = 0;
    if (n >= config_.max_nodes) {
      target = config_.max_nodes;
    } else if (n >= config_.min_nodes) {
      if (min_seen_at < 0) min_seen_at = now();
      if (now() - min_seen_at >= config_.timeouts.last_call) target = n;
    }
    if (target > 0) {
      const int members = std::stoi(store_->compare_set(key(closed), "", std::to_string(target)));
      return index < members ? members : -1;
    }
    if (now() > deadline) {
      throw dpx::TimeoutError(
          "dpxrun: rendezvous of job '" + config_.rdzv_id + "' timed out after " +
          std::to_string(config_.timeouts.join) + " s (join_timeout): " + std::to_string(n) +
          " node(s) joined, at least " + std::to_string(config_.min_nodes) +
          " needed. Start the other nodes, or check --rdzv-endpoint / --nnodes.");
    }
    sleep_checked();
  }
}

void Rendezvous::publish_and_assign(int round, int index, int members, RoundInfo& info,
                                    double deadline) {
  std::vector<NodeEntry> nodes(members);
  for (int i = 0; i < members; ++i) {
    std::stringstream ss(wait_get(round_key(round, "node" + std::to_string(i)), deadline,
                                  "a member's registration"));
    ss >> nodes[i].node_rank >> nodes[i].host >> nodes[i].nproc;
  }
  info.group_rank = index;
  if (config_.is_static()) {
    std::set<int> seen;
    for (const auto& n : nodes) {
      if (!seen.insert(n.node_rank).second) {
        throw dpx::DistributedError("dpxrun: two nodes of job '" + config_.rdzv_id +
                                    "' use --node-rank " + std::to_string(n.node_rank) +
                                    "; give each node its own rank in 0.." +
                                    std::to_string(members - 1));
      }
    }
    info.group_rank = config_.node_rank;
    std::sort(nodes.begin(), nodes.end(),
              [](const NodeEntry& a, const NodeEntry& b) { return a.node_rank < b.node_rank; });
  }
  info.group_world_size = members;
  info.members = members;
  info.world_size = 0;
  members_.clear();
  for (int i = 0; i < members; ++i) {
    if (i == info.group_rank) info.rank_offset = info.world_size;
    members_.push_back("node " + std::to_string(i) + " at " + nodes[i].host + " (rank" +
                       (nodes[i].nproc == 1 ? " " + std::to_string(info.world_size)
                                            : "s " + std::to_string(info.world_size) + "-" +
                                                  std::to_string(info.world_size + nodes[i].nproc - 1)) +
                       ")");
    info.world_size += nodes[i].nproc;
  }
  const std::string master = round_key(round, "master");
  if (info.group_rank == 0) {
    info.master_addr = config_.is_static() ? config_.master_addr : local_addr_;
    info.master_port = config_.is_static() ? config_.master_port : free_port();
    store_->set(key(master), info.master_addr + ":" + std::to_string(info.master_port));
  } else {
    const std::string m = wait_get(master, deadline, "the master address of group rank 0");
    const auto colon = m.rfind(':');
    info.master_addr = m.substr(0, colon);
    info.master_port = std::stoi(m.substr(colon + 1));
  }
}

RoundInfo Rendezvous::next_round() {
  in_round_ = false;
  const double deadline = now() + config_.timeouts.join;
  int waiting_marked = -1;
  while (true) {
    const State st = read_state();
    if (st.failed) throw JobFailedElsewhere(failure_elsewhere());
    const int round = st.round;
    if (store_->check({key(round_key(round, "closed"))})) {
      // A group is running without us: ask it to make room, then wait for the next round.
      if (waiting_marked != round) {
        store_->add(key(round_key(round, "waiting")), 1);
        waiting_marked = round;
      }
      if (now() > deadline) {
        throw dpx::TimeoutError("dpxrun: job '" + config_.rdzv_id + "' did not admit this node "
                                "within join_timeout (" + std::to_string(config_.timeouts.join) +
                                " s); the running group is full (--nnodes max " +
                                std::to_string(config_.max_nodes) + ") or not answering");
      }
      sleep_checked();
      continue;
    }
    int index = -1;
    const int members = join_round(round, deadline, index);
    if (members < 0) continue;  // closed just before we got in
    RoundInfo info;
    info.round = round;
    info.restart_count = st.restarts;
    publish_and_assign(round, index, members, info, now() + config_.timeouts.close);
    current_ = info;
    in_round_ = true;
    return info;
  }
}

GroupEvent Rendezvous::poll() {
  if (!in_round_) return GroupEvent::kNone;
  const State st = read_state();
  if (st.failed) return GroupEvent::kJobFailed;
  if (st.round != current_.round) return GroupEvent::kRestart;
  const std::string waiting = key(round_key(current_.round, "waiting"));
  if (current_.members < config_.max_nodes && store_->check({waiting}) &&
      store_->add(waiting, 0) > 0) {
    const std::string next =
        std::to_string(current_.round + 1) + ":" + std::to_string(st.restarts);
    store_->compare_set(key("state"), st.text, next);
    return GroupEvent::kMembershipChange;
  }
  return GroupEvent::kNone;
}

bool Rendezvous::report_failure(const std::string& summary) {
  in_round_ = false;
  const State st = read_state();
  if (st.failed) return false;
  if (st.round != current_.round) return true;  // someone else already restarts the group
  if (st.restarts >= config_.max_restarts) {
    store_->set(key("failure"), summary);
    return store_->compare_set(key("state"), st.text, "failed") != "failed";
  }
  const std::string next =
      std::to_string(current_.round + 1) + ":" + std::to_string(st.restarts + 1);
  return store_->compare_set(key("state"), st.text, next) != "failed";
}

std::string Rendezvous::failure_elsewhere() {
  return store_->check({key("failure")}) ? store_->get(key("failure")) : "(no summary)";
}

FinishResult Rendezvous::finish(double timeout_seconds) {
  if (!in_round_) return FinishResult::kDone;
  in_round_ = false;
  const std::string done = key(round_key(current_.round, "done"));
  const std::string left = key(round_key(current_.round, "left"));
  const double deadline = now() + timeout_seconds;
  // Waits for `counter` to reach `count`; a new round or a failed job ends the wait early.
  auto wait_for = [&](const std::string& counter, int count) {
    while (store_->add(counter, 0) < count && now() < deadline) {
      const State st = read_state();
      if (st.failed) return FinishResult::kJobFailed;
      if (st.round != current_.round) return FinishResult::kRestart;
      if (interrupted_ && interrupted_()) return FinishResult::kDone;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return FinishResult::kDone;
  };
  try {
    store_->add(done, 1);
    const FinishResult all_done = wait_for(done, current_.members);
    if (all_done != FinishResult::kDone) return all_done;
    // The store's host leaves last, or the others would lose it in the middle of the barrier.
    if (hosts_store_) {
      wait_for(left, current_.members - 1);
    } else {
      store_->add(left, 1);
    }
  } catch (const dpx::DistributedError&) {
    // Our workers succeeded; a store host that left early cannot change that.
  }
  return FinishResult::kDone;
}

}  // namespace dpxrun
