#include "support/ddp_python.h"

#include <torch/torch.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "dpx/algorithms/local_sgd.h"
#include "dpx/algorithms/powersgd.h"
#include "dpx/dpx.h"
#include "support/ddp_python_run.h"

namespace dpx::test::python {
namespace {

const std::vector<int> kJoinSteps = {2, 5, 4};

std::vector<double> flat_doubles(const std::vector<torch::Tensor>& parts) {
  std::vector<double> out;
  for (const auto& t : parts) {
    auto flat = t.detach().cpu().to(at::kDouble).contiguous().reshape({-1});
    out.insert(out.end(), flat.data_ptr<double>(), flat.data_ptr<double>() + flat.numel());
  }
  return out;
}

// The form ddp_reference.py writes python_state_rank<R>.json in.
nlohmann::json state_of(torch::nn::Module& m) {
  nlohmann::json j;
  std::vector<torch::Tensor> grads;
  for (const auto& p : m.parameters()) grads.push_back(p.grad());
  j["params"] = flat_doubles(m.parameters());
  j["grads"] = flat_doubles(grads);
  for (const auto& item : m.named_buffers()) j["buffers"][item.key()] = flat_doubles({item.value()});
  return j;
}

void expect_close(const nlohmann::json& got, const nlohmann::json& want, const std::string& what) {
  const auto g = torch::tensor(got.get<std::vector<double>>(), at::kDouble);
  const auto w = torch::tensor(want.get<std::vector<double>>(), at::kDouble);
  EXPECT_TRUE(test::close_to_pytorch(g, w, kRtol, kAtol)) << what;
}

// PyTorch 1.13 (the oracle of the LibTorch 1.13 build) still sends buffers with the parameters
// when join ends even without broadcast_buffers, where 2.x and dpx do not; there only the last
// joiner's buffers, which it sends and keeps, are comparable.
bool oracle_sends_buffers_at_end() { return std::string(DPX_TORCH_VERSION).rfind("1.", 0) == 0; }

}  // namespace

std::string join_meta(bool broadcast_buffers) {
  return std::string(R"(, "join": {"steps": [2, 5, 4], "broadcast_buffers": )") +
         (broadcast_buffers ? "true}" : "false}");
}

void train_in_join(const std::shared_ptr<ProcessGroup>& pg, test::Cnn& init,
                   const std::vector<test::Batch>& data, bool broadcast_buffers,
                   const std::string& dir) {
  const int rank = pg->rank();
  auto net = start_model(rank, init);
  DistributedDataParallelOptions o;
  o.broadcast_buffers = broadcast_buffers;
  DistributedDataParallel ddp(net, pg, o);
  torch::optim::SGD opt(ddp->parameters(), torch::optim::SGDOptions(kLr).momentum(kMomentum));
  ddp->join([&] {
    for (int s = 0; s < kJoinSteps[rank]; ++s) {
      auto b = test::slice(data[s], rank, kJoinWorld);
      opt.zero_grad();
      torch::nn::functional::cross_entropy(ddp(b.x), b.y).backward();
      opt.step();
    }
  });
  std::ofstream(dir + "/dpx_state_rank" + std::to_string(rank) + ".json") << state_of(*net).dump();
}

void expect_join_matches_python(const std::string& dir, bool broadcast_buffers) {
  for (int r = 0; r < kJoinWorld; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const auto name = "_state_rank" + std::to_string(r) + ".json";
    const auto want = nlohmann::json::parse(test::read_file(dir + "/python" + name));
    const auto got = nlohmann::json::parse(test::read_file(dir + "/dpx" + name));
    expect_close(got["params"], want["params"], "parameters");
    expect_close(got["grads"], want["grads"], "gradients");
    if (!broadcast_buffers && oracle_sends_buffers_at_end() && r != 1) continue;
    for (const char* b : {"bn.running_mean", "bn.running_var"}) {
      expect_close(got["buffers"][b], want["buffers"][b], b);
    }
    EXPECT_EQ(got["buffers"]["bn.num_batches_tracked"],
              want["buffers"]["bn.num_batches_tracked"]);
  }
}

const char kPowerSgdMeta[] = R"(, "powersgd": {"rank": 2, "start_iter": 2})";

void train_with_powersgd(const std::shared_ptr<ProcessGroup>& pg, test::Cnn& init,
                         const std::vector<test::Batch>& data, const std::string& dir) {
  auto net = start_model(pg->rank(), init);
  DistributedDataParallel ddp(net, pg);
  hooks::PowerSGDOptions po;
  po.matrix_approximation_rank = 2;
  po.start_powersgd_iter = 2;
  auto state = std::make_shared<hooks::PowerSGDState>(po);
  ddp->register_comm_hook(state, hooks::powersgd_hook);
  torch::optim::SGD opt(ddp->parameters(), torch::optim::SGDOptions(kLr).momentum(kMomentum));
  train(ddp, opt, data, pg->rank());
  EXPECT_LT(state->numel_after_compression(), state->numel_before_compression());
  if (pg->rank() == 0) write_raw(dir + "/dpx_final.bin", flat_params(net));
}

const char kPostLocalSgdMeta[] = R"(, "post_local_sgd": {"start_iter": 2, "period": 2, "warmup": 2})";

void train_with_post_local_sgd(const std::shared_ptr<ProcessGroup>& pg, test::Cnn& init,
                               const std::vector<test::Batch>& data, const std::string& dir) {
  auto net = start_model(pg->rank(), init);
  DistributedDataParallel ddp(net, pg);
  hooks::PostLocalSGDState state;
  state.start_local_sgd_iter = 2;
  state.post_local_gradient_allreduce = false;
  ddp->register_comm_hook(state, hooks::post_local_sgd_hook);
  PostLocalSGDOptimizer opt(
      std::make_shared<torch::optim::SGD>(ddp->parameters(),
                                          torch::optim::SGDOptions(kLr).momentum(kMomentum)),
      std::make_shared<PeriodicModelAverager>(2, pg, 2));
  train(ddp, opt, data, pg->rank());
  write_raw(dir + "/dpx_final_rank" + std::to_string(pg->rank()) + ".bin", flat_params(net));
}

void expect_post_local_sgd_matches_python(const std::string& dir) {
  for (int r = 0; r < kWorld; ++r) {
    const auto suffix = "_rank" + std::to_string(r) + ".bin";
    expect_same_params(dir + "/python_final" + suffix, dir + "/dpx_final" + suffix);
  }
  // The last step is not an averaging one.
  EXPECT_FALSE(torch::allclose(read_floats(dir + "/dpx_final_rank0.bin"),
                               read_floats(dir + "/dpx_final_rank1.bin")));
}

}  // namespace dpx::test::python
