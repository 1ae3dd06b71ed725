// What went wrong with a worker, read from its exit status and its torchelastic error file, and
// the summary dpxrun prints when the job fails (laid out as torchrun's).
#pragma once

#include <sys/types.h>

#include <ctime>
#include <string>
#include <vector>

#include "dpxrun/workers.h"

namespace dpxrun {

struct Failure {
  int rank = -1;
  int local_rank = -1;
  std::string host;
  pid_t pid = -1;
  int exit_code = 0;  // torchrun's convention: -signal when killed by a signal
  int signal = 0;
  std::time_t time = 0;
  std::string error_file;  // empty when the worker wrote none
  std::string message;
};

// `reason` replaces what the exit status says (e.g. a hung worker that dpxrun killed).
Failure make_failure(const Worker& worker, const std::string& host, const std::string& reason);

// {"message": "..."} or {"message": {"message": "...", "extraInfo": {"timestamp": "..."}}}.
// Returns false when the file is absent or not such JSON.
bool read_error_file(const std::string& path, std::string& message, std::time_t& timestamp);

// failures[0] is the root cause (the first observed failure).
std::string failure_summary(const std::string& program, const std::vector<Failure>& failures);
// One line for the other agents: "rank 3 (host h) exitcode 1: message".
std::string failure_line(const Failure& failure);

}  // namespace dpxrun
