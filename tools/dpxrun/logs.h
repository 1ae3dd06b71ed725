// Worker output: lines read from the workers' pipes go to the console prefixed with the
// worker's role and local rank ("[default0]:", as torchrun's tee prints them) and, with
// --tee, unprefixed into the worker's log file as well.
#pragma once

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace dpxrun {

class LogPump {
 public:
  struct Source {
    int fd;              // read end of a worker's pipe; the pump closes it
    std::string prefix;  // "[default0]:"
    int console_fd;      // 1 or 2
    std::string tee_file;  // empty: console only
  };

  ~LogPump() { stop(0.5); }
  void start(std::vector<Source> sources);
  // Drains what the workers wrote (they are gone by now), at most `drain_seconds` long.
  void stop(double drain_seconds);

 private:
  void run();

  struct Open {
    Source src;
    int file_fd = -1;
    std::string partial;
  };
  std::vector<Open> open_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<long> drain_deadline_ms_{0};
};

}  // namespace dpxrun
