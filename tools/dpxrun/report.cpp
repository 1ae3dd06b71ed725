#include "dpxrun/report.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "dpx/observe/timeline.h"
#include "dpx/runtime/files.h"
#include "dpxrun/clock_and_say.h"

namespace dpxrun {
namespace {

// FILE.rank<R>.json next to `file`, in rank order.
std::vector<std::string> rank_files(const std::string& file) {
  const std::string p = dpx::absolute_path(file);
  const std::string dir = p.substr(0, p.rfind('/')), base = p.substr(p.rfind('/') + 1);
  const std::regex pattern(std::regex_replace(base, std::regex(R"([.^$|()\[\]{}*+?\\])"),
                                              R"(\$&)") +
                           R"(\.rank(\d+)\.json)");
  std::vector<std::pair<int, std::string>> found;
  for (const auto& name : dpx::list_dir(dir.empty() ? "/" : dir)) {
    std::smatch m;
    if (std::regex_match(name, m, pattern)) found.emplace_back(std::stoi(m[1]), dir + "/" + name);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

// A time of the report (nanoseconds, as in PyTorch's logging data) in milliseconds.
std::string ms(const nlohmann::json& j, const char* field) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%9.2f", j.value(field, 0.0) / 1e6);
  return buf;
}

// One line per rank from the workers' last DdpStats (dpx::to_json).
void print_step_reports(const std::string& dir) {
  std::vector<std::pair<int, nlohmann::json>> reports;
  for (const auto& name : dpx::list_dir(dir)) {
    const std::string path = dir + "/" + name;
    std::ifstream in(path);
    try {
      auto j = nlohmann::json::parse(in);
      reports.emplace_back(j.value("rank", -1), std::move(j));
    } catch (const std::exception& ex) {
      say("step report " + path + " unreadable: " + ex.what());
    }
  }
  if (reports.empty()) return;
  std::sort(reports.begin(), reports.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string text =
      "step report (DDP, averages per iteration in ms; docs/ddp.md \"Step report\"):\n"
      "  rank iterations   forward  bwd comp  bwd comm   overlap   exposed buckets rebuilt "
      "unused\n";
  for (const auto& [rank, j] : reports) {
    char line[256];
    std::snprintf(line, sizeof(line), "  %4d %10lld %s %s %s %s %s %7zu %7s %6lld\n", rank,
                  static_cast<long long>(j.value("iteration", 0LL)),
                  ms(j, "avg_forward_compute_time").c_str(),
                  ms(j, "avg_backward_compute_time").c_str(),
                  ms(j, "avg_backward_comm_time").c_str(),
                  ms(j, "avg_backward_compute_comm_overlap_time").c_str(),
                  ms(j, "avg_exposed_comm_time").c_str(),
                  j.value("bucket_sizes", nlohmann::json::array()).size(),
                  j.value("has_rebuilt_buckets", false) ? "yes" : "no",
                  static_cast<long long>(j.value("unused_parameter_count", 0LL)));
    text += line;
  }
  std::fprintf(stderr, "dpxrun: %s", text.c_str());
}

}  // namespace

void prepare_reports(Config& config) {
  if (!config.timeline.empty()) {
    const std::string file = dpx::absolute_path(config.timeline);
    for (const auto& old : rank_files(file)) ::unlink(old.c_str());
    ::setenv("DPX_TIMELINE", file.c_str(), 1);
  }
  std::string tmpl = dpx::temp_dir() + "/dpxrun-report-XXXXXX";
  if (::mkdtemp(tmpl.data()) != nullptr) {
    config.report_dir = tmpl;
    ::setenv("DPX_STEP_REPORT_DIR", tmpl.c_str(), 1);
  }
}

void finish_reports(const Config& config) {
  if (!config.report_dir.empty()) {
    print_step_reports(config.report_dir);
    dpx::remove_tree(config.report_dir);
  }
  if (config.timeline.empty()) return;
  const auto inputs = rank_files(config.timeline);
  if (inputs.empty()) {
    say("--timeline: no rank wrote " + config.timeline + ".rank<R>.json; timelines are "
        "recorded by programs that call dpx::init_process_group");
    return;
  }
  try {
    dpx::timeline::merge(config.timeline, inputs);
    say("timeline of " + std::to_string(inputs.size()) + " rank(s) written to " +
        config.timeline + " (open it in chrome://tracing or ui.perfetto.dev)");
  } catch (const std::exception& e) {
    say(std::string("--timeline: ") + e.what());
  }
}

}  // namespace dpxrun
