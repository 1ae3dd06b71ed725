#include "support/full_state_checks.h"

#include <algorithm>
#include <gtest/gtest.h>

#include <cstdlib>

#include "dpx/checkpoint/python_format.h"
#include "dpx/checkpoint/fsdp_checkpoint.h"
#include "dpx/fsdp/fsdp_state_dict.h"
#include "support/fsdp_models.h"
#include "support/sharded_resume.h"
#include "support/temp_dir.h"

namespace dpx::test {

void save_and_reload_full_state_dict(const std::shared_ptr<ProcessGroup>& pg,
                                     const std::string& path) {
  const int rank = pg->rank();
  const int64_t rows = kShardedBatch / pg->size();
  auto net = make_shard_net(/*tied=*/true);
  auto model = shard(net, pg);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1));
  for (int s = 0; s < 2; ++s) {
    opt.zero_grad();
    model(sharded_batch_x(s).narrow(0, rows * rank, rows)).square().mean().backward();
    opt.step();
  }
  save_full_state_dict(*net, path);
  auto expected = full_state_dict(*net, {.rank0_only = false});
  if (rank == 0) {  // an unsharded module of the same class takes the file as it is
    auto plain = make_shard_net(/*tied=*/true);
    load_state_dict(*plain, path);
    const auto got = named_state(*plain);
    EXPECT_EQ(got.size(), expected.size());  // not ASSERT: rank 0 must join the reload below
    for (std::size_t i = 0; i < std::min(got.size(), expected.size()); ++i) {
      EXPECT_TRUE(got[i].second.equal(expected[i].second)) << got[i].first;
    }
  }
  // And back into a freshly sharded module: each rank takes its rows.
  auto again = make_shard_net(/*tied=*/true);
  shard(again, pg);
  load_full_state_dict(*again, path);
  const auto reloaded = full_state_dict(*again, {.rank0_only = false});
  for (std::size_t i = 0; i < reloaded.size(); ++i) {
    EXPECT_TRUE(reloaded[i].second.equal(expected[i].second)) << reloaded[i].first;
  }
}

void expect_python_reads_full_state_dict(const std::string& path, const std::string& dir) {
  const std::string check = DPX_PYTHON " -c \"import torch, sys; d = torch.load(sys.argv[1], "
                            "weights_only=True); print(sorted((k, tuple(v.shape)) for k, v in "
                            "d.items()))\" " + path + " > " + dir + "/python.txt 2>&1";
  if (std::system(check.c_str()) != 0) {
    ADD_FAILURE() << "python could not read the file: " << read_file(dir + "/python.txt");
    return;
  }
  const auto text = read_file(dir + "/python.txt");
  EXPECT_NE(text.find("('blocks0.fc.weight', (13, 8))"), std::string::npos) << text;
  EXPECT_NE(text.find("('head_weight', (8, 6))"), std::string::npos) << text;
  EXPECT_NE(text.find("('embed.weight', (8, 6))"), std::string::npos) << text;
  EXPECT_NE(text.find("('scale', (6,))"), std::string::npos) << text;
}

}  // namespace dpx::test
