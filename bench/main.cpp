// dpx-bench SUBCOMMAND [FLAGS...]: benchmarks that run as ordinary workers under the launcher
// contract (env://), so `dpxrun --nproc-per-node 2 dpx-bench allreduce` measures two ranks.
#include <c10/util/Exception.h>

#include <cstdio>
#include <exception>

#include "bench/command.h"

namespace dpx::bench {

std::map<std::string, CommandInfo>& commands() {
  static std::map<std::string, CommandInfo> all;
  return all;
}

}  // namespace dpx::bench

int main(int argc, char** argv) {
  CLI::App app("dpx's benchmarks; run `dpx-bench SUBCOMMAND --help` for a sub-command's flags.",
               "dpx-bench");
  app.require_subcommand(1);
  std::map<std::string, dpx::bench::Run> runs;
  for (const auto& [name, info] : dpx::bench::commands()) {
    runs[name] = info.setup(*app.add_subcommand(name, info.summary));
  }
  if (argc > 1 && argv[1][0] != '-' && runs.count(argv[1]) == 0) {  // CLI11 would only say
    std::string names;                                               // "A subcommand is required"
    for (const auto& [name, run] : runs) names += (names.empty() ? "" : ", ") + name;
    std::fprintf(stderr, "dpx-bench: error: unknown sub-command '%s'; use one of %s\n", argv[1],
                 names.c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& help) {
    return app.exit(help);  // the help of the sub-command named, if any; exit code 0
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "dpx-bench: error: %s (see dpx-bench --help)\n", e.what());
    return 2;
  }
  const std::string name = app.get_subcommands().front()->get_name();
  try {
    // argv[1] is the sub-command: CLI11 allows no flags before it, as dpx-bench defines none.
    return runs[name](std::vector<std::string>(argv + 2, argv + argc));
  } catch (const c10::Error& e) {  // TORCH_CHECK: its message, not LibTorch's backtrace
    std::fprintf(stderr, "dpx-bench %s: error: %s\n", name.c_str(), e.what_without_backtrace());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dpx-bench %s: error: %s\n", name.c_str(), e.what());
  }
  return 1;
}
