// dpx-bench soak: a long run of random collectives, each checked against its exact result, with
// this rank's memory reported as it goes: resident memory split by where it lies (LibTorch's
// CUDA libraries, LibTorch's other libraries, the shm segment, dpx's cache of freed CPU blocks,
// the rest of the heap). docs/performance.md, "Memory of a long run", has what it shows.
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "bench/command.h"
#include "dpx/dpx.h"

namespace dpx::bench::soak_bench {
namespace {

struct SoakArgs {
  int collectives = 10000;
  std::int64_t max_elements = 1 << 20;
  int report_every = 1000;
  std::string backend = "auto";
  unsigned seed = 0;
};

// Resident memory in MiB, by where it lies (from /proc/self/smaps).
struct Residency {
  double total = 0, proportional = 0;  // Rss and Pss: shared pages count 1/N in each of N
  double cuda_libraries = 0, torch_libraries = 0, other_files = 0, shm_segment = 0;
  double anonymous = 0, dpx_cache = 0;
};

bool contains_any(const std::string& s, std::initializer_list<const char*> parts) {
  for (const char* p : parts) {
    if (s.find(p) != std::string::npos) return true;
  }
  return false;
}

double* category(Residency& r, const std::string& path) {
  if (path.find("dpx-shm") != std::string::npos) return &r.shm_segment;
  if (path.empty() || path[0] == '[') return &r.anonymous;  // [heap], [stack], anonymous maps
  if (contains_any(path, {"cuda", "cublas", "cudnn", "nccl", "cusparse", "cufft", "curand",
                          "nvrtc", "nvJitLink", "cupti", "cusolver", "nvshmem", "cufile",
                          "nvToolsExt", "/nvidia/"})) {
    return &r.cuda_libraries;
  }
  if (contains_any(path, {"libtorch", "libc10", "libgomp", "libshm", "libdpx"})) {
    return &r.torch_libraries;
  }
  return &r.other_files;
}

Residency residency() {
  Residency r;
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  double* current = &r.anonymous;
  while (std::getline(smaps, line)) {
    std::istringstream in(line);
    std::string first;
    in >> first;
    if (first.find('-') != std::string::npos && first.back() != ':') {  // a mapping's header
      std::string perms, offset, dev, inode, path;
      in >> perms >> offset >> dev >> inode;
      std::getline(in >> std::ws, path);
      current = category(r, path);
    } else if (first == "Pss:") {
      double kb = 0;
      in >> kb;
      r.proportional += kb / 1024;
    } else if (first == "Rss:") {
      double kb = 0;
      in >> kb;
      *current += kb / 1024;
      r.total += kb / 1024;
    }
  }
  r.dpx_cache = static_cast<double>(cached_memory_bytes()) / (1 << 20);
  return r;
}

void report(int rank, int done, const Residency& r) {
  std::printf("rank %d after %6d: resident %7.1f MiB (proportional %7.1f) = CUDA libraries "
              "%6.1f + LibTorch/dpx libraries %6.1f + other files %5.1f + shm segment %5.1f + "
              "anonymous %6.1f (dpx's cache of freed blocks %6.1f of it)\n",
              rank, done, r.total, r.proportional, r.cuda_libraries, r.torch_libraries,
              r.other_files, r.shm_segment, r.anonymous, r.dpx_cache);
  std::fflush(stdout);
}

// Rank r's input: small integers, so that every dtype holds every result exactly.
at::Tensor input(std::int64_t n, at::ScalarType dtype, int rank) {
  return (at::arange(n, at::kLong) % 7 + rank + 1).to(dtype);
}

// One random collective, the same on every rank (one seed); false when its result is wrong.
bool one_collective(ProcessGroup& pg, std::mt19937& rng, const SoakArgs& a) {
  static const at::ScalarType dtypes[] = {at::kFloat, at::kDouble, at::kInt, at::kLong,
                                          at::kBFloat16};
  const int w = pg.size(), r = pg.rank();
  const auto dtype = dtypes[rng() % 5];
  const double log_n = std::uniform_real_distribution<double>(0, std::log(a.max_elements))(rng);
  const std::int64_t n = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::exp(log_n))) * w;
  switch (rng() % 4) {
    case 0: {
      auto t = input(n, dtype, r);
      pg.allreduce(t)->wait();
      return t.equal(((at::arange(n, at::kLong) % 7) * w + w * (w + 1) / 2).to(dtype));
    }
    case 1: {
      const int root = static_cast<int>(rng() % w);
      auto t = input(n, dtype, r);
      pg.broadcast(t, {root})->wait();
      return t.equal(input(n, dtype, root));
    }
    case 2: {
      auto out = at::empty({n * w}, dtype);
      pg.allgather(out, input(n, dtype, r))->wait();
      for (int p = 0; p < w; ++p) {
        if (!out.narrow(0, p * n, n).equal(input(n, dtype, p))) return false;
      }
      return true;
    }
    default: {
      auto out = at::empty({n / w}, dtype);
      pg.reduce_scatter(out, input(n, dtype, r))->wait();
      auto full = ((at::arange(n, at::kLong) % 7) * w + w * (w + 1) / 2).to(dtype);
      return out.equal(full.narrow(0, r * (n / w), n / w));
    }
  }
}

int run(const SoakArgs& a) {
  InitOptions o;
  o.backend = a.backend;
  auto pg = init_process_group(o);
  std::mt19937 rng(a.seed);
  report(pg->rank(), 0, residency());
  int wrong = 0;
  for (int i = 1; i <= a.collectives; ++i) {
    wrong += one_collective(*pg, rng, a) ? 0 : 1;
    if (i % a.report_every == 0 || i == a.collectives) report(pg->rank(), i, residency());
  }
  pg->barrier()->wait();
  if (wrong > 0) std::printf("rank %d: %d collectives gave a wrong result\n", pg->rank(), wrong);
  return wrong == 0 ? 0 : 1;
}

RegisterCommand reg("soak", "random collectives, each checked, and this rank's memory as it goes",
                    [](CLI::App& app) -> Run {
                      auto a = std::make_shared<SoakArgs>();
                      app.add_option("--collectives", a->collectives, "how many (default 10000)")
                          ->check(at_least(1));
                      app.add_option("--max-elements", a->max_elements,
                                     "largest per-rank tensor, in elements (default 1048576)")
                          ->check(at_least(1));
                      app.add_option("--report-every", a->report_every,
                                     "report memory every N collectives (default 1000)")
                          ->check(at_least(1));
                      app.add_option("--backend", a->backend, "auto, shm, gloo or hierarchical");
                      app.add_option("--seed", a->seed, "of the random choices (default 0)");
                      return [a](const std::vector<std::string>&) { return run(*a); };
                    });

}  // namespace
}  // namespace dpx::bench::soak_bench
