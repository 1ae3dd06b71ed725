// Sub-commands of dpx-bench register themselves: one source file each, no central list.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace dpx::bench {

using Command = std::function<int(const std::vector<std::string>& args)>;

struct CommandInfo {
  Command run;
  std::string summary;
};

std::map<std::string, CommandInfo>& commands();

struct RegisterCommand {
  RegisterCommand(const std::string& name, const std::string& summary, Command run) {
    commands()[name] = {std::move(run), summary};
  }
};

}  // namespace dpx::bench
