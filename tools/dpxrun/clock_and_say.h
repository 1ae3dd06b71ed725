// The two small helpers every part of the agent uses: its own line on stderr, and the time
// that deadlines are measured in.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace dpxrun {

inline void say(const std::string& msg) { std::fprintf(stderr, "dpxrun: %s\n", msg.c_str()); }

// Seconds on the monotonic clock (deadlines; never the wall clock, which can jump).
inline double now() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace dpxrun
