// dpxrun: starts PROGRAM as torchrun would (docs/launcher.md); exit code 0 iff the job succeeded.
#include <cstdio>
#include <exception>

#include "agent.h"
#include "config.h"
#include "report.h"

int main(int argc, char** argv) {
  dpxrun::Config config;
  try {
    config = dpxrun::parse_config(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const dpxrun::HelpRequested& help) {
    std::printf("%s", help.what());
    return 0;
  } catch (const dpxrun::UsageError& e) {
    std::fprintf(stderr, "dpxrun: error: %s (see dpxrun --help)\n", e.what());
    return 2;
  }
  try {
    dpxrun::install_signal_handlers();
    dpxrun::prepare_reports(config);
    dpxrun::Agent agent(config);
    const int rc = agent.run();
    dpxrun::finish_reports(config);
    return rc;
  } catch (const dpxrun::UsageError& e) {
    std::fprintf(stderr, "dpxrun: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dpxrun: error: %s\n", e.what());
    return 1;
  }
}
