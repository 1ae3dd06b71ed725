#include "support/checkpoint_files.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/linear.h>
#include <torch/torch.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace dpx::test {

const std::string kVenvPython = DPX_SOURCE_DIR "/.venv/bin/python";

bool run_oracle(const std::string& python, const std::string& args) {
  PythonScript s;
  s.script = "state_dict_oracle.py";
  s.python = python;
  std::istringstream words(args);
  for (std::string w; std::getline(words, w, ' ');) s.args.push_back(w);
  return run_python(s).ok();
}

torch::nn::Sequential make_model() {
  return torch::nn::Sequential(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4),
                               torch::nn::Linear(4, 2));
}

const std::vector<std::string> kModelKeys = {
    "0.weight",       "0.bias",         "1.weight",
    "1.bias",         "1.running_mean", "1.running_var",
    "1.num_batches_tracked", "2.weight", "2.bias"};

torch::nn::Sequential dcp_oracle_model() {
  torch::nn::Sequential m(torch::nn::Linear(6, 7), torch::nn::Tanh(), torch::nn::Linear(7, 2),
                          torch::nn::Linear(2, 5));
  m[3]->to(torch::kBFloat16);
  torch::NoGradGuard no_grad;
  int64_t i = 0;
  for (auto& p : m->parameters()) {
    p.copy_((torch::arange(p.numel(), torch::kDouble).reshape(p.sizes()) * 0.37 -
             static_cast<double>(i++))
                .to(p.scalar_type()));
  }
  return m;
}

torch::nn::Sequential dcp_optim_model() {
  torch::nn::Sequential m(torch::nn::Linear(6, 7), torch::nn::Tanh(), torch::nn::Linear(7, 2));
  torch::NoGradGuard no_grad;
  int64_t i = 0;
  for (auto& p : m->parameters()) {
    p.copy_(torch::arange(p.numel(), torch::kFloat).reshape(p.sizes()) * 0.05 -
            static_cast<double>(i++));
  }
  return m;
}

torch::Tensor dcp_optim_batch() {
  return torch::arange(24, torch::kFloat).reshape({4, 6}) * 0.1 - 1;
}

void write_zip_with_pickle(const std::string& path, const std::string& pickle) {
  std::ofstream out(path, std::ios::binary);
  caffe2::serialize::PyTorchStreamWriter w([&](const void* p, size_t n) {
    out.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
    return n;
  });
  w.writeRecord("data.pkl", pickle.data(), pickle.size());
  w.writeEndOfFile();
}

}  // namespace dpx::test
