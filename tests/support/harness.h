// Test harness for the multirank (threads as ranks) and multiproc (forked processes) tiers.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dpx/comm/init.h"
#include "dpx/comm/process_group.h"
#include "dpx/store/store.h"
#include "dpx/runtime/process.h"
#include "support/temp_dir.h"  // read_file

namespace dpx::test {

// Seconds on the steady clock since `start` (how long a fault took to surface).
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Runs fn(rank) on `world` threads, in a process set up by dpx::init_process, and waits for
// all; returns the first exception's message per rank ("" when that rank succeeded). gtest
// assertions inside fn are fine (they are thread-safe).
std::vector<std::string> run_threads(int world, const std::function<void(int rank)>& fn);

struct ProcResult {
  int rank = -1;
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  bool timed_out = false;
  std::string output;  // the child's stdout and stderr; for a hung child, where it hung
  std::string where_stuck;  // scripts/where_stuck.sh on a child that outlived the timeout
  bool ok() const { return exit_code == 0 && !timed_out; }
};

struct ProcOptions {
  std::chrono::milliseconds timeout = std::chrono::seconds(120);
};

// Forks `world` children running fn(rank), after making the process-wide choices a training
// program gets from init_process_group (dpx::init_process), which the children inherit. A child
// exits 0 when fn returns without a gtest failure, 1 on failure or exception (message on
// stderr). Children still running at the timeout are killed; none outlives the call, even if
// the parent test fails.
std::vector<ProcResult> run_processes(int world, const std::function<void(int rank)>& fn,
                                      ProcOptions options = {});


// Ends the calling rank at once, as a crash would (SIGKILL: no handlers, no cleanup).
[[noreturn]] void kill_this_rank();

// Asserts that every rank succeeded, printing the outputs of those that did not.
void expect_all_ok(const std::vector<ProcResult>& results);

// Runs fn in one forked child and asserts that it succeeded: for tests of process-wide settings.
// Neither this process nor the child has made any process-wide choice (dpx::init_process).
void run_in_child(const std::function<void()>& fn);

// The CUDA devices a forked child process sees. The test process itself never touches CUDA: a
// child forked after it had would be unable to use it.
int gpus_seen_by_a_child();

// A TCP store server on a free port (port 0), hosted by the test process; ranks connect
// to it with client(). Fork-safe: children only ever open new client connections.
class StoreServer {
 public:
  explicit StoreServer(std::chrono::milliseconds timeout = std::chrono::seconds(60));
  std::uint16_t port() const { return server_->port(); }
  std::shared_ptr<Store> client(std::chrono::milliseconds timeout = std::chrono::seconds(60)) const;
  std::shared_ptr<Store> server() const { return server_; }

 private:
  std::shared_ptr<Store> server_;
};

// init_process_group's options for rank `rank` of `world` over tcp://127.0.0.1:port, rank 0
// serving the store.
InitOptions over_tcp(int port, int rank, int world, const std::string& backend,
                     std::chrono::milliseconds timeout = std::chrono::seconds(15));

// Options of a group whose collectives time out after `timeout`.
ProcessGroup::Options with_timeout(std::chrono::milliseconds timeout);

// A single-rank gloo group made by init_process_group, with `process` as InitOptions::process.
std::shared_ptr<ProcessGroup> init_single_rank(std::optional<ProcessOptions> process);

// The backends the DDP and fault tests run on (the reducer runs the same code over any group).
std::vector<std::string> backends();

// backends(), and the hierarchical backend, which on one host is shm inside plus a flat gloo
// group: what the every-op collective tests run on.
std::vector<std::string> host_backends();

// Runs fn(rank, group) in `world` processes of each of backends() in turn, over a fresh store,
// with collectives that time out after 30 s; a failure names the backend.
void on_each_backend(int world,
                     const std::function<void(int rank, std::shared_ptr<ProcessGroup> pg)>& fn);

}  // namespace dpx::test
