// Worker-side error files, the torchelastic way: when a worker dies, it leaves a JSON file at
// $TORCHELASTIC_ERROR_FILE that the launcher (dpxrun or torchrun) quotes in its failure summary.
#pragma once

#include <exception>
#include <string>

namespace dpx {

// Installs a std::terminate handler (uncaught exceptions) and handlers for fatal signals
// (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) that write the error file, then let the process die
// as it would have. Without TORCHELASTIC_ERROR_FILE it does nothing. Call once, early in main.
// It also leaves an empty file at $TORCHELASTIC_ERROR_FILE + kHandlerMarkerSuffix, so that a
// launcher can tell a worker that returned a non-zero code without throwing (handler installed,
// no error file) from one that has no handler.
void install_error_handler();
constexpr const char* kHandlerMarkerSuffix = ".handler";

// Writes the error file for an exception the program caught itself (e.g. in main before
// returning non-zero). Returns false when no error file is configured or it cannot be written.
bool record_error(const std::exception& error);
bool record_error(const std::string& message);

// The JSON torchelastic writes: {"message": {"message": "Type: what", "extraInfo":
// {"py_callstack": ..., "timestamp": "<unix seconds>"}}}.
std::string error_file_json(const std::string& message, const std::string& callstack);

}  // namespace dpx
