#include "support/slurm_cluster.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>

#include "dpx/runtime/slurm.h"
#include "support/temp_dir.h"

namespace dpx::test {
namespace {

using std::chrono::seconds;

std::string sh_output(const std::string& command) {
  std::string out;
  if (FILE* p = popen(command.c_str(), "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof(buf), p) != nullptr) out += buf;
    pclose(p);
  }
  return out;
}

// A job's processes meet on port_from_job_id(job id), as on a real cluster. Each test cluster
// numbers its jobs from a random first id whose port nobody holds now, so that clusters of tests
// running at once (whose ids would all start at 1) do not derive the same port.
int first_job_id() {
  std::mt19937 pick(std::random_device{}());
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int id = 1 + static_cast<int>(pick() % 9999);
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port_from_job_id(id)));
    const bool free = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    close(fd);
    if (free) return id;
  }
  return 1;
}

}  // namespace

SlurmCluster::SlurmCluster() { why_not_ = start(); }

std::string SlurmCluster::start() {
  for (const char* tool : {"slurmctld", "slurmd", "srun", "sinfo"}) {
    if (std::system(("command -v " + std::string(tool) + " >/dev/null 2>&1").c_str()) != 0) {
      return std::string(tool) + " is missing (Debian's slurm-wlm; scripts/setup.sh installs it)";
    }
  }
  if (geteuid() != 0) return "slurmd needs root";
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  node_ = host;
  const std::string d = dir_.path();
  std::ofstream conf(d + "/slurm.conf");
  conf << "ClusterName=dpxtest\nSlurmctldHost=" << node_ << "(127.0.0.1)\n"
       << "AuthType=auth/none\nCredType=cred/none\n"
       << "SlurmctldPort=" << free_tcp_port() << "\nSlurmdPort=" << free_tcp_port() << "\n"
       << "StateSaveLocation=" << d << "/state\nSlurmdSpoolDir=" << d << "/spool\n"
       << "SlurmctldPidFile=" << d << "/slurmctld.pid\nSlurmdPidFile=" << d << "/slurmd.pid\n"
       << "SlurmctldLogFile=" << d << "/slurmctld.log\nSlurmdLogFile=" << d << "/slurmd.log\n"
       << "ProctrackType=proctrack/pgid\nTaskPlugin=task/none\nSelectType=select/linear\n"
       << "MpiDefault=none\nReturnToService=2\nSlurmUser=root\nSlurmdUser=root\n"
       << "FirstJobId=" << first_job_id() << "\n"
       << "JobAcctGatherType=jobacct_gather/none\n"
       << "AccountingStorageType=accounting_storage/none\n"
       // More CPUs than the machine has, so that a few small ranks fit on a small runner.
       << "SlurmdParameters=config_overrides\n"
       << "NodeName=" << node_ << " NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN\n"
       << "PartitionName=debug Nodes=" << node_ << " Default=YES MaxTime=60 State=UP\n";
  conf.close();
  std::system(("mkdir -p " + d + "/state " + d + "/spool").c_str());
  LaunchOptions o = env();
  ctld_ = std::make_unique<Launch>(
      std::vector<std::string>{"slurmctld", "-D", "-i", "-f", d + "/slurm.conf"}, o);
  slurmd_ = std::make_unique<Launch>(
      std::vector<std::string>{"slurmd", "-D", "-N", node_, "-f", d + "/slurm.conf"}, o);
  const std::string sinfo = "SLURM_CONF=" + d + "/slurm.conf sinfo -h -o %t 2>/dev/null";
  if (wait_until([&] { return sh_output(sinfo) == "idle\n"; }, seconds(30))) return "";
  return "the private Slurm cluster did not come up within 30 s (sinfo: '" + sh_output(sinfo) +
         "')\n--- slurmctld:\n" + ctld_->output_so_far() + read_file(d + "/slurmctld.log") +
         "\n--- slurmd:\n" + slurmd_->output_so_far() + read_file(d + "/slurmd.log");
}

SlurmCluster::~SlurmCluster() {
  if (ctld_ != nullptr && why_not_.empty()) {
    // Jobs first, so that no task outlives the test; scancel returns once they are signalled.
    std::system(("SLURM_CONF=" + dir_.path() + "/slurm.conf timeout 10 scancel --full "
                 "--user=root >/dev/null 2>&1").c_str());
    // Then until the controller has no job left (bounded): a batch step that outlives it keeps
    // its slurmstepd (reparented to init) retrying to report the end, for good.
    const std::string squeue = "SLURM_CONF=" + dir_.path() + "/slurm.conf squeue -h 2>&1";
    wait_until([&] { return sh_output(squeue).empty(); }, seconds(15));
  }
  slurmd_.reset();  // SIGKILL to each daemon's process group
  ctld_.reset();
}

LaunchOptions SlurmCluster::env() const {
  LaunchOptions o;
  o.set_env["SLURM_CONF"] = dir_.path() + "/slurm.conf";
  o.unset_env.insert(o.unset_env.end(), {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                         "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK"});
  return o;
}

}  // namespace dpx::test
