// What both examples' main() does around their training, so that they fail alike: a bad command
// line is one line and exit code 2, a failed run one line, exit code 1 and the error file that
// dpxrun's summary quotes (docs/launcher.md; tests/multiproc/cli_test.cpp checks both examples).
#pragma once

#include <c10/util/Exception.h>

#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <functional>

#include "dpx/launch/error_handler.h"

namespace examples {

// Parses `argv` into the flags added to `app`, then returns what `train` returns. Messages start
// with the app's name ("fashion_mnist: error: ...").
inline int run_main(CLI::App& app, int argc, char** argv, const std::function<int()>& train) {
  const char* name = app.get_name().c_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& help) {
    return app.exit(help);  // prints the help; exit code 0
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: error: %s (see --help)\n", name, e.what());
    return 2;
  }
  try {
    return train();
  } catch (const std::exception& e) {
    // A c10::Error's what() ends in LibTorch's C++ backtrace: the user needs only the message.
    const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
    std::fprintf(stderr, "%s: error: %s\n", name,
                 c10_error != nullptr ? c10_error->what_without_backtrace() : e.what());
    dpx::record_error(e);
    return 1;
  }
}

}  // namespace examples
