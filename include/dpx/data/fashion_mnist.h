// Fashion-MNIST (Zalando: 28x28 grey images of 10 clothing classes) read from the gzipped IDX files
// that Debian's package dataset-fashion-mnist installs. Shaped like LibTorch's
// torch::data::datasets::MNIST: images are float [1, 28, 28] in [0, 1], targets int64. The
// decoded pixels are kept once per host, as bytes in a mapped file that every process reading
// the same files shares (docs/data.md; DPX_DATA_CACHE).
#pragma once

#include <torch/data/datasets/base.h>
#include <torch/data/example.h>
#include <torch/types.h>

#include <string>

namespace dpx {

class FashionMNIST : public torch::data::datasets::Dataset<FashionMNIST> {
 public:
  enum class Mode { kTrain, kTest };
  static constexpr const char* kDefaultRoot = "/usr/share/datasets/fashion-mnist";
  static constexpr int64_t kClasses = 10;

  // Reads <root>/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz. A missing, truncated or
  // corrupt file throws (c10::Error) naming the file.
  explicit FashionMNIST(const std::string& root = kDefaultRoot, Mode mode = Mode::kTrain);

  torch::data::Example<> get(size_t index) override;
  torch::optional<size_t> size() const override;

  bool is_train() const noexcept { return mode_ == Mode::kTrain; }
  // [N, 1, 28, 28] uint8, as in the files (shared with the host's other processes until
  // written: a write copies the pages written, for this process only).
  const torch::Tensor& pixels() const { return pixels_; }
  // [N, 1, 28, 28] float in [0, 1]: a new tensor of 4 bytes a pixel at each call.
  torch::Tensor images() const;
  // The images at `index` (int64 [K]) as float [K, 1, 28, 28] in [0, 1].
  torch::Tensor images(const torch::Tensor& index) const;
  const torch::Tensor& targets() const { return targets_; }  // [N] int64

  // "T-shirt/top", "Trouser", ... for a label in [0, 9].
  static const char* class_name(int64_t label);

 private:
  Mode mode_;
  torch::Tensor pixels_;
  torch::Tensor targets_;
};

}  // namespace dpx
