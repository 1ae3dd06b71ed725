// Sub-commands of dpx-bench register themselves: one source file each, no central list.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace dpx::bench {

// Runs a parsed sub-command; `args` are its words as given (for echoing them in reports).
using Run = std::function<int(const std::vector<std::string>& args)>;
// Adds the sub-command's flags to `app`, bound to an options struct of its own, and returns what
// runs it once the command line is parsed.
using Setup = std::function<Run(CLI::App& app)>;

struct CommandInfo {
  Setup setup;
  std::string summary;
};

std::map<std::string, CommandInfo>& commands();

// An integer of at least `min`, with a message that says so (CLI11's own number checks print
// the range up to 1.8e308, and let nan through).
inline CLI::Validator at_least(long long min) {
  return CLI::Validator(
      [min](std::string& v) -> std::string {
        long long x = 0;
        const bool ok = CLI::detail::lexical_cast(v, x) && x >= min;
        return ok ? "" : "expects an integer >= " + std::to_string(min) + ", got '" + v + "'";
      },
      ">=" + std::to_string(min));
}

struct RegisterCommand {
  RegisterCommand(const std::string& name, const std::string& summary, Setup setup) {
    commands()[name] = {std::move(setup), summary};
  }
};

}  // namespace dpx::bench
