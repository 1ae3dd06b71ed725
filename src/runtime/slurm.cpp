// What srun tells a task (dpx/runtime/slurm.h), and Slurm's list syntaxes it is written in.
#include "dpx/runtime/slurm.h"

#include <c10/util/Exception.h>

#include <cstdlib>

#include "runtime/env_read.h"
#include "runtime/scheduler_env.h"

namespace dpx::detail {
namespace {

// "01-03" -> 01 02 03; "7" -> 7. Widths follow the first bound's digits.
void expand_range(const std::string& range, const std::string& list,
                  std::vector<std::string>& out) {
  const auto dash = range.find('-');
  const std::string lo = range.substr(0, dash);
  const std::string hi = dash == std::string::npos ? lo : range.substr(dash + 1);
  const bool digits = !lo.empty() && !hi.empty() &&
                      lo.find_first_not_of("0123456789") == std::string::npos &&
                      hi.find_first_not_of("0123456789") == std::string::npos;
  TORCH_CHECK(digits && lo.size() <= 9 && hi.size() <= 9, "Slurm host list '", list,
              "': '", range, "' is not a number or a range of numbers");
  const long a = std::stol(lo), b = std::stol(hi);
  TORCH_CHECK(a <= b && b - a < 100000, "Slurm host list '", list, "': bad range '", range, "'");
  for (long i = a; i <= b; ++i) {
    std::string n = std::to_string(i);
    if (n.size() < lo.size()) n.insert(0, lo.size() - n.size(), '0');
    out.push_back(std::move(n));
  }
}

// One host pattern (no top-level comma): "rack[1-2]-n[01-02]".
void expand_one(const std::string& pattern, const std::string& list,
                std::vector<std::string>& out) {
  const auto open = pattern.find('[');
  if (open == std::string::npos) {
    out.push_back(pattern);
    return;
  }
  const auto close = pattern.find(']', open);
  TORCH_CHECK(close != std::string::npos, "Slurm host list '", list, "': unclosed '['");
  std::vector<std::string> numbers;
  const std::string inside = pattern.substr(open + 1, close - open - 1);
  std::size_t start = 0;
  while (start <= inside.size()) {
    const auto comma = inside.find(',', start);
    const auto end = comma == std::string::npos ? inside.size() : comma;
    expand_range(inside.substr(start, end - start), list, numbers);
    start = end + 1;
  }
  std::vector<std::string> rest;
  expand_one(pattern.substr(close + 1), list, rest);
  for (const auto& n : numbers) {
    for (const auto& r : rest) out.push_back(pattern.substr(0, open) + n + r);
  }
}

}  // namespace

std::vector<std::string> expand_slurm_hostlist(const std::string& list) {
  std::vector<std::string> out;
  int depth = 0;
  std::string current;
  for (char ch : list + ",") {
    if (ch == '[') ++depth;
    if (ch == ']') --depth;
    if (ch == ',' && depth == 0) {
      if (!current.empty()) expand_one(current, list, out);
      current.clear();
    } else {
      current += ch;
    }
  }
  TORCH_CHECK(depth == 0, "Slurm host list '", list, "': unbalanced brackets");
  return out;
}

std::vector<int> expand_slurm_tasks_per_node(const std::string& list) {
  std::vector<int> out;
  std::size_t start = 0;
  while (start < list.size()) {
    auto comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    const std::string item = list.substr(start, comma - start);
    char* end = nullptr;
    const long n = std::strtol(item.c_str(), &end, 10);
    long times = 1;
    if (*end == '(') {
      char* after = nullptr;
      TORCH_CHECK(end[1] == 'x', "Slurm tasks per node '", list, "': bad item '", item, "'");
      times = std::strtol(end + 2, &after, 10);
      end = after;
      TORCH_CHECK(*end == ')', "Slurm tasks per node '", list, "': bad item '", item, "'");
      ++end;
    }
    TORCH_CHECK(end != item.c_str() && *end == '\0' && n >= 0 && times >= 1 && times <= 100000,
                "Slurm tasks per node '", list, "': bad item '", item, "'");
    out.insert(out.end(), static_cast<std::size_t>(times), static_cast<int>(n));
    start = comma + 1;
  }
  return out;
}

}  // namespace dpx::detail

namespace dpx {

using detail::env_string;
using detail::expand_slurm_hostlist;
using detail::expand_slurm_tasks_per_node;
using detail::first_of;
using detail::maybe;
using detail::need;
using detail::port_from;

int port_from_job_id(std::uint64_t job_id) { return 20000 + static_cast<int>(job_id % 10000); }

std::optional<SlurmStep> slurm_step() {
  if (!in_slurm_step()) return std::nullopt;
  SlurmStep s;
  const char* job_var = env_string("SLURM_JOB_ID") ? "SLURM_JOB_ID" : "SLURM_JOBID";
  s.job_id = env_string(job_var).value_or("");
  s.master_port = port_from(job_var);
  s.task = need("SLURM_PROCID", 0);
  s.tasks = env_string("SLURM_STEP_NUM_TASKS") ? need("SLURM_STEP_NUM_TASKS", 1)
                                               : need("SLURM_NTASKS", 1);
  s.nodes = env_string("SLURM_STEP_NUM_NODES") ? maybe("SLURM_STEP_NUM_NODES", 1)
                                               : maybe("SLURM_NNODES", 1);
  s.node = maybe("SLURM_NODEID");
  s.local_task = maybe("SLURM_LOCALID");
  if (auto per_node = first_of({"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"})) {
    s.tasks_per_node = expand_slurm_tasks_per_node(*per_node);
  }
  if (auto nodes = first_of({"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"})) {
    s.hosts = expand_slurm_hostlist(*nodes);
  }
  return s;
}

bool in_slurm_step() {
  return (env_string("SLURM_STEP_ID") || env_string("SLURM_STEPID")) &&
         env_string("SLURM_PROCID");
}

}  // namespace dpx
