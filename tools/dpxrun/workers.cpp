#include "dpxrun/workers.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace dpxrun {
namespace {

std::vector<char*> c_strings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// In the child, between fork and exec: async-signal-safe calls only (the agent has threads).
[[noreturn]] void exec_child(pid_t agent, char* const* argv, char* const* envp, int out_w,
                             int err_w, const char* out_file, const char* err_file) {
  setpgid(0, 0);                    // own group: stop_workers reaches the worker's children too
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // the agent dies, even by SIGKILL: the worker goes too
  if (getppid() != agent) _exit(1);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGPIPE, SIG_DFL);
  auto route = [](int target, int pipe_w, const char* file) {
    int fd = pipe_w;
    if (file != nullptr) fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0 && fd != target) dup2(fd, target);
  };
  route(1, out_w, out_file);
  route(2, err_w, err_file);
  execvpe(argv[0], argv, envp);
  const char* msg = "dpxrun: cannot execute the worker program: ";
  ssize_t ignored = write(2, msg, strlen(msg));
  ignored = write(2, strerror(errno), strlen(strerror(errno)));
  ignored = write(2, "\n", 1);
  (void)ignored;
  _exit(127);
}

void make_pipe(int fds[2]) {
  if (pipe2(fds, O_CLOEXEC) != 0) {
    throw std::runtime_error(std::string("dpxrun: pipe failed: ") + std::strerror(errno));
  }
}

}  // namespace

Worker start_worker(const std::vector<std::string>& argv, const WorkerLaunch& launch) {
  auto args = c_strings(argv);
  auto envp = c_strings(launch.env);
  int out[2] = {-1, -1}, err[2] = {-1, -1};
  if (launch.pipe_stdout) make_pipe(out);
  if (launch.pipe_stderr) make_pipe(err);
  const char* out_file = launch.stdout_file.empty() ? nullptr : launch.stdout_file.c_str();
  const char* err_file = launch.stderr_file.empty() ? nullptr : launch.stderr_file.c_str();
  const pid_t agent = getpid();
  const pid_t pid = fork();
  if (pid == 0) exec_child(agent, args.data(), envp.data(), out[1], err[1], out_file, err_file);
  for (int fd : {out[1], err[1]}) {
    if (fd >= 0) close(fd);
  }
  if (pid < 0) {
    for (int fd : {out[0], err[0]}) {
      if (fd >= 0) close(fd);
    }
    throw std::runtime_error(std::string("dpxrun: fork failed: ") + std::strerror(errno));
  }
  setpgid(pid, pid);  // also here, so that a stop right after start finds the group
  Worker w;
  w.local_rank = launch.local_rank;
  w.global_rank = launch.global_rank;
  w.pid = pid;
  w.out_fd = out[0];
  w.err_fd = err[0];
  w.error_file = launch.error_file;
  w.running = true;
  return w;
}

bool poll_worker(Worker& w) {
  if (!w.running) return false;
  int status = 0;
  if (waitpid(w.pid, &status, WNOHANG) != w.pid) return false;
  w.running = false;
  w.exit_time = std::time(nullptr);
  if (WIFEXITED(status)) {
    w.exit_code = WEXITSTATUS(status);
  } else {
    w.exit_code = -1;
    w.signal = WTERMSIG(status);
  }
  return true;
}

void stop_workers(std::vector<Worker>& workers, int sig, double grace) {
  for (auto& w : workers) {
    if (w.running) kill(-w.pid, sig);
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<long>(grace * 1e3));
  bool any = true;
  while (any && std::chrono::steady_clock::now() < deadline) {
    any = false;
    for (auto& w : workers) {
      poll_worker(w);
      any = any || w.running;
    }
    if (any) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (auto& w : workers) {
    if (!w.group_killed) kill(-w.pid, SIGKILL);  // the leader, or children it left behind
    w.group_killed = true;
    if (w.running) {
      int status = 0;
      waitpid(w.pid, &status, 0);
      w.running = false;
      w.exit_time = std::time(nullptr);
      w.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      w.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    }
  }
}

std::string describe_exit(const Worker& w) {
  if (w.signal != 0) {
    const char* name = sigabbrev_np(w.signal);
    return "signal " + (name ? "SIG" + std::string(name) : std::string("?")) + " (" +
           std::to_string(w.signal) + ")";
  }
  return "exitcode " + std::to_string(w.exit_code);
}

std::string find_program(const std::string& program) {
  auto ok = [](const std::string& p) {
    struct stat st {};
    return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
  };
  if (program.find('/') != std::string::npos) return ok(program) ? program : "";
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    const std::string p = (dir.empty() ? "." : dir) + "/" + program;
    if (ok(p)) return p;
  }
  return "";
}

}  // namespace dpxrun
