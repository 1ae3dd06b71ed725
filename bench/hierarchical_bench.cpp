// dpx-bench hierarchical: the hierarchical backend against flat gloo on the same ranks, in one
// run: time per float32 sum all-reduce and the bytes that cross the hosts. One worker of an
// env:// job (bench/hierarchical_netns.sh runs 2 hosts x 2 ranks in network namespaces).
//
// Rounds alternate the two groups (hierarchical first in even rounds, flat first in odd ones),
// so drift in the machine's load hits both alike. time is the median over all timed iterations
// of the slowest rank's time. Bytes are rank 0's interface counters (/proc/net/dev of its
// network namespace: received + sent, so every byte between its host and the others, with
// TCP/IP headers) around each group's iterations, per all-reduce: with rank 0's host on one end
// of a two-host link, that is all the traffic between the hosts.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/command.h"
#include "dpx/dpx.h"
#include "bench/stats.h"

namespace dpx::bench::hierarchical_bench {
namespace {

struct HierArgs {
  std::vector<std::int64_t> sizes = {64 << 10, 1 << 20, 16 << 20};
  int rounds = 5;
  int iters = 10;  // per group and round
  std::string interface;  // default: GLOO_SOCKET_IFNAME
};

// Received + sent bytes of `ifname` in this process's network namespace; -1 if not listed.
std::int64_t interface_bytes(const std::string& ifname) {
  std::ifstream in("/proc/self/net/dev");
  std::string line;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(0, name.find_first_not_of(' '));
    if (name != ifname) continue;
    std::istringstream fields(line.substr(colon + 1));
    std::int64_t rx = 0, skip = 0, tx = 0;
    fields >> rx;
    for (int i = 0; i < 7; ++i) fields >> skip;
    fields >> tx;
    return rx + tx;
  }
  return -1;
}

struct Sample {
  std::vector<double> seconds;  // one per iteration, this rank's
  std::int64_t bytes = 0;       // rank 0's interface, all iterations
};

void time_group(ProcessGroup& pg, at::Tensor& t, int iters, const std::string& ifname,
                Sample& s) {
  pg.barrier()->wait();
  const std::int64_t before = interface_bytes(ifname);
  for (int i = 0; i < iters; ++i) {
    const auto start = std::chrono::steady_clock::now();
    pg.allreduce(t)->wait();
    s.seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  s.bytes += interface_bytes(ifname) - before;
}

// The slowest rank's time per iteration, over `pg`.
double median_of_slowest(ProcessGroup& pg, const std::vector<double>& seconds) {
  auto t = at::tensor(seconds, at::kDouble);
  pg.allreduce(t, {ReduceOp::kMax})->wait();
  return median(std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel()));
}

bool exact(ProcessGroup& pg, at::Tensor& t) {
  t.fill_(pg.rank() + 1);
  pg.allreduce(t)->wait();
  const int w = pg.size();
  return t.eq(w * (w + 1) / 2).all().item<bool>();
}

// Both groups on one store that rank 0 serves at MASTER_ADDR:MASTER_PORT.
std::shared_ptr<Store> job_store(const Env& env) {
  TORCH_CHECK(env.master_addr && env.master_port && env.rank && env.world_size,
              "dpx-bench hierarchical runs as one worker of an env:// job: set MASTER_ADDR, "
              "MASTER_PORT, RANK and WORLD_SIZE (bench/hierarchical_netns.sh does)");
  TcpStoreOptions o;
  o.host = *env.master_addr;
  o.port = static_cast<std::uint16_t>(*env.master_port);
  o.is_server = *env.rank == 0;
  o.timeout = std::chrono::seconds(120);
  return Store::tcp(o);
}

int run(const HierArgs& a) {
  const std::string ifname = !a.interface.empty() ? a.interface
                             : std::getenv("GLOO_SOCKET_IFNAME") ? std::getenv("GLOO_SOCKET_IFNAME")
                                                                 : "";
  const Env env = Env::read();
  auto store = job_store(env);
  init_process();
  auto hier = new_process_group("hierarchical", Store::prefix("hier", store), *env.rank,
                                *env.world_size);
  auto flat = new_process_group("gloo", Store::prefix("flat", store), *env.rank,
                                *env.world_size);
  const bool print = hier->rank() == 0;
  if (print) {
    std::printf("# dpx-bench hierarchical: %d ranks, float32 sum, %d rounds x %d iterations per "
                "group; bytes on %s (rank 0's host)\n", hier->size(), a.rounds, a.iters,
                ifname.empty() ? "(no interface given)" : ifname.c_str());
    std::printf("%10s %6s %11s %11s %8s %13s %13s %8s\n", "size(B)", "check", "hier(us)",
                "gloo(us)", "speedup", "hier(B/op)", "gloo(B/op)", "bytes");
  }
  bool all_ok = true;
  for (const std::int64_t bytes : a.sizes) {
    auto t = at::empty({std::max<std::int64_t>(1, bytes / 4)}, at::kFloat);
    const bool ok = exact(*hier, t) && exact(*flat, t);
    all_ok = all_ok && ok;
    for (int i = 0; i < 2; ++i) {  // warm-up
      hier->allreduce(t)->wait();
      flat->allreduce(t)->wait();
    }
    Sample h, f;
    for (int round = 0; round < a.rounds; ++round) {
      if (round % 2 == 0) time_group(*hier, t, a.iters, ifname, h);
      time_group(*flat, t, a.iters, ifname, f);
      if (round % 2 == 1) time_group(*hier, t, a.iters, ifname, h);
    }
    const double th = median_of_slowest(*flat, h.seconds) * 1e6;
    const double tf = median_of_slowest(*flat, f.seconds) * 1e6;
    const double n = static_cast<double>(a.rounds) * a.iters;
    if (print) {
      std::printf("%10lld %6s %11.1f %11.1f %7.2fx %13.0f %13.0f %7.2fx\n",
                  static_cast<long long>(t.numel() * 4), ok ? "ok" : "FAIL", th, tf, tf / th,
                  h.bytes / n, f.bytes / n, static_cast<double>(f.bytes) / h.bytes);
      std::fflush(stdout);
    }
  }
  flat->barrier()->wait();
  return all_ok ? 0 : 1;
}

RegisterCommand reg("hierarchical",
                    "hierarchical vs flat gloo all-reduce: time and bytes across hosts",
                    [](CLI::App& app) -> Run {
                      auto a = std::make_shared<HierArgs>();
                      app.add_option("--sizes", a->sizes, "bytes per all-reduce "
                                     "(default 65536 1048576 16777216)")->check(at_least(4));
                      app.add_option("--rounds", a->rounds, "alternating rounds (default 5)")
                          ->check(at_least(1));
                      app.add_option("--iters", a->iters, "iterations per group and round "
                                     "(default 10)")->check(at_least(1));
                      app.add_option("--interface", a->interface, "the interface whose bytes "
                                     "are counted on rank 0 (default GLOO_SOCKET_IFNAME)");
                      return [a](const std::vector<std::string>&) { return run(*a); };
                    });

}  // namespace
}  // namespace dpx::bench::hierarchical_bench
