// dpxrun --check's worker (step 2 of check.h): dpxrun itself, started by the agent in each
// worker slot with the launcher contract and DPX_CHECK_WORKER=1.
#include <sys/statvfs.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <torch/torch.h>
#include <torch/version.h>

#include "dpxrun/check.h"
#include "dpx/comm/diagnostics.h"
#include "dpx/dpx.h"
#include "dpxrun/net.h"

namespace dpxrun {
namespace {

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", bytes / (1 << 20));
  return buf;
}

class Report {
 public:
  Report(int rank, int local_rank) : rank_(rank), local_rank_(local_rank) {
    where_ = "host " + hostname() + " rank " + std::to_string(rank);
  }
  void info(const std::string& line) const {
    std::printf("dpxrun --check: %s: %s\n", where_.c_str(), line.c_str());
    std::fflush(stdout);
  }
  // Worth knowing, but nothing dpx needs: does not fail the check.
  void warning(const std::string& line) const {
    std::printf("dpxrun --check: WARNING on %s: %s\n", where_.c_str(), line.c_str());
    std::fflush(stdout);
  }
  void problem(const std::string& line) {
    std::printf("dpxrun --check: PROBLEM on %s: %s\n", where_.c_str(), line.c_str());
    std::fflush(stdout);
    ++problems_;
  }
  bool host_lead() const { return local_rank_ == 0; }
  bool job_lead() const { return rank_ == 0; }
  int exit_code() const { return problems_ == 0 ? 0 : 3; }

 private:
  int rank_, local_rank_;
  std::string where_;
  int problems_ = 0;
};

// One all-reduce of 1 from every rank: every rank must end with the world size.
void tiny_allreduce(dpx::ProcessGroup& pg, Report& report) {
  auto t = torch::ones({1});
  pg.allreduce(t)->wait();
  const double got = t.item<double>();
  if (got != pg.size()) {
    report.problem(pg.backend() + " all-reduce of one number per rank gave " +
                   std::to_string(got) + " instead of " + std::to_string(pg.size()));
  } else if (report.job_lead()) {
    report.info(pg.backend() + ": all " + std::to_string(pg.size()) +
                " ranks reach each other (one all-reduce)");
  }
}

// The shm segment of this host's ranks against /dev/shm and available memory.
void check_shared_memory(int local_world, Report& report) {
  const double slot = static_cast<double>(dpx::shm_slot_bytes());
  const double need = 2 * slot * local_world + 8192;  // two slots per rank, plus the header
  struct statvfs fs {};
  const double dev_shm = ::statvfs("/dev/shm", &fs) == 0
                             ? static_cast<double>(fs.f_bavail) * fs.f_frsize : -1;
  double available = -1;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    double kib = 0;
    meminfo >> kib;
    if (key == "MemAvailable:") available = kib * 1024;
    meminfo.ignore(1 << 10, '\n');
  }
  report.info("shm backend: its segment for " + std::to_string(local_world) + " local ranks " +
              "takes about " + mib(need) + " of memory; /dev/shm has " +
              (dev_shm < 0 ? std::string("no filesystem") : mib(dev_shm)) + " free, memory " +
              (available < 0 ? std::string("unknown") : mib(available)) + " available");
  if (available >= 0 && available < need) {
    report.problem("the shm backend needs about " + mib(need) + " of memory for its segment, "
                   "but only " + mib(available) + " is available; free memory, lower "
                   "DPX_SHM_SLOT_BYTES, or use DPX_BACKEND=gloo");
  }
  if (dev_shm < need) {
    report.warning("/dev/shm has " + (dev_shm < 0 ? std::string("no filesystem") : mib(dev_shm) +
                   " free") + ", less than the " + mib(need) + " segment of the shm backend: "
                   "dpx keeps that segment in memory (memfd) and works anyway, but NCCL's and "
                   "MPI's shared-memory transports and PyTorch DataLoader workers use /dev/shm; "
                   "enlarge it (docker run --shm-size=1g, or a larger tmpfs) if this job uses "
                   "them");
  }
}

void report_versions_and_addresses(const dpx::Env& env, dpx::Store* store, Report& report) {
  char torch[32];
  std::snprintf(torch, sizeof(torch), "%d.%d.%d", TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR,
                TORCH_VERSION_PATCH);
  report.info(std::string("LibTorch ") + torch + ", dpx " + DPX_VERSION_STRING);
  report.info("store at " + env.master_addr.value_or("?") + ":" +
              std::to_string(env.master_port.value_or(0)));
  try {
    report.info("gloo listens on " + dpx::gloo_listen_address(store));
  } catch (const std::exception& e) {
    report.problem(first_line(e.what()));
  }
}

// A tiny all-reduce over gloo, then over the backend `auto` (or DPX_BACKEND) picks for these
// ranks, and what that choice means for the job.
void check_backends(const dpx::StoreAndRank& s, const dpx::ProcessGroup::Options& pg,
                    Report& report) {
  try {
    auto gloo = dpx::new_process_group("gloo", dpx::Store::prefix("check/gloo", s.store), s.rank,
                                       s.world_size, pg);
    tiny_allreduce(*gloo, report);
    const std::string picked = dpx::auto_cpu_backend(
        *dpx::Store::prefix("check/host", s.store), s.rank, s.world_size, pg.timeout);
    const bool one_host = picked == "shm";  // auto on the CPU: shm exactly when on one host
    const bool hierarchical = picked == "hierarchical";
    const char* backend_variable = std::getenv("DPX_BACKEND");
    const std::string forced = backend_variable != nullptr ? backend_variable : "";
    if (report.job_lead()) {
      report.info(!forced.empty() ? "backend: " + forced + " for every pair of ranks "
                                    "(DPX_BACKEND)"
                  : one_host ? "backend: auto picks shm for every pair of ranks (all on one host)"
                  : hierarchical ? "backend: auto picks hierarchical (shm inside each host, gloo "
                                   "between one leader per host: ranks on several hosts, "
                                   "several on one)"
                                 : "backend: auto picks gloo for every pair of ranks (ranks on "
                                   "several hosts)");
    }
    if (forced == "shm" && !one_host && report.job_lead()) {
      report.problem("DPX_BACKEND=shm, but the ranks run on several hosts and shm joins ranks "
                     "of one host only; unset DPX_BACKEND (auto picks hierarchical or gloo) or "
                     "set it to hierarchical or gloo");
    }
    if ((hierarchical && forced.empty()) || forced == "hierarchical") {
      auto hier = dpx::new_process_group("hierarchical", dpx::Store::prefix("check/hier",
                                         s.store), s.rank, s.world_size, pg);
      tiny_allreduce(*hier, report);
    }
    if (one_host && forced != "gloo") {
      auto shm = dpx::new_process_group("shm", dpx::Store::prefix("check/shm", s.store), s.rank,
                                        s.world_size, pg);
      tiny_allreduce(*shm, report);
    }
  } catch (const std::exception& e) {
    report.problem(first_line(e.what()));
  }
}

}  // namespace

int run_check_worker() {
  dpx::ProcessOptions process;
  process.apply_memory_policy = false;  // nothing to cache; SIGPIPE ignored: Note [SIGPIPE]
  dpx::init_process(process);
  const dpx::Env env = dpx::Env::read();
  Report report(env.rank.value_or(-1), env.local_rank.value_or(0));
  dpx::InitOptions opts;
  opts.timeout = std::chrono::milliseconds(static_cast<long>(kCheckTimeout * 1000));
  dpx::StoreAndRank s;
  try {
    s = dpx::rendezvous_store(opts);
  } catch (const std::exception& e) {
    report.problem("cannot reach the store: " + first_line(e.what()));
    return report.exit_code();
  }
  if (report.host_lead()) {
    report_versions_and_addresses(env, s.store.get(), report);
    check_shared_memory(env.local_world_size.value_or(1), report);
  }
  dpx::ProcessGroup::Options pg;
  pg.timeout = opts.timeout;
  check_backends(s, pg, report);
  return report.exit_code();
}

}  // namespace dpxrun
