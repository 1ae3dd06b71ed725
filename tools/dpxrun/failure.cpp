#include "dpxrun/failure.h"

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "dpx/launch/error_handler.h"

namespace dpxrun {
namespace {

std::string format_time(std::time_t t) {
  char buf[64];
  std::tm tm{};
  localtime_r(&t, &tm);
  std::strftime(buf, sizeof(buf), "%Y-%m-%d_%H:%M:%S", &tm);
  return buf;
}

std::string indent(const std::string& s) {
  std::string out;
  for (char c : s) {
    out += c;
    if (c == '\n') out += "              ";
  }
  return out;
}

void describe(std::ostringstream& o, int index, const Failure& f) {
  o << "[" << index << "]:\n"
    << "  time      : " << format_time(f.time) << "\n"
    << "  host      : " << f.host << "\n"
    << "  rank      : " << f.rank << " (local_rank: " << f.local_rank << ")\n"
    << "  exitcode  : " << f.exit_code << " (pid: " << f.pid << ")\n"
    << "  error_file: " << (f.error_file.empty() ? "<N/A>" : f.error_file) << "\n"
    << "  traceback : " << indent(f.message) << "\n";
}

// The timestamp is a string of unix seconds in torchelastic's files; a number is taken too.
std::time_t timestamp_of(const nlohmann::json& stamp) {
  if (stamp.is_number_integer()) return stamp.get<std::time_t>();
  if (!stamp.is_string()) return 0;
  try {
    return static_cast<std::time_t>(std::stol(stamp.get<std::string>()));
  } catch (const std::exception&) {
    return 0;
  }
}

// A worker that exited with a code and left no error file: returned it without throwing (its
// handler left the marker, dpx/launch/error_handler.h), or has no handler to write one.
std::string no_error_file(const Worker& w) {
  const std::string code = std::to_string(w.exit_code);
  if (!w.error_file.empty() &&
      ::access((w.error_file + dpx::kHandlerMarkerSuffix).c_str(), F_OK) == 0) {
    return "the worker exited with code " + code + " without throwing, so no error file was "
           "written (its error handler was installed; nothing left main() as an exception and no "
           "fatal signal came): its own output above says why it returned " + code;
  }
  return "the worker exited with code " + code + " and wrote no error file (call "
         "dpx::install_error_handler() to get one)";
}

}  // namespace

bool read_error_file(const std::string& path, std::string& message, std::time_t& timestamp) {
  std::ifstream in(path);
  if (!in) return false;
  const auto root = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!root.is_object() || !root.contains("message")) return false;
  const auto& m = root["message"];
  const nlohmann::json* stamp = nullptr;
  if (m.is_object()) {
    const auto inner = m.find("message");
    message = inner != m.end() && inner->is_string() ? inner->get<std::string>() : "";
    if (m.contains("extraInfo") && m["extraInfo"].is_object() &&
        m["extraInfo"].contains("timestamp")) {
      stamp = &m["extraInfo"]["timestamp"];
    }
  } else if (m.is_string()) {
    message = m.get<std::string>();
    if (root.contains("timestamp")) stamp = &root["timestamp"];
  } else {
    return false;
  }
  if (stamp != nullptr) timestamp = timestamp_of(*stamp);
  return true;
}

Failure make_failure(const Worker& w, const std::string& host, const std::string& reason) {
  Failure f;
  f.rank = w.global_rank;
  f.local_rank = w.local_rank;
  f.host = host;
  f.pid = w.pid;
  f.signal = w.signal;
  f.exit_code = w.signal != 0 ? -w.signal : w.exit_code;
  f.time = w.exit_time;
  std::string message;
  std::time_t stamp = 0;
  if (read_error_file(w.error_file, message, stamp)) {
    f.error_file = w.error_file;
    f.message = message;
    if (stamp > 0) f.time = stamp;
  }
  if (!reason.empty()) {
    f.message = f.message.empty() ? reason : reason + "\n" + f.message;
  } else if (f.message.empty()) {
    f.message = w.signal != 0 ? "Signal " + std::to_string(w.signal) + " (" + describe_exit(w) +
                                    ") received by PID " + std::to_string(w.pid)
                                  : no_error_file(w);
  }
  return f;
}

std::string failure_summary(const std::string& program, const std::vector<Failure>& failures) {
  const std::string rule(60, '='), thin(60, '-');
  std::ostringstream o;
  o << rule << "\n" << program << " FAILED\n" << thin << "\nFailures:\n";
  if (failures.size() <= 1) o << "  <NO_OTHER_FAILURES>\n";
  for (size_t i = 1; i < failures.size(); ++i) describe(o, static_cast<int>(i), failures[i]);
  o << thin << "\nRoot Cause (first observed failure):\n";
  if (!failures.empty()) describe(o, 0, failures[0]);
  o << rule << "\n";
  return o.str();
}

std::string failure_line(const Failure& f) {
  std::string first = f.message.substr(0, f.message.find('\n'));
  return "rank " + std::to_string(f.rank) + " on " + f.host + " (pid " + std::to_string(f.pid) +
         ") exitcode " + std::to_string(f.exit_code) + " at " + format_time(f.time) + ": " + first;
}

}  // namespace dpxrun
