#include "conformance/conformance.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "dpx/runtime/cuda.h"
#include "mpi/mpi_group.h"
#include "support/nccl_ranks.h"

namespace dpx::conformance {

// Note [Conformance under mpirun]
// Under an MPI launcher (tests/scripts/mpi.cmake: conformance.mpi.np2, np3, np4) every process
// is one rank: the cases run on the mpi backend alone, each with this process's MPI rank instead
// of forked ranks, on a fresh mpi group and a fresh file store for the case's own keys. A case
// runs where mpirun started as many ranks as it asks for, or at any size where it holds at any
// (RunOptions::any_world); cases that kill a rank do not run, since that ends the MPI job
// (mpi.killed_rank shows what mpirun does then). Every rank runs the same cases in the same
// order and skips the same ones, as MPI's collectives need.
namespace {

// The world size the MPI launcher gave this process (OpenMPI's mpirun, else MPICH's Hydra), or
// 0 when it was not started by one.
int launcher_world_size() {
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (!size) size = std::getenv("PMI_SIZE");
  return size ? std::atoi(size) : 0;
}

// GTEST_SKIP returns from the function it is in, so it lives in one that returns nothing.
void skip(const std::string& why) { GTEST_SKIP() << why; }

// Runs body as this process's MPI rank (Note [Conformance under mpirun]).
void run_as_mpi_rank(const std::function<void(Rank&)>& body, const RunOptions& options) {
  auto world = mpi_test::mpi_group(options.timeout);
  // The store's file is named after rank 0's pid and the case's number, so no case reads
  // another's keys.
  static std::int64_t cases = 0;
  auto id = at::tensor({static_cast<std::int64_t>(::getpid()), cases++}, at::kLong);
  world->broadcast(id, {0})->wait();
  const std::string path = "/tmp/dpx_conformance_mpi_" +
                           std::to_string(id[0].item<std::int64_t>()) + "_" +
                           std::to_string(id[1].item<std::int64_t>());
  torch::set_num_threads(1);  // as a forked rank does: mpirun oversubscribes the cores
  {
    Rank r;
    r.rank = world->rank();
    r.world = world->size();
    r.store = Store::file(path, r.world);
    ProcessGroup::Options o = test::with_timeout(options.timeout);
    o.stall_threshold = options.stall_threshold;
    r.pg = new_process_group("mpi", r.store, r.rank, r.world, o);
    try {
      body(r);
    } catch (const std::exception& e) {
      // As a forked rank would exit 1 with it; the others learn of it from their collectives.
      ADD_FAILURE() << "rank " << r.rank << " threw: " << e.what();
    }
  }
  world->barrier()->wait();  // every rank has let go of the store
  if (world->rank() == 0) std::remove(path.c_str());
}

}  // namespace

std::vector<std::string> backends() {
  if (launcher_world_size() > 0) return {"mpi"};
  return {"gloo", "shm", "hierarchical", "nccl"};
}

std::string OnBackend::why_not(int world, const RunOptions& options) const {
  if (backend() == "mpi") {
    if (!options.expect_all_ok) {
      return "SKIPPED on mpi: the case kills a rank, which ends the whole MPI job";
    }
    const int size = launcher_world_size();
    if (!options.any_world && size != world) {
      return "SKIPPED on mpi: the case needs " + std::to_string(world) + " ranks, mpirun started " +
             std::to_string(size) + " (conformance.mpi.np" + std::to_string(world) + " runs it)";
    }
    return "";
  }
  if (backend() != "nccl") return "";
  if (!cuda::built()) return "SKIPPED on nccl: dpx was built without CUDA (DPX_CUDA)";
  static const int gpus = test::gpus_seen_by_a_child();
  if (gpus == 0) return "SKIPPED on nccl: no CUDA device here";
  return "";
}

std::vector<test::ProcResult> OnBackend::run(int world, const std::function<void(Rank&)>& body,
                                             RunOptions options) {
  const std::string why = why_not(world, options);
  if (!why.empty()) {
    skip(why);  // the test goes on with no results; callers that read them check for none
    return {};
  }
  if (backend() == "mpi") {
    run_as_mpi_rank(body, options);
    return {};
  }
  test::StoreServer server;
  test::ProcOptions procs;
  procs.timeout = options.timeout + std::chrono::seconds(60);
  auto results = test::run_processes(
      world,
      [&](int rank) {
        torch::set_num_threads(1);
        Rank r;
        r.rank = rank;
        r.world = world;
        r.store = server.client();
        if (backend() == "nccl") {
          static const int gpus = test::gpus_seen_by_a_child();
          r.device = test::nccl_rank_device(rank, world, gpus);
        }
        ProcessGroup::Options o = test::with_timeout(options.timeout);
        o.device = r.device;
        o.stall_threshold = options.stall_threshold;
        r.pg = new_process_group(backend(), server.client(), rank, world, o);
        body(r);
      },
      procs);
  if (options.expect_all_ok) test::expect_all_ok(results);
  return results;
}

std::vector<at::Tensor> gather(Rank& r, const at::Tensor& t) {
  auto input = t.detach().contiguous().to(r.device);
  auto output = at::empty({r.world * input.numel()}, input.options());
  r.pg->allgather(output, input.reshape({-1}))->wait();
  auto cpu = output.cpu();
  std::vector<at::Tensor> out;
  for (int i = 0; i < r.world; ++i) {
    out.push_back(cpu.narrow(0, i * input.numel(), input.numel()).view(t.sizes()));
  }
  return out;
}

at::Tensor flat(torch::nn::Module& module) {
  std::vector<at::Tensor> parts;
  for (const auto& p : module.parameters()) {
    parts.push_back(p.detach().cpu().to(at::kDouble).reshape({-1}));
  }
  return at::cat(parts);
}

void expect_same_on_every_rank(Rank& r, const at::Tensor& t, const std::string& what) {
  const auto all = gather(r, t);
  for (int i = 1; i < r.world; ++i) {
    EXPECT_TRUE(at::equal(all[0], all[i])) << what << ": rank " << i << " differs from rank 0";
  }
}

namespace {

std::string backend_name(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Backends, DistributedTest, ::testing::ValuesIn(backends()),
                         backend_name);
INSTANTIATE_TEST_SUITE_P(Backends, ProcessGroupGlooTest, ::testing::ValuesIn(backends()),
                         backend_name);

}  // namespace dpx::conformance
