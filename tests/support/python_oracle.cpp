#include "support/python_oracle.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "dpx/runtime/files.h"

namespace dpx::test {
namespace {

PythonExit run_once(const PythonScript& s) {
  // Everything the child needs is built before fork: it only redirects, and execs.
  std::vector<std::string> words = {s.python, DPX_SOURCE_DIR "/tests/python/" + s.script};
  words.insert(words.end(), s.args.begin(), s.args.end());
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("run_python: fork failed");
  if (pid == 0) {
    ::setpgid(0, 0);
    if (!s.log.empty()) {
      const int fd = ::open(s.log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
        ::close(fd);
      }
    }
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here, so the group exists before any kill below
  PythonExit out;
  const auto deadline = std::chrono::steady_clock::now() + s.timeout;
  // Waited for without reaping (WNOWAIT), so the group's id cannot be reused before it is killed.
  siginfo_t info{};
  while (::waitid(P_PID, pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      out.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(-pid, SIGKILL);  // the script at its timeout, or ranks it left behind
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!out.timed_out && WIFEXITED(status)) out.exit_code = WEXITSTATUS(status);
  return out;
}

}  // namespace

bool python_runs(const std::string& python, const std::string& code) {
  return std::system((python + " -c '" + code + "' >/dev/null 2>&1").c_str()) == 0;
}

std::string why_python_lacks(const std::string& python, const std::string& module) {
  if (python_runs(python, "import " + module)) return "";
  const std::string whose = python == DPX_PYTHON
                                ? " (the oracle of LibTorch " DPX_TORCH_VERSION ")"
                                : "";
  return "SKIPPED: " + python + whose + " cannot import " + module +
         "; scripts/setup.sh installs it";
}

PythonExit run_python(const PythonScript& s) {
  PythonExit out;
  for (int attempt = 1; attempt <= s.attempts; ++attempt) {
    if (s.before_attempt) s.before_attempt();
    if (!s.log.empty()) {
      std::ofstream(s.log, std::ios::app)
          << "--- " << s.script << ", attempt " << attempt << " of " << s.attempts << "\n";
    }
    out = run_once(s);
    if (out.ok()) break;
    if (!s.log.empty()) {
      std::ofstream(s.log, std::ios::app)
          << "--- " << (out.timed_out ? "killed after " + std::to_string(s.timeout.count()) + " s"
                                      : "exit " + std::to_string(out.exit_code))
          << "\n";
    }
  }
  return out;
}

::testing::AssertionResult close_to_pytorch(const torch::Tensor& ours, const torch::Tensor& theirs,
                                            double rtol, double atol) {
  if (ours.sizes() != theirs.sizes()) {
    return ::testing::AssertionFailure()
           << "sizes " << ours.sizes() << ", PyTorch's " << theirs.sizes();
  }
  if (torch::allclose(ours, theirs, rtol, atol)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "differs from PyTorch's by " << (ours - theirs).abs().max().item<double>()
         << " (max abs diff; rtol " << rtol << ", atol " << atol << ")";
}

std::string python_output_once(const PythonScript& s) {
  std::ifstream in(DPX_SOURCE_DIR "/tests/python/" + s.script);
  std::ostringstream key;
  key << in.rdbuf() << '\0' << s.python;
  for (const auto& a : s.args) key << '\0' << a;
  char hash[32];
  std::snprintf(hash, sizeof(hash), "%016zx", std::hash<std::string>{}(key.str()));
  const std::string cache = DPX_BINARY_DIR "/test-cache";
  const std::string dir = cache + "/" + s.script + "-" + hash;
  make_dirs(cache);
  const int lock = ::open((dir + ".lock").c_str(), O_CREAT | O_RDWR, 0600);
  if (lock < 0 || ::flock(lock, LOCK_EX) != 0) {
    throw std::runtime_error("python_output_once: cannot lock " + dir + ".lock");
  }
  std::string out = dir;
  if (!path_exists(dir + "/.complete")) {  // a run cut short leaves no .complete: start afresh
    remove_tree(dir);
    make_dirs(dir);
    PythonScript run = s;
    run.args.push_back(dir);
    if (run_python(run).ok()) {
      std::ofstream(dir + "/.complete") << "written by " << s.script << "\n";
    } else {
      out.clear();
    }
  }
  ::flock(lock, LOCK_UN);
  ::close(lock);
  return out;
}

}  // namespace dpx::test
