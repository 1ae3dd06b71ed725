// A 2-rank float32 sum three ways, in raw MPI, alternated round by round: MPI_Allreduce, the
// ring's two rounds of half the tensor each (Note [Ring all-reduce] in
// src/comm/backends/mpi/ring.h) and one exchange of the whole tensor (Note [Pair exchange]),
// both of MPI_Isend/MPI_Irecv polled with MPI_Testall as dpx's MPI thread polls them, each round
// followed by MPI_Reduce_local. What the crossovers of the pair exchange were chosen from.
// Median and least time per call over --rounds rounds of --reps calls, on rank 0.
//   mpirun.openmpi --oversubscribe -np 2 build/bench/dpx-bench-mpi-pair
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

void wait_polling(MPI_Request* requests) {
  int done = 0;
  while (!done) MPI_Testall(2, requests, &done, MPI_STATUSES_IGNORE);
}

// Round 0 sends the half the peer reduces and receives the half this rank reduces; round 1
// sends the reduced half and receives the other, in place.
void ring(std::vector<float>& t, std::vector<float>& scratch, int rank) {
  const int half = static_cast<int>(t.size() / 2);
  const int peer = 1 - rank;
  float* mine = t.data() + (rank == 0 ? 0 : half);
  float* theirs = t.data() + (rank == 0 ? half : 0);
  MPI_Request r[2];
  MPI_Irecv(scratch.data(), half, MPI_FLOAT, peer, 1, MPI_COMM_WORLD, &r[1]);
  MPI_Isend(theirs, half, MPI_FLOAT, peer, 1, MPI_COMM_WORLD, &r[0]);
  wait_polling(r);
  MPI_Reduce_local(scratch.data(), mine, half, MPI_FLOAT, MPI_SUM);
  MPI_Irecv(theirs, half, MPI_FLOAT, peer, 2, MPI_COMM_WORLD, &r[1]);
  MPI_Isend(mine, half, MPI_FLOAT, peer, 2, MPI_COMM_WORLD, &r[0]);
  wait_polling(r);
}

void pair(std::vector<float>& t, std::vector<float>& scratch, int rank) {
  const int n = static_cast<int>(t.size());
  MPI_Request r[2];
  MPI_Irecv(scratch.data(), n, MPI_FLOAT, 1 - rank, 3, MPI_COMM_WORLD, &r[1]);
  MPI_Isend(t.data(), n, MPI_FLOAT, 1 - rank, 3, MPI_COMM_WORLD, &r[0]);
  wait_polling(r);
  MPI_Reduce_local(scratch.data(), t.data(), n, MPI_FLOAT, MPI_SUM);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rounds = 15;
  int reps = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--rounds") rounds = std::max(1, std::atoi(argv[i + 1]));
    if (std::string(argv[i]) == "--reps") reps = std::max(1, std::atoi(argv[i + 1]));
  }
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world != 2) {
    if (rank == 0) std::fprintf(stderr, "pair_mpi: runs on 2 ranks (mpirun -np 2)\n");
    MPI_Finalize();
    return 2;
  }
  const char* names[] = {"MPI_Allreduce", "ring", "pair"};
  if (rank == 0) {
    std::printf("# pair_mpi: 2 ranks, float32 sum, us per call: median (least) of %d rounds\n",
                rounds);
    std::printf("%10s %18s %18s %18s %12s\n", "size(B)", names[0], names[1], names[2],
                "pair/ring");
  }
  for (int bytes : {4096, 8192, 16384, 32768, 65536, 98304, 131072, 262144}) {
    std::vector<float> t(static_cast<std::size_t>(bytes / 4), 1.0f);
    std::vector<float> scratch(t.size());
    std::vector<double> us[3];
    for (int r = 0; r < rounds; ++r) {
      for (int v = 0; v < 3; ++v) {
        MPI_Barrier(MPI_COMM_WORLD);
        const auto start = std::chrono::steady_clock::now();
        for (int k = 0; k < reps; ++k) {
          if (v == 0) {
            MPI_Allreduce(MPI_IN_PLACE, t.data(), static_cast<int>(t.size()), MPI_FLOAT, MPI_SUM,
                          MPI_COMM_WORLD);
          } else if (v == 1) {
            ring(t, scratch, rank);
          } else {
            pair(t, scratch, rank);
          }
          if (t[0] > 1e30f) std::fill(t.begin(), t.end(), 1.0f);  // keep the sums finite
        }
        us[v].push_back(std::chrono::duration<double, std::micro>(
                            std::chrono::steady_clock::now() - start).count() / reps);
      }
    }
    double median[3], least[3];
    for (int v = 0; v < 3; ++v) {
      std::sort(us[v].begin(), us[v].end());
      median[v] = us[v][us[v].size() / 2];
      least[v] = us[v].front();
    }
    if (rank == 0) {
      std::printf("%10d %9.2f (%6.2f) %9.2f (%6.2f) %9.2f (%6.2f) %12.2f\n", bytes, median[0],
                  least[0], median[1], least[1], median[2], least[2], median[2] / median[1]);
    }
  }
  MPI_Finalize();
  return 0;
}
