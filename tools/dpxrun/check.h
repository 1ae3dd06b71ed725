// dpxrun --check: a pre-flight run of the job's launch, from every node, before any training
// (docs/launcher.md, "Pre-flight check").
//
//   1. The agent (check_node): can this node serve or reach the rendezvous store at all (a
//      --master-addr that is not this host's on node 0, a port already taken, an endpoint
//      that does not answer)? Problems end the check here, before the rendezvous waits.
//   2. The rendezvous as for training; then each worker slot runs dpxrun itself again with
//      DPX_CHECK_WORKER=1 (run_check_worker), which reports the versions, reaches the store,
//      all-reduces one number on gloo (every rank reaches every other) and on shm where the
//      job would use it, compares the shm segment with /dev/shm and memory, and names the
//      address each backend listens on.
// Every finding is one line, "dpxrun --check: ..."; problems say "PROBLEM" and what to do.
#pragma once

#include <string>
#include <vector>

#include "dpxrun/config.h"

namespace dpxrun {

constexpr const char* kCheckWorkerVariable = "DPX_CHECK_WORKER";
constexpr double kCheckTimeout = 15;  // seconds each step of the check may take

// Step 1; returns the problem lines (empty when the node can go on).
std::vector<std::string> check_node(const Config& config);
// Step 1 as main() runs it: prints the problems, and when there are none sets
// DPX_CHECK_WORKER=1 for the workers to come; whether the node can go on.
bool check_node_before_rendezvous(const Config& config);
// The last line of a check, from the agent's exit code.
void say_check_result(int exit_code);

// Step 2, in a worker: 0 when every check passed, 3 when one found a problem.
int run_check_worker();

}  // namespace dpxrun
