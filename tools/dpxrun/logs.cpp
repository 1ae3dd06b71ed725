#include "dpxrun/logs.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>

namespace dpxrun {
namespace {

long now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

void write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (fd >= 0 && done < s.size()) {
    ssize_t n = write(fd, s.data() + done, s.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace

void LogPump::start(std::vector<Source> sources) {
  for (auto& s : sources) {
    Open o;
    o.src = std::move(s);
    if (!o.src.tee_file.empty()) {
      o.file_fd = open(o.src.tee_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    }
    open_.push_back(std::move(o));
  }
  stopping_ = false;
  thread_ = std::thread([this] { run(); });
}

void LogPump::stop(double drain_seconds) {
  if (!thread_.joinable()) return;
  drain_deadline_ms_ = now_ms() + static_cast<long>(drain_seconds * 1000);
  stopping_ = true;
  thread_.join();
  for (auto& o : open_) {
    if (!o.partial.empty()) write_all(o.src.console_fd, o.src.prefix + o.partial + "\n");
    if (o.src.fd >= 0) close(o.src.fd);
    if (o.file_fd >= 0) close(o.file_fd);
  }
  open_.clear();
}

void LogPump::run() {
  char buf[65536];
  while (true) {
    std::vector<pollfd> fds;
    std::vector<Open*> owners;
    for (auto& o : open_) {
      if (o.src.fd >= 0) {
        fds.push_back({o.src.fd, POLLIN, 0});
        owners.push_back(&o);
      }
    }
    if (fds.empty() || (stopping_ && now_ms() > drain_deadline_ms_)) return;
    if (poll(fds.data(), fds.size(), 50) <= 0) continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Open& o = *owners[i];
      ssize_t n = read(o.src.fd, buf, sizeof(buf));
      if (n <= 0) {
        close(o.src.fd);
        o.src.fd = -1;
        continue;
      }
      if (o.file_fd >= 0) write_all(o.file_fd, std::string(buf, static_cast<size_t>(n)));
      o.partial.append(buf, static_cast<size_t>(n));
      std::string lines;
      size_t start = 0, nl;
      while ((nl = o.partial.find('\n', start)) != std::string::npos) {
        lines += o.src.prefix + o.partial.substr(start, nl - start + 1);
        start = nl + 1;
      }
      o.partial.erase(0, start);
      write_all(o.src.console_fd, lines);
    }
  }
}

}  // namespace dpxrun
