// The OpenMPI baseline of `dpx-bench allreduce`: MPI_Allreduce (float32 sum, in place) over the
// same size sweep, timed and reported the same way (median over iterations of the slowest
// rank's time; algbw = bytes / time, busbw = algbw * 2 (n - 1) / n), checked at every size.
//   mpirun --oversubscribe --allow-run-as-root -np 2 build/bench/dpx-bench-mpi-allreduce
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Args {
  long long min_bytes = 4, max_bytes = 256LL << 20;
  int iters = 0, warmup = 3;
  double seconds = 0.3;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--min-bytes") a.min_bytes = std::atoll(argv[i + 1]);
    else if (k == "--max-bytes") a.max_bytes = std::atoll(argv[i + 1]);
    else if (k == "--iters") a.iters = std::atoi(argv[i + 1]);
    else if (k == "--warmup") a.warmup = std::atoi(argv[i + 1]);
    else if (k == "--seconds") a.seconds = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      std::exit(2);
    }
  }
  return a;
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const Args a = parse(argc, argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (rank == 0) {
    std::printf("# allreduce_mpi: MPI_Allreduce, %d ranks, float32 sum\n", world);
    std::printf("%12s %7s %12s %10s %10s %6s\n", "size(B)", "iters", "time(us)", "algbw(GB/s)",
                "busbw(GB/s)", "check");
  }
  int failed = 0;
  for (long long bytes = a.min_bytes; bytes <= a.max_bytes; bytes *= 2) {
    const long long n = std::max(1LL, bytes / 4);
    std::vector<float> buf(n, float(rank + 1));
    MPI_Allreduce(MPI_IN_PLACE, buf.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    int ok = std::all_of(buf.begin(), buf.end(),
                         [&](float x) { return x == world * (world + 1) / 2; });
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    failed |= !ok;
    double t0 = now();
    for (int i = 0; i < a.warmup; ++i) {
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    int iters = a.iters;
    if (iters == 0) {
      double per = (now() - t0) / std::max(1, a.warmup);
      iters = static_cast<int>(std::clamp(a.seconds / std::max(per, 1e-9), 5.0, 1000.0));
    }
    MPI_Bcast(&iters, 1, MPI_INT, 0, MPI_COMM_WORLD);
    std::vector<double> times(iters);
    for (int i = 0; i < iters; ++i) {
      double s = now();
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      times[i] = now() - s;
    }
    MPI_Allreduce(MPI_IN_PLACE, times.data(), iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    // The lower median, as torch.median (dpx-bench) takes it.
    std::nth_element(times.begin(), times.begin() + (iters - 1) / 2, times.end());
    const double sec = times[(iters - 1) / 2];
    const double algbw = n * 4.0 / sec / 1e9;
    if (rank == 0) {
      std::printf("%12lld %7d %12.2f %11.3f %11.3f %6s\n", n * 4, iters, sec * 1e6, algbw,
                  algbw * 2.0 * (world - 1) / world, ok ? "ok" : "FAIL");
      std::fflush(stdout);
    }
  }
  MPI_Finalize();
  return failed ? 1 : 0;
}
