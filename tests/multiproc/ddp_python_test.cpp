// dpx DDP against PyTorch's Python DDP (gloo, 2 ranks): same initial weights, same data, same
// optimizer; the final parameters must agree. The Python side is tests/python/ddp_reference.py;
// the exchange format (raw little-endian arrays + meta.json) is described there.
#include <torch/torch.h>

#include <cstdlib>
#include <fstream>

#include "ddp_models.h"
#include "dpx/dpx.h"
#include "harness.h"

namespace dpx {
namespace {

constexpr int kWorld = 2, kPerRank = 8, kSteps = 6;
constexpr double kLr = 0.05, kMomentum = 0.9;

void write_raw(const std::string& path, const torch::Tensor& t) {
  auto c = t.contiguous();
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
}

torch::Tensor read_floats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return torch::from_blob(bytes.data(), {static_cast<std::int64_t>(bytes.size() / 4)},
                          torch::kFloat)
      .clone();
}

torch::Tensor flat_params(test::Cnn& m) {
  std::vector<torch::Tensor> flat;
  for (const auto& p : m->parameters()) flat.push_back(p.detach().reshape({-1}));
  return torch::cat(flat);
}

void write_inputs(const std::string& dir, test::Cnn& init, const std::vector<test::Batch>& data) {
  std::ofstream meta(dir + "/meta.json");
  meta << "{\"world\": " << kWorld << ", \"per_rank\": " << kPerRank << ", \"steps\": " << kSteps
       << ", \"lr\": " << kLr << ", \"momentum\": " << kMomentum
       << ", \"sample_shape\": [1, 8, 8], \"params\": [";
  bool first = true;
  for (const auto& item : init->named_parameters()) {
    meta << (first ? "" : ", ") << "[\"" << item.key() << "\", [";
    for (std::size_t d = 0; d < item.value().sizes().size(); ++d) {
      meta << (d ? ", " : "") << item.value().size(d);
    }
    meta << "]]";
    first = false;
  }
  meta << "]}\n";
  meta.close();
  write_raw(dir + "/init.bin", flat_params(init));
  std::vector<torch::Tensor> xs, ys;
  for (const auto& b : data) {
    xs.push_back(b.x);
    ys.push_back(b.y.to(torch::kLong));
  }
  write_raw(dir + "/x.bin", torch::stack(xs));
  write_raw(dir + "/y.bin", torch::stack(ys));
}

TEST(DdpAgainstPython, SameFinalParameters) {
  if (std::system(DPX_PYTHON " -c 'import torch.distributed' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "SKIPPED: " DPX_PYTHON " (the oracle of LibTorch " DPX_TORCH_VERSION
                    ") cannot import torch; scripts/setup.sh installs it";
  }
  char dir_template[] = "/tmp/dpx-ddp-python-XXXXXX";
  const std::string dir = ::mkdtemp(dir_template);
  auto data = test::make_batches(kSteps, kWorld, kPerRank, {1, 8, 8});
  torch::manual_seed(21);
  test::Cnn init;
  write_inputs(dir, init, data);

  const std::string cmd = "timeout 120 " DPX_PYTHON " " DPX_SOURCE_DIR
                          "/tests/python/ddp_reference.py " + dir + " > " + dir +
                          "/python.log 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream log(dir + "/python.log");
  std::string log_text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  ASSERT_EQ(rc, 0) << "python reference failed:\n" << log_text;

  test::StoreServer server;
  test::expect_all_ok(test::run_processes(kWorld, [&](int rank) {
    torch::set_num_threads(1);
    auto pg = new_process_group("gloo", server.client(), rank, kWorld);
    torch::manual_seed(100 + rank);  // different on each rank: DDP broadcasts rank 0's
    test::Cnn net;
    if (rank == 0) {
      torch::NoGradGuard no_grad;
      auto src = init->parameters();
      auto dst = net->parameters();
      for (std::size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
    }
    DistributedDataParallel ddp(net, pg);
    torch::optim::SGD opt(ddp->parameters(), torch::optim::SGDOptions(kLr).momentum(kMomentum));
    for (int s = 0; s < kSteps; ++s) {
      auto b = test::slice(data[s], rank, kWorld);
      opt.zero_grad();
      torch::nn::functional::cross_entropy(ddp->forward(b.x), b.y).backward();
      opt.step();
    }
    if (rank == 0) write_raw(dir + "/dpx_final.bin", flat_params(net));
  }));
  auto python = read_floats(dir + "/python_final.bin");
  auto ours = read_floats(dir + "/dpx_final.bin");
  ASSERT_EQ(python.numel(), ours.numel());
  EXPECT_TRUE(torch::allclose(ours, python, 1.3e-6 * kSteps, 5e-5))
      << "max abs diff " << (ours - python).abs().max().item<double>();
  for (const char* f : {"meta.json", "init.bin", "x.bin", "y.bin", "python_final.bin",
                        "dpx_final.bin", "python.log"}) {
    std::remove((dir + "/" + f).c_str());
  }
  ::rmdir(dir.c_str());
}

}  // namespace
}  // namespace dpx
