#include "support/bounded_child.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <new>
#include <thread>

namespace dpx::test {
namespace {

constexpr int kEscaped = 125, kBadAlloc = 124;
constexpr size_t kMaxMessage = 4096;

size_t address_space_now() {
  size_t pages = 0;
  std::ifstream("/proc/self/statm") >> pages;
  return pages * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

[[noreturn]] void child(const std::function<int(std::string&)>& body, const ChildLimits& limits,
                        int out) {
  const rlimit no_core{0, 0};  // a crash is reported by its signal, without a core file
  ::setrlimit(RLIMIT_CORE, &no_core);
  const rlimit cpu{static_cast<rlim_t>(limits.cpu_seconds),
                   static_cast<rlim_t>(limits.cpu_seconds + 1)};
  ::setrlimit(RLIMIT_CPU, &cpu);
  const rlim_t as = address_space_now() + limits.extra_address_space;
  const rlimit memory{as, as};
  ::setrlimit(RLIMIT_AS, &memory);
  std::string message;
  int code = kEscaped;
  try {
    code = body(message);
  } catch (const std::bad_alloc& e) {
    message = std::string("std::bad_alloc: ") + e.what();
    code = kBadAlloc;
  } catch (const std::exception& e) {
    message = e.what();
  }
  const size_t n = std::min(message.size(), kMaxMessage);
  if (n > 0 && ::write(out, message.data(), n) < 0) code = kEscaped;
  ::_exit(code);
}

}  // namespace

std::string ChildResult::describe() const {
  std::string s;
  switch (kind) {
    case kExited: s = "exited " + std::to_string(code); break;
    case kSignaled: s = std::string("killed by signal ") + ::strsignal(signal); break;
    case kTimedOut: s = "timed out (killed)"; break;
    case kOutOfMemory: s = "ran out of its memory limit"; break;
  }
  s += " after " + std::to_string(seconds) + " s";
  if (!message.empty()) s += ": " + message.substr(0, 500);
  return s;
}

ChildResult run_bounded(const std::function<int(std::string& message)>& body,
                        const ChildLimits& limits) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("run_bounded: pipe failed");
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("run_bounded: fork failed");
  if (pid == 0) {
    ::close(fds[0]);
    child(body, limits, fds[1]);
  }
  ::close(fds[1]);
  ChildResult r;
  int status = 0;
  const auto deadline = start + std::chrono::duration<double>(limits.wall_seconds);
  auto pause = std::chrono::microseconds(100);
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      r.kind = ChildResult::kTimedOut;
      break;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(20000));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  char buf[kMaxMessage];
  const ssize_t n = ::read(fds[0], buf, sizeof(buf));
  if (n > 0) r.message.assign(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  if (r.kind == ChildResult::kTimedOut) return r;
  if (WIFSIGNALED(status)) {
    r.kind = ChildResult::kSignaled;
    r.signal = WTERMSIG(status);
  } else {
    r.code = WEXITSTATUS(status);
    if (r.code == kBadAlloc) r.kind = ChildResult::kOutOfMemory;
  }
  return r;
}

}  // namespace dpx::test
