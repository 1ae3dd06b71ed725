// Runs PyTorch's Python DDP (tests/python/ddp_reference.py) on the model and data a test
// wrote, for the tests that compare dpx with it (forked ranks in tests/multiproc/, processes
// under mpirun in tests/mpi/); the exchange format (raw little-endian arrays + meta.json) is
// described in ddp_reference.py. Running it and comparing with it go through
// support/python_oracle.h, as every test with a Python oracle does.
#pragma once

#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "multiproc/ddp_models.h"
#include "support/harness.h"
#include "support/python_oracle.h"
#include "support/temp_dir.h"

namespace dpx::test::python {

constexpr int kWorld = 2, kPerRank = 8, kSteps = 6;
constexpr double kLr = 0.05, kMomentum = 0.9;
// dpx's float32 results and PyTorch's after kSteps steps (the sums in another order) agree to
// this, as test::close_to_pytorch's rtol and atol.
constexpr double kRtol = 1.3e-6 * kSteps, kAtol = 5e-5;

inline void write_raw(const std::string& path, const torch::Tensor& t) {
  auto c = t.contiguous();
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
}

inline torch::Tensor read_floats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return torch::from_blob(bytes.data(), {static_cast<std::int64_t>(bytes.size() / 4)},
                          torch::kFloat)
      .clone();
}

// Passes when dpx's parameters in `dpx_file` are PyTorch's in `python_file` (kRtol, kAtol).
inline void expect_same_params(const std::string& python_file, const std::string& dpx_file) {
  EXPECT_TRUE(test::close_to_pytorch(read_floats(dpx_file), read_floats(python_file), kRtol, kAtol));
}

inline torch::Tensor flat_params(test::Cnn& m) {
  std::vector<torch::Tensor> flat;
  for (const auto& p : m->parameters()) flat.push_back(p.detach().reshape({-1}));
  return torch::cat(flat);
}

// extra_meta: more members of meta.json, each starting with ", ".
inline void write_inputs(const std::string& dir, test::Cnn& init,
                         const std::vector<test::Batch>& data,
                         const std::string& extra_meta = "", int world = kWorld) {
  std::ofstream meta(dir + "/meta.json");
  meta << "{\"world\": " << world << ", \"per_rank\": " << kPerRank << ", \"steps\": " << kSteps
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
  meta << "]" << extra_meta << "}\n";
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

#define DPX_SKIP_WITHOUT_PYTHON() DPX_SKIP_UNLESS_PYTHON_HAS(DPX_PYTHON, "torch.distributed")

// Runs ddp_reference.py on the inputs in `dir`; its output goes to dir/python.log.
// PyTorch's own gloo process group has been seen to abort its Python process on a loaded machine
// ("terminate called without an active exception"), a fault of the oracle and not of dpx, so a
// failed run gets one more try from a fresh store file; the log keeps both attempts.
inline bool run_reference(const std::string& dir) {
  test::PythonScript s;
  s.script = "ddp_reference.py";
  s.args = {dir};
  s.log = dir + "/python.log";
  s.attempts = 2;
  s.before_attempt = [dir] { std::remove((dir + "/store").c_str()); };
  return test::run_python(s).ok();
}

// The data PythonRun writes: the same on every rank and in every process (seeded).
inline std::vector<test::Batch> python_data(int world = kWorld) {
  return test::make_batches(kSteps, world, kPerRank, {1, 8, 8});
}

// A scratch folder with the inputs written and Python's run done; removed with what is in it.
class PythonRun {
 public:
  explicit PythonRun(const std::string& extra_meta = "", int world = kWorld) {
    data_ = python_data(world);
    torch::manual_seed(21);
    write_inputs(dir(), init_, data_, extra_meta, world);
    ok_ = run_reference(dir());
  }
  bool ok() const { return ok_; }
  std::string log() const { return test::read_file(dir_ / "python.log"); }
  const std::string& dir() const { return dir_.path(); }
  test::Cnn& init() { return init_; }
  const std::vector<test::Batch>& data() const { return data_; }

 private:
  test::TempDir dir_;
  std::vector<test::Batch> data_;
  test::Cnn init_;
  bool ok_ = false;
};

// kSteps steps of `opt` on this rank's slices of `data`, as ddp_reference.py takes them.
template <typename Ddp>
void train(Ddp& ddp, torch::optim::Optimizer& opt, const std::vector<test::Batch>& data, int rank,
           int world = kWorld) {
  for (int s = 0; s < kSteps; ++s) {
    auto b = test::slice(data[s], rank, world);
    opt.zero_grad();
    torch::nn::functional::cross_entropy(ddp->forward(b.x), b.y).backward();
    opt.step();
  }
}

// A rank's model: rank 0 starts from `init`, the others from other weights (DDP broadcasts).
template <typename Net>
Net start_model(int rank, Net& init) {
  torch::manual_seed(100 + rank);
  Net net;
  if (rank == 0) {
    torch::NoGradGuard no_grad;
    auto src = init->parameters();
    auto dst = net->parameters();
    for (std::size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  }
  return net;
}

}  // namespace dpx::test::python
