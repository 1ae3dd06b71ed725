#include "dpxrun/agent.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include "dpx/runtime/env.h"
#include "dpx/runtime/files.h"
#include "dpx/launch/error_handler.h"
#include "dpx/errors.h"
#include "dpxrun/clock_and_say.h"
#include "dpxrun/net.h"

extern char** environ;

namespace dpxrun {
namespace {

volatile sig_atomic_t g_signal = 0;
int g_wake[2] = {-1, -1};

void on_signal(int sig) {
  if (g_signal == 0) g_signal = sig;
  if (g_wake[1] >= 0) {
    ssize_t ignored = write(g_wake[1], "x", 1);
    (void)ignored;
  }
}

// Waits up to `seconds` or until a signal arrives.
void wait_or_signal(double seconds) {
  pollfd p{g_wake[0], POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(seconds * 1000)) > 0) {
    char buf[64];
    while (read(g_wake[0], buf, sizeof(buf)) > 0) {
    }
  }
}

const char* kWorkerVars[] = {
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE", "DPX_AGENT_STORE",
    "DPX_HEARTBEAT_KEY", "DPX_HEARTBEAT_TIMEOUT", "DPX_STORE_TOKEN", "DPX_FT_STORE",
    "DPX_FT_PREFIX", "DPX_FT_GROUP", "DPX_FT_INCARNATION"};

std::string signal_name(int sig) {
  const char* n = sigabbrev_np(sig);
  return n ? "SIG" + std::string(n) : "signal " + std::to_string(sig);
}

}  // namespace

void install_signal_handlers() {
  if (pipe2(g_wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw std::runtime_error("dpxrun: pipe failed");
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaction(sig, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

int pending_signal() { return g_signal; }

Agent::Agent(Config config) : config_(std::move(config)), host_(hostname()) {
  program_ = find_program(config_.program[0]);
  if (program_.empty()) {
    throw UsageError("program '" + config_.program[0] + "' not found or not executable");
  }
  if (config_.nproc_per_node > 1 && std::getenv("OMP_NUM_THREADS") == nullptr) {
    say("setting OMP_NUM_THREADS=1 for each worker (the default with several workers per node, "
        "so they do not overload the machine); set it yourself to tune");
    setenv("OMP_NUM_THREADS", "1", 1);
  }
  make_log_dir();
}

Agent::~Agent() {
  stop(SIGKILL);
  if (temp_log_dir_ && succeeded_) {  // after a failure the summary points into it: keep it
    dpx::remove_tree(base_log_dir_);
  }
}

void Agent::make_log_dir() {
  if (config_.log_dir.empty()) {
    std::string tmpl = dpx::temp_dir() + "/torchelastic_XXXXXX";  // as torchrun's tempfile
    if (mkdtemp(tmpl.data()) == nullptr) {
      throw std::runtime_error("dpxrun: cannot create a temporary directory " + tmpl + ": " +
                               std::strerror(errno));
    }
    base_log_dir_ = tmpl;
    temp_log_dir_ = true;
  } else {
    base_log_dir_ = config_.log_dir;
    dpx::make_dirs(base_log_dir_);
  }
  std::string tmpl = base_log_dir_ + "/" + config_.rdzv_id + "_XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    throw std::runtime_error("dpxrun: cannot create a log directory under " + base_log_dir_ +
                             ": " + std::strerror(errno));
  }
  run_log_dir_ = tmpl;
  if (!temp_log_dir_) say("log directory set to: " + run_log_dir_);
}

std::vector<std::string> Agent::worker_env(const RoundInfo& r, int local_rank) const {
  std::set<std::string> ours(std::begin(kWorkerVars), std::end(kWorkerVars));
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    if (!ours.count(kv.substr(0, kv.find('=')))) env.push_back(kv);
  }
  const int rank = r.rank_offset + local_rank;
  auto put = [&env](const std::string& k, const std::string& v) { env.push_back(k + "=" + v); };
  put("RANK", std::to_string(rank));
  put("LOCAL_RANK", std::to_string(local_rank));
  put("WORLD_SIZE", std::to_string(r.world_size));
  put("LOCAL_WORLD_SIZE", std::to_string(config_.nproc_per_node));
  put("GROUP_RANK", std::to_string(r.group_rank));
  put("GROUP_WORLD_SIZE", std::to_string(r.group_world_size));
  put("ROLE_RANK", std::to_string(rank));
  put("ROLE_NAME", config_.role);
  put("ROLE_WORLD_SIZE", std::to_string(r.world_size));
  if (config_.fault_tolerant) {  // no job-wide group: dpx::ft::Manager makes its own
    put("DPX_FT_STORE", rdzv_->store_address());
    put("DPX_FT_PREFIX", rdzv_->key("ft/"));
    put("DPX_FT_GROUP", std::to_string(r.group_rank));
    put("DPX_FT_INCARNATION", std::to_string(r.restart_count));
  } else {
    put("MASTER_ADDR", r.master_addr);
    put("MASTER_PORT", std::to_string(r.master_port));
  }
  put("TORCHELASTIC_RESTART_COUNT", std::to_string(r.restart_count));
  put("TORCHELASTIC_MAX_RESTARTS", std::to_string(config_.max_restarts));
  put("TORCHELASTIC_RUN_ID", config_.rdzv_id);
  put("TORCHELASTIC_USE_AGENT_STORE", config_.is_static() ? "True" : "False");
  put("DPX_STORE_TOKEN", rdzv_->token());  // worker rank 0's store demands it
  put("TORCHELASTIC_ERROR_FILE", run_log_dir_ + "/attempt_" + std::to_string(r.restart_count) +
                                     "/" + std::to_string(local_rank) + "/error.json");
  for (const auto& [k, v] : dpx::torchrun_defaults()) {
    if (std::getenv(k.c_str()) == nullptr) put(k, v);
  }
  if (config_.heartbeat_timeout > 0) {
    put("DPX_AGENT_STORE", rdzv_->store_address());
    put("DPX_HEARTBEAT_KEY",
        rdzv_->key("r" + std::to_string(r.round) + "/hb/" + std::to_string(rank)));
    put("DPX_HEARTBEAT_TIMEOUT", std::to_string(config_.heartbeat_timeout));
  }
  return env;
}

void Agent::start_workers(const RoundInfo& r) {
  workers_.clear();
  beats_.clear();
  std::vector<LogPump::Source> sources;
  for (int lr = 0; lr < config_.nproc_per_node; ++lr) {
    const std::string dir = run_log_dir_ + "/attempt_" + std::to_string(r.restart_count) + "/" +
                            std::to_string(lr);
    dpx::make_dirs(dir);
    WorkerLaunch l;
    l.local_rank = lr;
    l.global_rank = r.rank_offset + lr;
    l.env = worker_env(r, lr);
    l.error_file = dir + "/error.json";
    ::unlink(l.error_file.c_str());  // a file left by an earlier round must not be quoted
    ::unlink((l.error_file + dpx::kHandlerMarkerSuffix).c_str());
    const int redirect = config_.redirects.for_rank(lr), tee = config_.tee.for_rank(lr);
    l.pipe_stdout = !(redirect & 1) || (tee & 1);
    l.pipe_stderr = !(redirect & 2) || (tee & 2);
    if (!l.pipe_stdout) l.stdout_file = dir + "/stdout.log";
    if (!l.pipe_stderr) l.stderr_file = dir + "/stderr.log";
    std::vector<std::string> argv = config_.program;
    argv[0] = program_;
    Worker w = start_worker(argv, l);
    const std::string prefix = "[" + config_.role + std::to_string(lr) + "]:";
    if (w.out_fd >= 0) {
      sources.push_back({w.out_fd, prefix, 1, (tee & 1) ? dir + "/stdout.log" : ""});
    }
    if (w.err_fd >= 0) {
      sources.push_back({w.err_fd, prefix, 2, (tee & 2) ? dir + "/stderr.log" : ""});
    }
    workers_.push_back(std::move(w));
  }
  pump_.start(std::move(sources));
}

void Agent::stop(int sig) {
  stop_workers(workers_, sig, sig == SIGKILL ? 0 : config_.stop_grace);
  pump_.stop(1.0);
}

bool Agent::check_heartbeats(const RoundInfo& r) {
  const double t = now();
  if (config_.heartbeat_timeout <= 0 || t - last_beat_check_ < config_.heartbeat_timeout / 10) {
    return false;
  }
  last_beat_check_ = t;
  bool hung = false;
  for (auto& w : workers_) {
    if (!w.running) continue;
    const std::string k = rdzv_->key("r" + std::to_string(r.round) + "/hb/" +
                                      std::to_string(w.global_rank));
    if (!rdzv_->store()->check({k})) continue;  // not beating (yet): not watched
    const std::string v = rdzv_->store()->get(k);
    Beat& b = beats_[w.global_rank];
    if (v != b.value || b.changed_at == 0) {
      b = {v, t};
    } else if (t - b.changed_at > config_.heartbeat_timeout) {
      stop_workers(workers_, SIGTERM, config_.stop_grace);  // sets exit status of everyone
      char reason[160];
      std::snprintf(reason, sizeof(reason),
                    "hung: no heartbeat for %.1f s (--heartbeat-timeout); dpxrun stopped it",
                    t - b.changed_at);
      failures_.push_back(make_failure(w, host_, reason));
      hung = true;
      break;
    }
  }
  return hung;
}

Agent::Outcome Agent::monitor(const RoundInfo& r) {
  while (true) {
    wait_or_signal(config_.monitor_interval);
    if (g_signal != 0) return Outcome::kSignal;
    bool all_ok = true;
    for (auto& w : workers_) {
      poll_worker(w);
      if (w.failed()) failures_.push_back(make_failure(w, host_, ""));
      all_ok = all_ok && !w.running && !w.failed();
    }
    if (!failures_.empty()) return Outcome::kFailed;
    if (all_ok) return Outcome::kSucceeded;
    if (check_heartbeats(r)) return Outcome::kFailed;
    if (config_.fault_tolerant) continue;  // no rounds: other nodes come and go (agent_ft.cpp)
    switch (rdzv_->poll()) {
      case GroupEvent::kRestart: return Outcome::kRestart;
      case GroupEvent::kMembershipChange: return Outcome::kMembershipChange;
      case GroupEvent::kJobFailed: return Outcome::kJobFailed;
      case GroupEvent::kNone: break;
    }
  }
}

int Agent::finish_failed(const std::string& why) {
  say("error: " + why);
  return 1;
}

int Agent::run() {
  if (config_.fault_tolerant) return run_fault_tolerant();
  const int code = run_rounds();
  // The store lives in this process: a failed job's other agents may still be using it for
  // their last words (Note [Lost nodes]); a successful one passed the exit barrier already.
  if (code != 0 && liveness_ && rdzv_->hosts_store()) {
    liveness_->await_others(round_.round, round_.members, round_.group_rank,
                            Liveness::kWindowSeconds + 3);
  }
  return code;
}

int Agent::run_rounds() {
  rdzv_ = std::make_unique<Rendezvous>(config_, [] { return g_signal != 0; });
  while (true) {
    RoundInfo r;
    try {
      r = rdzv_->next_round();
    } catch (const Rendezvous::Interrupted&) {
      say("got " + signal_name(g_signal) + " during the rendezvous; no workers were running");
      return 128 + g_signal;
    } catch (const JobFailedElsewhere& e) {
      return finish_failed(std::string("the job failed on another node: ") + e.what());
    }
    if (config_.max_nodes > 1) {
      if (!liveness_) liveness_ = std::make_unique<Liveness>(rdzv_->new_client(), rdzv_->key(""));
      liveness_->beat_as(r.round, r.group_rank);
    }
    round_ = r;
    failures_.clear();
    start_workers(r);
    Outcome outcome;
    try {
      outcome = monitor(r);
    } catch (const dpx::DistributedError& e) {
      stop(SIGTERM);
      return finish_failed(std::string("lost contact with the rendezvous store (its host agent "
                                       "died or the network is cut); stopped the local workers. ") +
                           e.what());
    }
    if (outcome == Outcome::kSucceeded) {
      pump_.stop(1.0);
      const FinishResult f = rdzv_->finish(config_.exit_barrier_timeout);
      if (f == FinishResult::kJobFailed) {
        return finish_failed("the job failed on another node: " + rdzv_->failure_elsewhere());
      }
      if (f == FinishResult::kRestart) {
        say("this node's workers finished, but another node restarts the group; re-joining");
        continue;
      }
      succeeded_ = true;
      return 0;
    }
    if (outcome == Outcome::kSignal) {
      const int sig = g_signal;
      say("got " + signal_name(sig) + "; forwarding it to the workers");
      stop(sig);
      return 128 + sig;
    }
    // Stop everything first (a failure's peers exit with it), then decide.
    stop(SIGTERM);
    if (outcome == Outcome::kJobFailed) {
      const std::string why = rdzv_->failure_elsewhere();  // while the store is surely there
      say_lost_nodes(r);
      return finish_failed("the job failed on another node: " + why);
    }
    if (outcome == Outcome::kRestart || outcome == Outcome::kMembershipChange) {
      say(outcome == Outcome::kRestart
              ? "another node restarts the group; re-joining"
              : "a new node is waiting to join; re-forming the group (not counted as a restart)");
      continue;
    }
    const int code = after_failure(r);
    if (code >= 0) return code;
  }
}

int Agent::after_failure(const RoundInfo& r) {
  const Failure& root = failures_.front();
  bool restart = false;
  try {
    restart = rdzv_->report_failure(failure_line(root));
  } catch (const dpx::DistributedError& e) {
    say(std::string("cannot reach the rendezvous store to restart: ") + e.what());
  }
  if (restart) {
    say("worker " + failure_line(root) + "; restarting the worker group (" +
        std::to_string(r.restart_count + 1) + " of --max-restarts " +
        std::to_string(config_.max_restarts) + ")");
    return -1;
  }
  say_lost_nodes(r);
  std::fprintf(stderr, "%s", failure_summary(config_.program[0], failures_).c_str());
  return 1;
}

void Agent::say_lost_nodes(const RoundInfo& r) {
  if (!liveness_ || r.members < 2) return;
  for (int i : liveness_->silent(r.round, r.members)) {
    if (i == r.group_rank) continue;
    say("lost " + rdzv_->describe_member(i) + ": its agent stopped answering the rendezvous "
        "store (no heartbeat for " + std::to_string(static_cast<int>(Liveness::kWindowSeconds)) +
        " s); the failures below follow from it. Restart the job without that host, or with "
        "--nnodes MIN:MAX and --max-restarts to go on without it");
  }
}

}  // namespace dpxrun
