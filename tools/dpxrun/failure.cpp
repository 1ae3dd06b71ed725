#include "failure.h"

#include <fstream>
#include <map>
#include <memory>
#include <sstream>

namespace dpxrun {
namespace {

// Just enough JSON for error files: objects, strings, and other scalars kept as text.
struct Json {
  std::string text;
  std::map<std::string, Json> object;
  bool is_object = false;
};

class Parser {
 public:
  explicit Parser(const std::string& s) : s_(s) {}
  bool parse(Json& out) {
    skip();
    return value(out);
  }

 private:
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool string(std::string& out) {
    if (i_ >= s_.size() || s_[i_] != '"') return false;
    for (++i_; i_ < s_.size() && s_[i_] != '"'; ++i_) {
      char c = s_[i_];
      if (c == '\\' && i_ + 1 < s_.size()) {
        c = s_[++i_];
        if (c == 'n') c = '\n';
        else if (c == 't') c = '\t';
        else if (c == 'r') c = '\r';
        else if (c == 'u' && i_ + 4 < s_.size()) {
          c = static_cast<char>(std::stoi(s_.substr(i_ + 1, 4), nullptr, 16) & 0x7f);
          i_ += 4;
        }
      }
      out += c;
    }
    return i_++ < s_.size();
  }
  bool value(Json& out) {
    skip();
    if (i_ >= s_.size()) return false;
    if (s_[i_] == '"') return string(out.text);
    if (s_[i_] == '{') {
      out.is_object = true;
      ++i_;
      skip();
      if (i_ < s_.size() && s_[i_] == '}') return ++i_, true;
      while (true) {
        skip();
        std::string k;
        if (!string(k)) return false;
        skip();
        if (i_ >= s_.size() || s_[i_++] != ':') return false;
        if (!value(out.object[k])) return false;
        skip();
        if (i_ < s_.size() && s_[i_] == ',') { ++i_; continue; }
        return i_ < s_.size() && s_[i_++] == '}';
      }
    }
    const size_t start = i_;  // number, true, false, null (arrays are not expected)
    while (i_ < s_.size() && s_[i_] != ',' && s_[i_] != '}') ++i_;
    out.text = s_.substr(start, i_ - start);
    return true;
  }
  const std::string& s_;
  size_t i_ = 0;
};

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

}  // namespace

bool read_error_file(const std::string& path, std::string& message, std::time_t& timestamp) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  Json root;
  if (!Parser(text).parse(root) || !root.is_object || !root.object.count("message")) return false;
  const Json& m = root.object.at("message");
  const Json* stamp = nullptr;
  if (m.is_object) {
    message = m.object.count("message") ? m.object.at("message").text : "";
    auto extra = m.object.find("extraInfo");
    if (extra != m.object.end() && extra->second.object.count("timestamp")) {
      stamp = &extra->second.object.at("timestamp");
    }
  } else {
    message = m.text;
    if (root.object.count("timestamp")) stamp = &root.object.at("timestamp");
  }
  try {
    if (stamp != nullptr && !stamp->text.empty()) timestamp = std::stol(stamp->text);
  } catch (const std::exception&) {
  }
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
                              : "the worker wrote no error file (call "
                                "dpx::install_error_handler() to get one)";
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
