#include "conformance/conformance.h"

#include "dpx/runtime/cuda.h"
#include "support/nccl_ranks.h"

namespace dpx::conformance {

std::vector<std::string> backends() { return {"gloo", "shm", "hierarchical", "nccl"}; }

namespace {

// GTEST_SKIP returns from the function it is in, so it lives in one that returns nothing.
void skip(const std::string& why) { GTEST_SKIP() << why; }

}  // namespace

std::string OnBackend::why_not(int world) const {
  if (backend() != "nccl") return "";
  if (!cuda::built()) return "SKIPPED on nccl: dpx was built without CUDA (DPX_CUDA)";
  static const int gpus = test::gpus_seen_by_a_child();
  if (gpus == 0) return "SKIPPED on nccl: no CUDA device here";
  return "";
}

std::vector<test::ProcResult> OnBackend::run(int world, const std::function<void(Rank&)>& body,
                                             RunOptions options) {
  const std::string why = why_not(world);
  if (!why.empty()) {
    skip(why);  // the test goes on with no results; callers that read them check for none
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
