// The launcher contract from Slurm's, OpenMPI's and PMI's variables (Note [Schedulers]), and
// Slurm's list syntaxes.
#include <stdlib.h>

#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include "dpx/runtime/env.h"
#include "support/expect_throws.h"
#include "runtime/scheduler_env.h"

namespace dpx::detail {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Every variable these tests read, cleared before and after each test.
class SchedulerEnvTest : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    for (const char* v :
         {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
          "MASTER_PORT", "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_PROCID", "SLURM_NTASKS",
          "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_STEP_TASKS_PER_NODE",
          "SLURM_TASKS_PER_NODE", "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST",
          "SLURM_JOB_ID", "SLURM_JOBID", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
          "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_MCA_ess_base_jobid",
          "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"}) {
      ::unsetenv(v);
    }
  }
  static void set(const char* name, const char* value) { ::setenv(name, value, 1); }
  // Task 5 of an srun step of job 4242: 3 nodes, 2+2+1 tasks, this one the second on node 2.
  static void srun_step() {
    set("SLURM_JOB_ID", "4242");
    set("SLURM_STEP_ID", "0");
    set("SLURM_PROCID", "4");
    set("SLURM_NTASKS", "8");  // the job's; the step's wins
    set("SLURM_STEP_NUM_TASKS", "5");
    set("SLURM_LOCALID", "0");
    set("SLURM_NODEID", "2");
    set("SLURM_STEP_TASKS_PER_NODE", "2(x2),1");
    set("SLURM_STEP_NODELIST", "gpu[07-08],cpu3");
    set("SLURM_JOB_NODELIST", "login,gpu[07-08],cpu3");
  }
};

TEST(SlurmLists, HostlistsExpandAsSlurmDoes) {
  EXPECT_THAT(expand_slurm_hostlist("node[01-03,7]"),
              ElementsAre("node01", "node02", "node03", "node7"));
  EXPECT_THAT(expand_slurm_hostlist("a1,b[9-10],c"), ElementsAre("a1", "b9", "b10", "c"));
  EXPECT_THAT(expand_slurm_hostlist("r[1-2]-n[08-09]"),
              ElementsAre("r1-n08", "r1-n09", "r2-n08", "r2-n09"));
  EXPECT_THAT(expand_slurm_hostlist("vm"), ElementsAre("vm"));
  EXPECT_THAT(expand_slurm_hostlist(""), ElementsAre());
  EXPECT_THAT(test::expect_throws<c10::Error>([] { expand_slurm_hostlist("n[1-2"); }),
              HasSubstr("Slurm host list 'n[1-2'"));
  EXPECT_THAT(test::expect_throws<c10::Error>([] { expand_slurm_hostlist("n[3-1]"); }),
              HasSubstr("bad range '3-1'"));
  EXPECT_THAT(test::expect_throws<c10::Error>([] { expand_slurm_hostlist("n[a]"); }),
              HasSubstr("'a' is not a number"));
}

TEST(SlurmLists, TasksPerNodeExpand) {
  EXPECT_THAT(expand_slurm_tasks_per_node("2(x3),1"), ElementsAre(2, 2, 2, 1));
  EXPECT_THAT(expand_slurm_tasks_per_node("4"), ElementsAre(4));
  EXPECT_THAT(test::expect_throws<c10::Error>([] { expand_slurm_tasks_per_node("2(3)"); }),
              HasSubstr("bad item '2(3)'"));
}

TEST(SlurmLists, PortFromJobId) {
  EXPECT_EQ(port_from_job_id(4242), 24242);
  EXPECT_EQ(port_from_job_id(1881276417), 26417);
}

TEST_F(SchedulerEnvTest, NothingOutsideASchedulerOrInABatchScript) {
  EXPECT_FALSE(scheduler_env().has_value());
  set("SLURM_JOB_ID", "7");
  set("SLURM_PROCID", "0");
  set("SLURM_NTASKS", "4");  // sbatch's own shell: no step
  EXPECT_FALSE(scheduler_env().has_value());
  EXPECT_THAT(test::expect_throws<c10::Error>([] { Env::require("RANK"); }),
              HasSubstr("runs in Slurm job 7 but outside any srun step. Start it with srun"));
}

TEST_F(SchedulerEnvTest, SrunStep) {
  srun_step();
  const Env e = Env::read();
  EXPECT_EQ(scheduler_env()->name, "slurm");
  EXPECT_EQ(e.rank, 4);
  EXPECT_EQ(e.world_size, 5);
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_EQ(e.local_world_size, 1);
  EXPECT_EQ(e.group_rank, 2);
  EXPECT_EQ(e.master_addr, std::optional<std::string>("gpu07"));
  EXPECT_EQ(e.master_port, 24242);
}

TEST_F(SchedulerEnvTest, MasterVariablesWinOverDerivedOnes) {
  srun_step();
  set("MASTER_ADDR", "10.0.0.9");
  set("MASTER_PORT", "1234");
  const Env e = Env::read();
  EXPECT_EQ(e.master_addr, std::optional<std::string>("10.0.0.9"));
  EXPECT_EQ(e.master_port, 1234);
  EXPECT_EQ(e.rank, 4);
}

TEST_F(SchedulerEnvTest, TorchrunVariablesWin) {
  srun_step();
  set("RANK", "1");
  set("WORLD_SIZE", "2");
  const Env e = Env::read();
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.world_size, 2);
  EXPECT_EQ(e.local_rank, std::nullopt);
  EXPECT_EQ(e.master_addr, std::nullopt);
}

TEST_F(SchedulerEnvTest, OpenMpiOnOneHostAndWinsOverItsSrunDaemons) {
  srun_step();  // mpirun inside a Slurm job starts its daemons with srun
  set("OMPI_COMM_WORLD_RANK", "1");
  set("OMPI_COMM_WORLD_SIZE", "2");
  set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
  set("OMPI_MCA_ess_base_jobid", "1881276417");
  const Env e = Env::read();
  EXPECT_EQ(scheduler_env()->name, "openmpi");
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.world_size, 2);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.group_rank, std::nullopt);
  EXPECT_EQ(e.master_addr, std::optional<std::string>("127.0.0.1"));
  EXPECT_EQ(e.master_port, 26417);
}

TEST_F(SchedulerEnvTest, OpenMpiOverSeveralHostsNeedsMasterAddr) {
  set("OMPI_COMM_WORLD_RANK", "0");
  set("OMPI_COMM_WORLD_SIZE", "4");
  set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
  EXPECT_EQ(Env::read().master_addr, std::nullopt);
  EXPECT_THAT(test::expect_throws<c10::Error>([] { Env::require("MASTER_ADDR"); }),
              HasSubstr("openmpi started this job on several hosts and does not say which one "
                        "runs rank 0. Set MASTER_ADDR to that host (mpirun -x MASTER_ADDR=HOST"));
  set("OMPI_COMM_WORLD_SIZE", "x");
  EXPECT_THAT(test::expect_throws<c10::Error>([] { Env::read(); }),
              HasSubstr("environment variable OMPI_COMM_WORLD_SIZE must be an integer, got 'x'"));
}

TEST_F(SchedulerEnvTest, Pmi) {
  set("PMI_RANK", "2");
  set("PMI_SIZE", "3");
  set("MPI_LOCALRANKID", "2");
  set("MPI_LOCALNRANKS", "3");
  const Env e = Env::read();
  EXPECT_EQ(scheduler_env()->name, "pmi");
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.world_size, 3);
  EXPECT_EQ(e.local_world_size, 3);
  EXPECT_EQ(e.master_addr, std::optional<std::string>("127.0.0.1"));
  EXPECT_EQ(e.master_port, std::nullopt);
}

}  // namespace
}  // namespace dpx::detail
