#include "dpx/launch/spawn.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include "dpx/store/store.h"
#include "dpx/launch/error_handler.h"

namespace dpx {
namespace {

struct Child {
  pid_t pid = -1;
  int exit_code = 0;
  int signal = 0;
  bool done = false;
};

std::string make_spawn_dir() {
  char tmpl[] = "/tmp/dpx-spawn-XXXXXX";
  TORCH_CHECK(::mkdtemp(tmpl) != nullptr, "dpx::spawn: cannot create a temporary directory: ",
              std::strerror(errno));
  return tmpl;
}

std::string error_file(const std::string& dir, int rank) {
  return dir + "/error_" + std::to_string(rank) + ".json";
}

// The message of a torchelastic error file ({"message": {"message": ...}}); "" when there is
// none or the file is not such JSON.
std::string read_message(const std::string& path) {
  std::ifstream in(path);
  const auto file = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!file.is_object()) return "";
  const auto outer = file.find("message");
  if (outer == file.end() || !outer->is_object()) return "";
  const auto inner = outer->find("message");
  return inner != outer->end() && inner->is_string() ? inner->get<std::string>() : "";
}

[[noreturn]] void run_child(int rank, int nprocs, std::uint16_t port, const std::string& dir,
                            pid_t parent, const std::function<void(int, int)>& fn) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) {
    ::_exit(1);
  }
  const std::string r = std::to_string(rank), w = std::to_string(nprocs);
  const std::pair<const char*, std::string> vars[] = {
      {"RANK", r}, {"LOCAL_RANK", r}, {"WORLD_SIZE", w}, {"LOCAL_WORLD_SIZE", w},
      {"GROUP_RANK", "0"}, {"GROUP_WORLD_SIZE", "1"}, {"ROLE_RANK", r}, {"ROLE_NAME", "default"},
      {"ROLE_WORLD_SIZE", w}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port)},
      {"TORCHELASTIC_RESTART_COUNT", "0"}, {"TORCHELASTIC_MAX_RESTARTS", "0"},
      {"TORCHELASTIC_RUN_ID", "spawn-" + std::to_string(parent)},
      {"TORCHELASTIC_USE_AGENT_STORE", "True"},
      {"TORCHELASTIC_ERROR_FILE", error_file(dir, rank)}};
  for (const auto& [k, v] : vars) {
    ::setenv(k, v.c_str(), 1);
  }
  install_error_handler();
  int code = 0;
  try {
    fn(rank, nprocs);
  } catch (const std::exception& e) {
    record_error(e);
    std::fprintf(stderr, "dpx::spawn: rank %d failed: %s\n", rank, e.what());
    code = 1;
  } catch (...) {
    record_error("exception of a type not derived from std::exception");
    code = 1;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  ::_exit(code);  // the parent's atexit handlers and static objects are not ours to run
}

void stop_all(std::vector<Child>& children, std::chrono::milliseconds grace) {
  for (auto& c : children) {
    if (!c.done) ::kill(c.pid, SIGTERM);
  }
  const auto deadline = std::chrono::steady_clock::now() + grace;
  for (auto& c : children) {
    while (!c.done) {
      int status = 0;
      if (::waitpid(c.pid, &status, WNOHANG) == c.pid) {
        c.done = true;
      } else if (std::chrono::steady_clock::now() >= deadline) {
        ::kill(c.pid, SIGKILL);
        ::waitpid(c.pid, &status, 0);
        c.done = true;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
  }
}

std::string failure_text(const Child& c, int rank, const std::string& message) {
  std::string s = "dpx::spawn: process " + std::to_string(rank) + " (pid " +
                  std::to_string(c.pid) + ") ";
  if (c.signal != 0) {
    s += "was killed by signal " + std::string(sigabbrev_np(c.signal) ? "SIG" : "") +
         (sigabbrev_np(c.signal) ? sigabbrev_np(c.signal) : std::to_string(c.signal));
  } else {
    s += "exited with code " + std::to_string(c.exit_code);
  }
  return message.empty() ? s : s + " with the following error:\n" + message;
}

// Waits for every child; returns the rank of the first failure, or -1.
int wait_all(std::vector<Child>& children, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  size_t running = children.size();
  while (running > 0) {
    bool reaped = false;
    for (size_t r = 0; r < children.size(); ++r) {
      Child& c = children[r];
      int status = 0;
      // Only our own children: waitpid(-1) would steal the caller's other children.
      if (c.done || ::waitpid(c.pid, &status, WNOHANG) != c.pid) continue;
      c.done = true;
      reaped = true;
      --running;
      c.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      c.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      if (c.exit_code != 0) return static_cast<int>(r);
    }
    if (reaped) continue;
    if (std::chrono::steady_clock::now() >= deadline) {
      throw TimeoutError("dpx::spawn: the workers did not finish within " +
                         std::to_string(timeout.count()) + " ms; all were stopped");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return -1;
}

}  // namespace

void spawn(int nprocs, const std::function<void(int, int)>& fn, SpawnOptions options) {
  TORCH_CHECK(nprocs >= 1, "dpx::spawn: nprocs must be at least 1, got ", nprocs);
  TORCH_CHECK(fn != nullptr, "dpx::spawn: the function is empty");
  TcpStoreOptions so;
  so.is_server = true;  // the agent store: workers connect with TORCHELASTIC_USE_AGENT_STORE
  so.c10d_protocol = true;  // which speaks c10d's protocol (Note [Agent store] in init.cpp)
  so.port = 0;
  auto store = Store::tcp(so);
  const std::string dir = make_spawn_dir();
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<Child> children(nprocs);
  const pid_t parent = ::getpid();
  for (int r = 0; r < nprocs; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      run_child(r, nprocs, store->port(), dir, parent, fn);
    }
    if (pid < 0) {
      stop_all(children, options.stop_grace);
      TORCH_CHECK(false, "dpx::spawn: fork failed: ", std::strerror(errno));
    }
    children[r].pid = pid;
  }
  int failed = -1;
  try {
    failed = wait_all(children, options.timeout);
  } catch (...) {
    stop_all(children, options.stop_grace);
    throw;
  }
  stop_all(children, options.stop_grace);
  std::string message;
  if (failed >= 0) {
    message = read_message(error_file(dir, failed));
  }
  for (int r = 0; r < nprocs; ++r) ::unlink(error_file(dir, r).c_str());
  ::rmdir(dir.c_str());
  if (failed >= 0) {
    const Child& c = children[failed];
    throw ProcessFailedError(failure_text(c, failed, message), failed, c.exit_code, c.signal);
  }
}

}  // namespace dpx
