// dpx-bench SUBCOMMAND [ARGS...]: benchmarks that run as ordinary workers under the launcher
// contract (env://), so `dpxrun --nproc-per-node 2 dpx-bench allreduce` measures two ranks.
#include <cstdio>
#include <exception>

#include "command.h"

namespace dpx::bench {

std::map<std::string, CommandInfo>& commands() {
  static std::map<std::string, CommandInfo> all;
  return all;
}

}  // namespace dpx::bench

int main(int argc, char** argv) {
  auto& all = dpx::bench::commands();
  if (argc < 2 || all.count(argv[1]) == 0) {
    std::fprintf(stderr, "usage: dpx-bench SUBCOMMAND [ARGS...]\nsub-commands:\n");
    for (const auto& [name, info] : all) {
      std::fprintf(stderr, "  %-12s %s\n", name.c_str(), info.summary.c_str());
    }
    return 2;
  }
  try {
    return all[argv[1]].run(std::vector<std::string>(argv + 2, argv + argc));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dpx-bench %s: %s\n", argv[1], e.what());
    return 1;
  }
}
