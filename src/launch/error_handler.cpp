#include "dpx/launch/error_handler.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <typeinfo>

#include <c10/util/Exception.h>
#include <c10/util/Type.h>
#include <nlohmann/json.hpp>

#include "runtime/env_read.h"

namespace dpx {
namespace {

// Filled at install time: a signal handler may not allocate.
char g_error_file[4096];
std::atomic<bool> g_written{false};
constexpr int kFatalSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};

bool write_file(const std::string& json) {
  const auto path = detail::env_string("TORCHELASTIC_ERROR_FILE");
  if (!path) return false;
  std::ofstream out(*path, std::ios::trunc);
  out << json;
  out.close();
  if (out) {
    g_written = true;
  }
  return static_cast<bool>(out);
}

std::string describe(const std::exception& e) {
  if (auto* c = dynamic_cast<const c10::Error*>(&e)) {
    return c10::demangle(typeid(e).name()) + ": " + c->what_without_backtrace();
  }
  return c10::demangle(typeid(e).name()) + ": " + e.what();
}

void on_terminate() {
  if (!g_written) {
    try {
      if (auto current = std::current_exception()) {
        std::rethrow_exception(current);
      }
      record_error("std::terminate called without an active exception");
    } catch (const std::exception& e) {
      record_error(e);
    } catch (...) {
      record_error("uncaught exception of a type not derived from std::exception");
    }
  }
  std::abort();
}

// Async-signal-safe: only write(2) on a buffer built by hand (no JSON library, which allocates);
// the message is fixed text, so nothing needs escaping.
void append(char* buf, size_t& n, size_t cap, const char* s) {
  while (*s != '\0' && n + 1 < cap) buf[n++] = *s++;
}

void append_int(char* buf, size_t& n, size_t cap, long v) {
  char digits[24];
  int k = 0;
  do {
    digits[k++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v > 0 && k < 23);
  while (k > 0 && n + 1 < cap) buf[n++] = digits[--k];
}

void on_fatal_signal(int sig) {
  if (!g_written.exchange(true) && g_error_file[0] != '\0') {
    char buf[512];
    size_t n = 0;
    append(buf, n, sizeof(buf), "{\"message\": {\"message\": \"FatalSignal: process got signal ");
    append(buf, n, sizeof(buf), sigabbrev_np(sig) ? sigabbrev_np(sig) : "?");
    append(buf, n, sizeof(buf), " (");
    append_int(buf, n, sizeof(buf), sig);
    append(buf, n, sizeof(buf), ")\", \"extraInfo\": {\"py_callstack\": \"\", \"timestamp\": \"");
    append_int(buf, n, sizeof(buf), static_cast<long>(time(nullptr)));
    append(buf, n, sizeof(buf), "\"}}}\n");
    int fd = open(g_error_file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ssize_t ignored = write(fd, buf, n);
      (void)ignored;
      close(fd);
    }
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

std::string error_file_json(const std::string& message, const std::string& callstack) {
  nlohmann::ordered_json extra = {{"py_callstack", callstack},
                                  {"timestamp", std::to_string(std::time(nullptr))}};
  nlohmann::ordered_json file = {{"message", {{"message", message}, {"extraInfo", extra}}}};
  // Messages may quote bytes that are not UTF-8 (paths, peers' data): replace them, never throw.
  return file.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

bool record_error(const std::exception& error) {
  return write_file(error_file_json(describe(error), error.what()));
}

bool record_error(const std::string& message) {
  return write_file(error_file_json(message, ""));
}

void install_error_handler() {
  const auto found = detail::env_string("TORCHELASTIC_ERROR_FILE");
  if (!found) return;
  const char* path = found->c_str();
  std::snprintf(g_error_file, sizeof(g_error_file), "%s", path);
  // The trace a launcher reads when no error file comes: the handler was there, so a non-zero
  // exit without one means the program returned it without throwing (error_handler.h).
  const std::string marker = std::string(path) + kHandlerMarkerSuffix;
  const int fd = ::open(marker.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) ::close(fd);
  std::set_terminate(on_terminate);
  for (int sig : kFatalSignals) {
    struct sigaction sa {};
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    sigaction(sig, &sa, nullptr);
  }
}

}  // namespace dpx
