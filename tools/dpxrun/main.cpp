// dpxrun: starts PROGRAM as torchrun would (docs/launcher.md); exit code 0 iff the job succeeded.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "dpxrun/agent.h"
#include "dpxrun/check.h"
#include "dpxrun/config.h"
#include "dpxrun/report.h"

int main(int argc, char** argv) {
  if (std::getenv(dpxrun::kCheckWorkerVariable) != nullptr) {  // a worker of --check (check.h)
    try {
      return dpxrun::run_check_worker();
    } catch (const std::exception& e) {
      const std::string what = e.what();
      std::printf("dpxrun --check: PROBLEM: %s\n", what.substr(0, what.find('\n')).c_str());
      return 3;
    }
  }
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
  if (!config.notice.empty()) std::fprintf(stderr, "dpxrun: %s\n", config.notice.c_str());
  try {
    dpxrun::install_signal_handlers();
    if (config.check && !dpxrun::check_node_before_rendezvous(config)) return 1;
    dpxrun::prepare_reports(config);
    dpxrun::Agent agent(config);
    const int rc = agent.run();
    dpxrun::finish_reports(config);
    if (config.check) dpxrun::say_check_result(rc);
    return rc;
  } catch (const dpxrun::UsageError& e) {
    std::fprintf(stderr, "dpxrun: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dpxrun: error: %s\n", e.what());
    return 1;
  }
}
