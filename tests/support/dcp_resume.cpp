#include "support/dcp_resume.h"

#include <gtest/gtest.h>

#include "dpx/checkpoint/dcp_checkpointer.h"
#include "dpx/checkpoint/fsdp_checkpoint.h"
#include "dpx/checkpoint/python_format.h"
#include "dpx/fsdp/fsdp_state_dict.h"
#include "dpx/fsdp/fully_shard.h"
#include "support/checkpoint_files.h"

namespace dpx::test {

DcpReplica::DcpReplica(bool sharded, const std::shared_ptr<ProcessGroup>& pg)
    : net(dcp_optim_model()) {
  if (sharded) {
    fully_shard(net[2], pg);
    auto model = fully_shard(net, pg);
    forward = [model](const torch::Tensor& x) mutable { return model(x); };
  } else {
    forward = [n = net](const torch::Tensor& x) mutable { return n->forward(x); };
  }
}

void DcpReplica::train(torch::optim::Optimizer& opt, int steps) {
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    forward(dcp_optim_batch()).pow(2).sum().backward();
    opt.step();
  }
}

c10::impl::GenericDict DcpReplica::whole_state(bool sharded) const {
  auto dict = c10::impl::GenericDict(c10::StringType::get(), c10::TensorType::get());
  const auto state = sharded ? full_state_dict(*net, {.rank0_only = false}) : state_dict(*net);
  for (const auto& [name, t] : state) dict.insert(name, t);
  return dict;
}

torch::optim::Adam dcp_adam(const DcpReplica& r) {
  return torch::optim::Adam(r.net->parameters(),
                            torch::optim::AdamOptions(0.05).betas({0.8, 0.95}).weight_decay(0.1));
}

void expect_same_dict(const c10::impl::GenericDict& got, const c10::impl::GenericDict& want,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& e : want) {
    ASSERT_TRUE(got.contains(e.key())) << what << " " << e.key();
    if (e.value().isTensor()) {
      EXPECT_TRUE(torch::equal(got.at(e.key()).toTensor(), e.value().toTensor()))
          << what << " " << e.key().toStringRef();
    } else {
      expect_same_dict(got.at(e.key()).toGenericDict(), e.value().toGenericDict(),
                       what + " " + e.key().toStringRef());
    }
  }
}

void dcp_train_and_save(const std::shared_ptr<ProcessGroup>& pg, bool sharded,
                        const std::string& dir) {
  DcpReplica r(sharded, pg);
  auto adam = dcp_adam(r);
  r.train(adam, 3);
  DcpCheckpointer ckpt({.directory = dir}, pg);
  EXPECT_EQ(ckpt.save(*r.net, adam, kDcpProgress), ckpt.path_for_step(3));
  const auto model = r.whole_state(sharded);
  const auto optim = full_optimizer_state_dict(*r.net, adam, {.rank0_only = false});
  if (pg->rank() == 0) {
    torch_save(model, ckpt.path_for_step(3) + "-model.pt");
    torch_save(optim, ckpt.path_for_step(3) + "-optim.pt");
  }
}

void expect_dcp_resumes(const std::shared_ptr<ProcessGroup>& pg, bool sharded,
                        const std::string& dir) {
  const std::string saved = dir + "/dcp-3";
  DcpReplica r(sharded, pg);
  torch::optim::Adam adam(r.net->parameters());  // defaults: the checkpoint's replace them
  const auto progress = DcpCheckpointer({.directory = dir}, pg).load_latest(*r.net, adam);
  ASSERT_TRUE(progress.has_value());
  EXPECT_EQ(progress->epoch, kDcpProgress.epoch);
  EXPECT_EQ(progress->step, kDcpProgress.step);
  EXPECT_EQ(progress->sampler_position, kDcpProgress.sampler_position);
  expect_same_dict(r.whole_state(sharded), torch_load(saved + "-model.pt").toGenericDict(),
                   "model");
  const auto optim = full_optimizer_state_dict(*r.net, adam, {.rank0_only = false});
  expect_same_dict(optim.toGenericDict().at("state").toGenericDict(),
                   torch_load(saved + "-optim.pt").toGenericDict().at("state").toGenericDict(),
                   "optimizer state");
  const auto& options =
      static_cast<const torch::optim::AdamOptions&>(adam.param_groups()[0].options());
  EXPECT_DOUBLE_EQ(options.lr(), 0.05);
  EXPECT_DOUBLE_EQ(options.weight_decay(), 0.1);
}

}  // namespace dpx::test
