// dpx-bench pingpong: the physical floor under a small collective between two processes on one
// host. One cache line in shared memory goes from one core to the other and back: the first
// process writes an odd number, the second spins until it sees it and writes the next even one,
// the first spins until it sees that. No system call, both processes pinned (--cpus), so a
// round trip is two cache-line transfers between the cores and nothing else. A 2-rank
// all-reduce must at least pass its data one way each and learn that the peer's arrived, so it
// cannot beat about one such round trip (docs/performance.md compares them in one run).
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include "bench/command.h"

namespace dpx::bench::pingpong_bench {
namespace {

struct PingpongArgs {
  std::int64_t round_trips = 2'000'000;
  int batch = 1000;  // round trips per timed batch; the median batch is reported
  std::string cpus = "0,1";
  bool json = false;
};

struct alignas(64) Line {
  std::atomic<std::uint64_t> value{0};
};

bool pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return ::sched_setaffinity(0, sizeof(set), &set) == 0;
}

// The second process: answers every odd value with the next even one until told to stop (0).
[[noreturn]] void answer(Line& line, int cpu) {
  if (!pin(cpu)) ::_exit(3);
  std::uint64_t seen = 0;
  for (;;) {
    std::uint64_t v;
    while ((v = line.value.load(std::memory_order_acquire)) == seen) {
    }
    if (v == UINT64_MAX) ::_exit(0);
    seen = v + 1;
    line.value.store(seen, std::memory_order_release);
  }
}

int run(const PingpongArgs& a) {
  int cpu[2] = {0, 1};
  char comma = 0;
  std::istringstream in(a.cpus);
  if (!(in >> cpu[0] >> comma >> cpu[1]) || comma != ',' || cpu[0] < 0 || cpu[1] < 0) {
    std::fprintf(stderr, "pingpong: --cpus expects two CPU numbers such as 0,1, got '%s'\n",
                 a.cpus.c_str());
    return 2;
  }
  void* mem = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    std::perror("pingpong: mmap");
    return 1;
  }
  Line& line = *new (mem) Line;
  const pid_t child = ::fork();
  if (child < 0) {
    std::perror("pingpong: fork");
    return 1;
  }
  if (child == 0) answer(line, cpu[1]);
  if (!pin(cpu[0])) {
    std::fprintf(stderr, "pingpong: cannot pin to CPU %d (this machine has %ld)\n", cpu[0],
                 ::sysconf(_SC_NPROCESSORS_ONLN));
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    return 2;
  }
  std::uint64_t v = 1;
  auto trip = [&] {
    line.value.store(v, std::memory_order_release);
    while (line.value.load(std::memory_order_acquire) != v + 1) {
    }
    v += 2;
  };
  for (int i = 0; i < 10000; ++i) trip();  // warm up: both spinning, the line in play
  const std::int64_t batches = std::max<std::int64_t>(1, a.round_trips / a.batch);
  std::vector<double> ns(batches);
  for (std::int64_t b = 0; b < batches; ++b) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < a.batch; ++i) trip();
    ns[b] = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start)
                .count() / a.batch;
  }
  line.value.store(UINT64_MAX, std::memory_order_release);
  int status = 0;
  ::waitpid(child, &status, 0);
  ::munmap(mem, 4096);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "pingpong: the answering process failed (could not pin to CPU %d?)\n",
                 cpu[1]);
    return 1;
  }
  std::sort(ns.begin(), ns.end());
  const double median = ns[ns.size() / 2];
  if (a.json) {
    std::printf("{\"benchmark\": \"pingpong\", \"cpus\": [%d, %d], \"round_trips\": %lld, "
                "\"round_trip_us\": %.4f, \"min_batch_us\": %.4f}\n",
                cpu[0], cpu[1], static_cast<long long>(batches * a.batch), median / 1e3,
                ns.front() / 1e3);
  } else {
    std::printf("# dpx-bench pingpong: one cache line between CPUs %d and %d, %lld round trips "
                "in batches of %d\n", cpu[0], cpu[1], static_cast<long long>(batches * a.batch),
                a.batch);
    std::printf("round trip: %.4f us median of batches (fastest batch %.4f us)\n", median / 1e3,
                ns.front() / 1e3);
  }
  return 0;
}

RegisterCommand reg("pingpong", "the floor: one cache line between two pinned cores and back",
                    [](CLI::App& app) -> Run {
                      auto a = std::make_shared<PingpongArgs>();
                      app.add_option("--round-trips", a->round_trips,
                                     "round trips timed (default 2000000)")
                          ->check(at_least(1000));
                      app.add_option("--batch", a->batch, "round trips per timed batch")
                          ->check(at_least(1));
                      app.add_option("--cpus", a->cpus, "the two CPUs (default 0,1)");
                      app.add_flag("--json", a->json, "one JSON line instead of text");
                      return [a](const std::vector<std::string>&) { return run(*a); };
                    });

}  // namespace
}  // namespace dpx::bench::pingpong_bench
