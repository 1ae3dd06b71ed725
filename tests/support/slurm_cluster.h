// A private one-node Slurm cluster for tests: slurmctld and slurmd of Debian's slurm-wlm,
// started in the foreground with a config in a temporary directory (no munge: auth/none), on
// free ports; jobs cancelled and both daemons killed whatever happens.
#pragma once

#include <memory>
#include <string>

#include "support/launcher_harness.h"

namespace dpx::test {

class SlurmCluster {
 public:
  // Starts the daemons and waits (bounded) until the node takes jobs.
  SlurmCluster();
  ~SlurmCluster();
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  // Why the cluster does not run ("" when it does), with the daemons' logs: for GTEST_SKIP.
  const std::string& why_not() const { return why_not_; }
  // The environment srun and sbatch need to find this cluster (SLURM_CONF), less the launcher
  // variables of the test process.
  LaunchOptions env() const;
  const std::string& node() const { return node_; }

 private:
  std::string start();
  TempDir dir_;  // first member: removed after the daemons are gone
  std::string node_;
  std::unique_ptr<Launch> ctld_, slurmd_;
  std::string why_not_;
};

}  // namespace dpx::test
