// The local worker processes of one attempt: start (fork/exec with the full environment), poll,
// stop (SIGTERM to each worker's process group, SIGKILL after a grace period).
#pragma once

#include <sys/types.h>

#include <ctime>
#include <string>
#include <vector>

namespace dpxrun {

struct WorkerLaunch {
  int local_rank = 0;
  int global_rank = 0;
  std::vector<std::string> env;  // the complete environment, "KEY=value"
  // Where each stream goes: a file path (written by the worker directly), else a pipe to the
  // agent (pipe_* true), which prefixes lines on the console and tees them to a file.
  std::string stdout_file, stderr_file;
  bool pipe_stdout = true, pipe_stderr = true;
  std::string error_file;
};

struct Worker {
  int local_rank = 0;
  int global_rank = 0;
  pid_t pid = -1;
  int out_fd = -1;  // read ends of the pipes, or -1
  int err_fd = -1;
  std::string error_file;
  bool running = false;
  bool group_killed = false;  // the final SIGKILL to the process group was sent
  int exit_code = 0;  // -1 when killed by a signal
  int signal = 0;
  std::time_t exit_time = 0;
  bool failed() const { return !running && (exit_code != 0 || signal != 0); }
};

// Throws std::runtime_error when fork or the pipes fail; a program that cannot be executed
// shows up as a worker exiting with 127 and a message on its stderr.
Worker start_worker(const std::vector<std::string>& argv, const WorkerLaunch& launch);

// Reaps the worker if it exited; true when it did just now.
bool poll_worker(Worker& worker);

// Sends `sig` to every running worker's process group, waits up to `grace` seconds, then
// SIGKILLs what is left (grandchildren included) and reaps everyone.
void stop_workers(std::vector<Worker>& workers, int sig, double grace);

// "exitcode 1" / "signal SIGKILL (9)".
std::string describe_exit(const Worker& worker);

// Resolves PROGRAM like execvp would; empty when it is not found or not executable.
std::string find_program(const std::string& program);

}  // namespace dpxrun
