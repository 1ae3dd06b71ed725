// Does the MPI progress a non-blocking collective while the program computes without calling
// it? For each size: the time of MPI_Allreduce (float32 sum); then MPI_Iallreduce, a spin of
// twice that time with no MPI call, and the time MPI_Wait still takes. With asynchronous progress
// the wait is near zero (the reduction ran during the spin); without it, the wait is about the
// whole all-reduce (it ran inside MPI_Wait). The same spin broken by an MPI_Test every 100 us
// shows what polling (dpx's MPI thread does it) buys. Median of the slowest rank over --iters.
//   mpirun.openmpi --oversubscribe -np 2 build/bench/dpx-bench-mpi-progress
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Busy for `seconds`; with `poll`, an MPI_Test of `req` every 100 us.
void spin(double seconds, MPI_Request* req, bool poll) {
  const double end = now() + seconds;
  double next_poll = now();
  int done = 0;
  while (now() < end) {
    if (poll && !done && now() >= next_poll) {
      MPI_Test(req, &done, MPI_STATUS_IGNORE);
      next_poll = now() + 100e-6;
    }
  }
}

double slowest(double t) {
  double out = 0;
  MPI_Allreduce(&t, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int iters = 9;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--iters") iters = std::max(1, std::atoi(argv[i + 1]));
  }
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (rank == 0) {
    std::printf("# progress_mpi: %d ranks; the wait after a spin of 2x the blocking time\n", world);
    std::printf("%10s %14s %16s %18s %16s\n", "size(B)", "blocking(us)", "wait, no MPI(us)",
                "wait, MPI_Test(us)", "wait/blocking");
  }
  for (long long bytes : {64LL << 10, 1LL << 20, 16LL << 20}) {
    std::vector<float> buf(static_cast<size_t>(bytes / 4), 1.0f);
    const int n = static_cast<int>(buf.size());
    std::vector<double> blocking, idle_wait, polled_wait;
    for (int i = 0; i < iters + 1; ++i) {  // the first round warms up
      MPI_Barrier(MPI_COMM_WORLD);
      double t = now();
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      const double block = slowest(now() - t);
      for (const bool poll : {false, true}) {
        MPI_Request req;
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Iallreduce(MPI_IN_PLACE, buf.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
        spin(2 * block, &req, poll);
        t = now();
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        const double wait = slowest(now() - t);
        if (i > 0) (poll ? polled_wait : idle_wait).push_back(wait);
      }
      if (i > 0) blocking.push_back(block);
      std::fill(buf.begin(), buf.end(), 1.0f);  // keep the sums finite
    }
    if (rank == 0) {
      std::printf("%10lld %14.1f %16.1f %18.1f %16.2f\n", bytes, median(blocking) * 1e6,
                  median(idle_wait) * 1e6, median(polled_wait) * 1e6,
                  median(idle_wait) / median(blocking));
    }
  }
  MPI_Finalize();
  return 0;
}
