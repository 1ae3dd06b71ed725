#include "dpx/data/fashion_mnist.h"

#include <sys/stat.h>
#include <torch/torch.h>
#include <zlib.h>

#include <array>
#include <cstdint>
#include <memory>

#include "data/decoded_cache.h"

namespace dpx {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // unsigned bytes, 3 dimensions
constexpr uint32_t kLabelsMagic = 0x00000801;  // unsigned bytes, 1 dimension
constexpr int64_t kSide = 28;

// One gzipped IDX file, read start to end; every failure names the file.
class IdxReader {
 public:
  explicit IdxReader(std::string path) : path_(std::move(path)) {
    struct stat st {};
    TORCH_CHECK(::stat(path_.c_str(), &st) == 0, "Fashion-MNIST file ", path_,
                " not found; install the Debian package dataset-fashion-mnist (apt-get install "
                "dataset-fashion-mnist) or pass the directory that holds the IDX .gz files");
    file_ = gzopen(path_.c_str(), "rb");
    TORCH_CHECK(file_ != nullptr, "cannot open Fashion-MNIST file ", path_);
  }
  ~IdxReader() { gzclose(file_); }
  IdxReader(const IdxReader&) = delete;
  IdxReader& operator=(const IdxReader&) = delete;

  const std::string& path() const { return path_; }

  uint32_t read_u32(const char* what) {
    std::array<unsigned char, 4> b{};
    read_exact(b.data(), b.size(), what);
    return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
  }

  void read_exact(void* out, size_t bytes, const char* what) {
    auto* p = static_cast<unsigned char*>(out);
    while (bytes > 0) {
      const unsigned chunk = static_cast<unsigned>(std::min<size_t>(bytes, 1u << 30));
      const int got = gzread(file_, p, chunk);
      if (got < 0) {
        int errnum = 0;
        const char* msg = gzerror(file_, &errnum);
        TORCH_CHECK(false, "Fashion-MNIST file ", path_, " is corrupt (", msg,
                    ") while reading the ", what);
      }
      TORCH_CHECK(got > 0, "Fashion-MNIST file ", path_, " is truncated: it ends inside the ",
                  what);
      p += got;
      bytes -= static_cast<size_t>(got);
    }
  }

  // Called after the payload: the file must end exactly here, with a valid gzip trailer.
  void expect_end() {
    unsigned char extra = 0;
    const int got = gzread(file_, &extra, 1);
    int errnum = 0;
    const char* msg = gzerror(file_, &errnum);
    TORCH_CHECK(got >= 0 && errnum == Z_OK, "Fashion-MNIST file ", path_, " is corrupt (", msg,
                ")");
    TORCH_CHECK(got == 0, "Fashion-MNIST file ", path_,
                " has more data than its header's item count says (wrong count in the header?)");
  }

 private:
  std::string path_;
  gzFile file_ = nullptr;
};

void check_magic(IdxReader& in, uint32_t expected) {
  const uint32_t magic = in.read_u32("header");
  TORCH_CHECK(magic == expected, "Fashion-MNIST file ", in.path(), " has magic number 0x",
              std::hex, magic, " but an IDX ", expected == kImagesMagic ? "image" : "label",
              " file has 0x", expected, std::dec, "; is it the right file?");
}

torch::Tensor read_images(const std::string& path) {
  IdxReader in(path);
  check_magic(in, kImagesMagic);
  const uint32_t count = in.read_u32("header");
  const uint32_t rows = in.read_u32("header");
  const uint32_t cols = in.read_u32("header");
  TORCH_CHECK(rows == kSide && cols == kSide, "Fashion-MNIST file ", path, " holds ", rows, "x",
              cols, " images, expected 28x28");
  auto bytes = torch::empty({static_cast<int64_t>(count), 1, kSide, kSide}, torch::kUInt8);
  in.read_exact(bytes.data_ptr(), bytes.numel(), "images");
  in.expect_end();
  return bytes;
}

// uint8 pixels to float in [0, 1], as torchvision's ToTensor divides them.
torch::Tensor to_unit(const torch::Tensor& pixels) { return pixels.to(torch::kFloat32).div_(255); }

torch::Tensor read_labels(const std::string& path) {
  IdxReader in(path);
  check_magic(in, kLabelsMagic);
  const uint32_t count = in.read_u32("header");
  auto bytes = torch::empty({static_cast<int64_t>(count)}, torch::kUInt8);
  in.read_exact(bytes.data_ptr(), bytes.numel(), "labels");
  in.expect_end();
  if (count > 0) {
    const auto max = bytes.max().item<int64_t>();
    TORCH_CHECK(max < FashionMNIST::kClasses, "Fashion-MNIST file ", path, " holds label ", max,
                ", expected labels 0..9");
  }
  return bytes.to(torch::kInt64);
}

}  // namespace

FashionMNIST::FashionMNIST(const std::string& root, Mode mode) : mode_(mode) {
  const std::string prefix = root + "/" + (mode == Mode::kTrain ? "train" : "t10k");
  const std::string images_path = prefix + "-images-idx3-ubyte.gz";
  const std::string labels_path = prefix + "-labels-idx1-ubyte.gz";
  // The images are the bulk (47 MB for the train split): one decoded copy per host
  // (Note [One decoded copy per host]); the labels are read by each process.
  pixels_ = detail::decoded_bytes(images_path, [&] { return read_images(images_path); });
  targets_ = read_labels(labels_path);
  TORCH_CHECK(pixels_.size(0) == targets_.size(0), "Fashion-MNIST files disagree: ", images_path,
              " holds ", pixels_.size(0), " images but ", labels_path, " holds ",
              targets_.size(0), " labels");
}

torch::data::Example<> FashionMNIST::get(size_t index) {
  return {to_unit(pixels_[static_cast<int64_t>(index)]), targets_[static_cast<int64_t>(index)]};
}

torch::Tensor FashionMNIST::images() const { return to_unit(pixels_); }

torch::Tensor FashionMNIST::images(const torch::Tensor& index) const {
  return to_unit(pixels_.index_select(0, index));
}

torch::optional<size_t> FashionMNIST::size() const {
  return static_cast<size_t>(pixels_.size(0));
}

const char* FashionMNIST::class_name(int64_t label) {
  static constexpr const char* kNames[kClasses] = {"T-shirt/top", "Trouser", "Pullover", "Dress",
                                                   "Coat",        "Sandal",  "Shirt",    "Sneaker",
                                                   "Bag",         "Ankle boot"};
  TORCH_CHECK(label >= 0 && label < kClasses, "Fashion-MNIST label ", label, " outside 0..9");
  return kNames[label];
}

}  // namespace dpx
