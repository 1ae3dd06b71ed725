/* Why dpx's mpi backend makes one communicator at a time (Note [One creation at a time] in
 * src/comm/backends/mpi/setup.h): plain MPI, no dpx. Each round both ranks make two
 * duplicates of MPI_COMM_WORLD with MPI_Comm_idup, while each rank keeps a different random set
 * of its own communicators (duplicates of MPI_COMM_SELF, some freed), so the context ids the
 * ranks have free differ. "1" issues the second MPI_Comm_idup only once the first completed;
 * a second argument "alike" gives both ranks the same held set (the same seed), the control.
 * With OpenMPI 4.1.4 on 2 ranks, two in flight left a rank waiting for ever in 5 runs of 5 (in
 * rounds 20-217); one at a time, all 300 rounds passed in 5 runs of 5, and so did two in flight
 * with the held sets alike (5 of 5).
 *   mpicc.openmpi -O2 idup_in_flight.c -o idup_in_flight
 *   mpirun.openmpi -np 2 ./idup_in_flight 0   # two in flight: "round N: stuck", exit 2
 *   mpirun.openmpi -np 2 ./idup_in_flight 1   # one at a time: "300 rounds passed"
 *   mpirun.openmpi -np 2 ./idup_in_flight 0 alike   # the control: "300 rounds passed" */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Tests `r` until it completes; ends the process after 5 s. */
static void finish(MPI_Request* r, int n, int rank, int round) {
  const double t0 = now();
  int done = 0;
  while (!done) {
    MPI_Testall(n, r, &done, MPI_STATUSES_IGNORE);
    if (now() - t0 > 5) {
      printf("rank %d, round %d: stuck\n", rank, round);
      fflush(stdout);
      _exit(2);
    }
  }
}

int main(int argc, char** argv) {
  int provided, rank;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int one_at_a_time = argc > 1 && atoi(argv[1]);
  const int alike = argc > 2 && strcmp(argv[2], "alike") == 0;
  srand(alike ? 1234 : 1234 + 977 * rank);
  MPI_Comm held[32];
  int n = 0;
  for (int round = 0; round < 300; ++round) {
    if (n < 32 && rand() % 2) MPI_Comm_dup(MPI_COMM_SELF, &held[n++]);
    if (n > 0 && rand() % 3 == 0) {
      const int i = rand() % n;
      MPI_Comm_free(&held[i]);
      held[i] = held[--n];
    }
    MPI_Comm c[2];
    MPI_Request r[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    MPI_Comm_idup(MPI_COMM_WORLD, &c[0], &r[0]);
    if (one_at_a_time) finish(&r[0], 1, rank, round);
    MPI_Comm_idup(MPI_COMM_WORLD, &c[1], &r[1]);
    finish(r, 2, rank, round);
    int one = 1, sum[2];
    MPI_Allreduce(&one, &sum[0], 1, MPI_INT, MPI_SUM, c[0]);
    MPI_Allreduce(&one, &sum[1], 1, MPI_INT, MPI_SUM, c[1]);
    if (sum[0] != 2 || sum[1] != 2) {
      printf("rank %d, round %d: sums %d %d\n", rank, round, sum[0], sum[1]);
      _exit(3);
    }
    MPI_Comm_free(&c[0]);
    MPI_Comm_free(&c[1]);
  }
  if (rank == 0) printf("%s: 300 rounds passed\n", one_at_a_time ? "one at a time" : "two in flight");
  MPI_Finalize();
  return 0;
}
