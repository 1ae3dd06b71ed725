#include "support/launcher_harness.h"

#include "support/harness.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace dpx::test {
std::string dpxrun_path() { return std::string(DPX_BINARY_DIR) + "/tools/dpxrun/dpxrun"; }
std::vector<std::string> dpxrun_cmd(std::vector<std::string> flags, std::vector<std::string> worker,
                                    std::vector<std::string> prefix) {
  std::vector<std::string> out = std::move(prefix);
  out.push_back(dpxrun_path());
  out.insert(out.end(), flags.begin(), flags.end());
  out.push_back(test_worker_path());
  out.insert(out.end(), worker.begin(), worker.end());
  return out;
}

std::string test_worker_path() { return std::string(DPX_BINARY_DIR) + "/tests/dpx_test_worker"; }

Launch::Launch(const std::vector<std::string>& argv, LaunchOptions options) {
  char tmpl[] = "/tmp/dpx-launch-XXXXXX";
  int fd = mkstemp(tmpl);
  if (fd < 0) throw std::runtime_error("mkstemp failed");
  log_ = tmpl;
  char tmp_tmpl[] = "/tmp/dpx-launch-tmp-XXXXXX";
  if (mkdtemp(tmp_tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
  tmpdir_ = tmp_tmpl;
  options.set_env.emplace("TMPDIR", tmpdir_);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    setpgid(0, 0);
    for (const auto& [k, v] : options.set_env) setenv(k.c_str(), v.c_str(), 1);
    for (const auto& k : options.unset_env) unsetenv(k.c_str());
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
    execvp(args[0], args.data());
    std::fprintf(stderr, "exec %s failed\n", args[0]);
    _exit(127);
  }
  setpgid(pid_, pid_);
  close(fd);
}

Launch::~Launch() {
  if (!reaped_) {
    kill(-pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  unlink(log_.c_str());
  remove_tree(tmpdir_);
}

bool Launch::running() {
  if (reaped_) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) != pid_) return true;
  reaped_ = true;
  result_.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result_.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  kill(-pid_, SIGKILL);  // anything the launcher left in its group
  return false;
}

LaunchResult Launch::wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (running()) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(-pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      reaped_ = true;
      result_.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  result_.output = read_file(log_);
  return result_;
}

std::string Launch::output_so_far() const { return read_file(log_); }

LaunchResult run_launcher(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                          LaunchOptions options) {
  Launch l(argv, std::move(options));
  return l.wait(timeout);
}

std::vector<std::map<std::string, std::string>> read_worker_envs(const std::string& dir) {
  std::vector<std::map<std::string, std::string>> out;
  for (const auto& name : list_dir(dir)) {
    if (name.rfind("env_", 0) != 0 || name.find(".tmp") != std::string::npos) continue;
    std::map<std::string, std::string> env;
    std::stringstream ss(read_file(dir + "/" + name));
    std::string line;
    while (std::getline(ss, line)) {
      auto eq = line.find('=');
      if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
    }
    out.push_back(env);
  }
  return out;
}

int free_tcp_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

bool port_listening(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

bool process_exists(pid_t pid) {
  struct stat st {};
  if (stat(("/proc/" + std::to_string(pid)).c_str(), &st) != 0) return false;
  // A zombie is gone for our purposes: it runs nothing and holds no resources but its pid.
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string pid_s, comm, state;
  in >> pid_s >> comm >> state;
  return state != "Z";
}

}  // namespace dpx::test
