#include "support/harness.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <fstream>
#include <sstream>
#include <thread>

#include "dpx/comm/init.h"
#include "dpx/runtime/cuda.h"
#include "dpx/runtime/process.h"

namespace dpx::test {
namespace {

// The ranks of these tiers (and the test process that hosts their store) are set up as
// init_process_group sets up a training process: SIGPIPE ignored, DPX_MALLOC's policy applied.
// The isolated tier, which tests those choices, never calls the helpers below that do this.
void as_training_process() { init_process(); }

[[noreturn]] void run_child(int rank, const std::function<void(int)>& fn, const std::string& log) {
  int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd >= 0) {
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::close(fd);
  }
  int code = 0;
  try {
    fn(rank);
    code = ::testing::Test::HasFailure() ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d threw: %s\n", rank, e.what());
    code = 1;
  } catch (...) {
    std::fprintf(stderr, "rank %d threw a non-std exception\n", rank);
    code = 1;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  ::_exit(code);  // no atexit handlers or destructors of the parent's state
}

}  // namespace

std::vector<std::string> run_threads(int world, const std::function<void(int)>& fn) {
  as_training_process();
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        if (errors[r].empty()) errors[r] = "exception with empty message";
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

namespace {

// Where a hung rank is, each thread's stack among it (scripts/where_stuck.sh, run before the rank
// is killed), so that a test that hangs says where and not only that it did.
std::string where_stuck(pid_t pid) {
  const std::string cmd = "timeout 20 bash '" DPX_SOURCE_DIR "/scripts/where_stuck.sh' " +
                          std::to_string(pid) + " 8 2>&1";
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    ::pclose(p);
  }
  return out;
}

// Forks the ranks; no process-wide choice is made here (run_in_child needs none).
std::vector<ProcResult> fork_ranks(int world, const std::function<void(int)>& fn,
                                   ProcOptions options) {
  char dir_template[] = "/tmp/dpx-test-XXXXXX";
  std::string dir = ::mkdtemp(dir_template);
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids(world, -1);
  std::vector<ProcResult> results(world);
  auto kill_all = [&pids] {
    for (pid_t& p : pids) {
      if (p > 0) {
        ::kill(p, SIGKILL);
        ::waitpid(p, nullptr, 0);
        p = -1;
      }
    }
  };
  // Kills whatever is still running, whatever way this function is left.
  struct Reaper {
    std::function<void()> fn;
    ~Reaper() { fn(); }
  } reaper{kill_all};
  for (int r = 0; r < world; ++r) {
    results[r].rank = r;
    std::string log = dir + "/rank" + std::to_string(r) + ".log";
    pid_t pid = ::fork();
    if (pid < 0) {
      throw std::runtime_error("fork failed");
    }
    if (pid == 0) {
      run_child(r, fn, log);
    }
    pids[r] = pid;
  }
  auto deadline = std::chrono::steady_clock::now() + options.timeout;
  int running = world;
  while (running > 0) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < world; ++r) {
        if (pids[r] != pid) continue;
        pids[r] = -1;
        --running;
        if (WIFEXITED(status)) {
          results[r].exit_code = WEXITSTATUS(status);
        } else if (WIFSIGNALED(status)) {
          results[r].signal = WTERMSIG(status);
        }
      }
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < world; ++r) {
        if (pids[r] <= 0) continue;
        results[r].timed_out = true;
        results[r].where_stuck = where_stuck(pids[r]);
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill_all();
  for (int r = 0; r < world; ++r) {
    std::string log = dir + "/rank" + std::to_string(r) + ".log";
    results[r].output = read_file(log);
    if (results[r].timed_out) results[r].output += "\n--- where it hung:\n" + results[r].where_stuck;
    ::unlink(log.c_str());
  }
  ::rmdir(dir.c_str());
  return results;
}

}  // namespace

std::vector<ProcResult> run_processes(int world, const std::function<void(int)>& fn,
                                      ProcOptions options) {
  as_training_process();  // inherited by the children
  return fork_ranks(world, fn, options);
}

void run_in_child(const std::function<void()>& fn) {
  expect_all_ok(fork_ranks(1, [&](int) { fn(); }, {}));  // a pristine process: no choices made
}

int gpus_seen_by_a_child() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(std::min(cuda::device_count(), 100));
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 0;
}

void kill_this_rank() {
  ::kill(::getpid(), SIGKILL);
  ::pause();
  ::_exit(137);
}

void expect_all_ok(const std::vector<ProcResult>& results) {
  for (const auto& r : results) {
    EXPECT_TRUE(r.ok()) << "rank " << r.rank << ": exit " << r.exit_code << " signal " << r.signal
                        << (r.timed_out ? " (timed out)" : "") << "\n"
                        << r.output;
  }
}

StoreServer::StoreServer(std::chrono::milliseconds timeout) {
  as_training_process();
  TcpStoreOptions o;
  o.is_server = true;
  o.port = 0;
  o.timeout = timeout;
  server_ = Store::tcp(o);
}

std::shared_ptr<Store> StoreServer::client(std::chrono::milliseconds timeout) const {
  TcpStoreOptions o;
  o.port = port();
  o.timeout = timeout;
  return Store::tcp(o);
}

InitOptions over_tcp(int port, int rank, int world, const std::string& backend,
                     std::chrono::milliseconds timeout) {
  InitOptions o;
  o.backend = backend;
  o.timeout = timeout;
  o.init_method = "tcp://127.0.0.1:" + std::to_string(port) + "?rank=" + std::to_string(rank) +
                  "&world_size=" + std::to_string(world);
  return o;
}

ProcessGroup::Options with_timeout(std::chrono::milliseconds timeout) {
  ProcessGroup::Options o;
  o.timeout = timeout;
  return o;
}

std::shared_ptr<ProcessGroup> init_single_rank(std::optional<ProcessOptions> process) {
  InitOptions o;
  o.backend = "gloo";
  o.store = Store::hash();
  o.rank = 0;
  o.world_size = 1;
  o.process = process;
  return init_process_group(o);
}

std::vector<std::string> backends() { return {"gloo", "shm"}; }

std::vector<std::string> host_backends() { return {"gloo", "shm", "hierarchical"}; }

void on_each_backend(int world,
                     const std::function<void(int rank, std::shared_ptr<ProcessGroup> pg)>& fn) {
  for (const auto& backend : backends()) {
    SCOPED_TRACE("backend " + backend);
    StoreServer server;
    expect_all_ok(run_processes(world, [&](int rank) {
      fn(rank, new_process_group(backend, server.client(), rank, world,
                                 with_timeout(std::chrono::seconds(30))));
    }));
  }
}

}  // namespace dpx::test
