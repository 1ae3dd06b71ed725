// The Fashion-MNIST reader on the Debian package's files and on broken files made here.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <torch/torch.h>
#include <zlib.h>

#include <cstdlib>
#include <fstream>

#include "dpx/data/fashion_mnist.h"
#include "dpx/runtime/files.h"

namespace {

bool package_installed() {
  struct stat st {};
  return ::stat((std::string(dpx::FashionMNIST::kDefaultRoot) + "/train-images-idx3-ubyte.gz").c_str(),
                &st) == 0;
}

TEST(FashionMnist, ReadsThePackagesFiles) {
  if (!package_installed()) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  }
  dpx::FashionMNIST train;
  dpx::FashionMNIST test(dpx::FashionMNIST::kDefaultRoot, dpx::FashionMNIST::Mode::kTest);
  ASSERT_EQ(*train.size(), 60000u);
  ASSERT_EQ(*test.size(), 10000u);
  EXPECT_TRUE(train.is_train());
  EXPECT_EQ(train.images().sizes(), (std::vector<int64_t>{60000, 1, 28, 28}));
  EXPECT_EQ(train.images().dtype(), torch::kFloat32);
  EXPECT_TRUE(train.images(torch::tensor({7, 3})).equal(train.images().index_select(0, torch::tensor({7, 3}))));
  // Reference values from Python (gzip + numpy on the same files).
  EXPECT_EQ(train.targets().slice(0, 0, 5).equal(torch::tensor({9, 0, 0, 3, 0})), true);
  EXPECT_EQ(test.targets().slice(0, 0, 5).equal(torch::tensor({9, 2, 1, 1, 6})), true);
  EXPECT_TRUE(train.targets().bincount().equal(torch::full({10}, 6000, torch::kInt64)));
  auto raw = [](const torch::Tensor& t) { return t.mul(255).round().to(torch::kInt64); };
  EXPECT_EQ(raw(train.images()).sum().item<int64_t>(), 3431114169);
  auto first = train.get(0);
  EXPECT_EQ(raw(first.data).sum().item<int64_t>(), 76247);
  EXPECT_EQ(first.target.item<int64_t>(), 9);
  EXPECT_STREQ(dpx::FashionMNIST::class_name(9), "Ankle boot");
}

// Builds small IDX files in a fresh temporary directory.
class BrokenFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dpx-fmnist-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // The decoded copies go beside the files, not into the user's cache folder.
    ::setenv("DPX_DATA_CACHE", cache().c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("DPX_DATA_CACHE");
    std::system(("rm -rf " + dir_).c_str());
  }
  std::string cache() const { return dir_ + "/cache"; }
  // The decoded copies in the cache folder.
  std::vector<std::string> cached() const {
    std::vector<std::string> files;
    for (const auto& name : dpx::list_dir(cache())) files.push_back(cache() + "/" + name);
    return files;
  }
  static int64_t size_of(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 ? st.st_size : -1;
  }

  static std::string be32(uint32_t v) {
    return {char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
  }
  static std::string images(uint32_t header_count, uint32_t actual, uint32_t magic = 0x803) {
    return be32(magic) + be32(header_count) + be32(28) + be32(28) + std::string(actual * 784, 7);
  }
  static std::string labels(uint32_t header_count, uint32_t actual, uint32_t magic = 0x801) {
    return be32(magic) + be32(header_count) + std::string(actual, 3);
  }
  void write_gz(const std::string& name, const std::string& bytes) {
    gzFile f = gzopen((dir_ + "/" + name).c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(gzwrite(f, bytes.data(), bytes.size()), static_cast<int>(bytes.size()));
    gzclose(f);
  }
  void write_set(const std::string& images_bytes, const std::string& labels_bytes) {
    write_gz("train-images-idx3-ubyte.gz", images_bytes);
    write_gz("train-labels-idx1-ubyte.gz", labels_bytes);
  }
  // The error text of loading the train split of dir_ ("" if it loads).
  std::string load_error() {
    try {
      dpx::FashionMNIST d(dir_);
      return "";
    } catch (const c10::Error& e) {
      return e.what_without_backtrace();
    }
  }
  std::string dir_;
};

#define EXPECT_TEXT_HAS(text, part) \
  EXPECT_NE((text).find(part), std::string::npos) << "error was: " << (text)

TEST_F(BrokenFiles, ValidSmallFilesLoad) {
  write_set(images(5, 5), labels(5, 5));
  dpx::FashionMNIST d(dir_);
  EXPECT_EQ(*d.size(), 5u);
  EXPECT_NEAR(d.get(4).data[0][3][3].item<float>(), 7.0f / 255, 1e-7);
  EXPECT_EQ(d.get(4).target.item<int64_t>(), 3);
}

TEST_F(BrokenFiles, MissingFileNamesFileAndPackage) {
  const auto err = load_error();
  EXPECT_TEXT_HAS(err, dir_ + "/train-images-idx3-ubyte.gz");
  EXPECT_TEXT_HAS(err, "dataset-fashion-mnist");
}

TEST_F(BrokenFiles, WrongMagic) {
  write_set(images(5, 5), labels(5, 5, 0x803));
  const auto err = load_error();
  EXPECT_TEXT_HAS(err, "train-labels-idx1-ubyte.gz has magic number 0x803");
}

TEST_F(BrokenFiles, TruncatedPayload) {
  write_set(images(5, 3), labels(5, 5));
  const auto err = load_error();
  EXPECT_TEXT_HAS(err, "train-images-idx3-ubyte.gz is truncated");
}

TEST_F(BrokenFiles, CountTooSmallForTheData) {
  write_set(images(5, 5), labels(4, 5));
  EXPECT_TEXT_HAS(load_error(), "train-labels-idx1-ubyte.gz has more data than its header");
}

TEST_F(BrokenFiles, ImageAndLabelCountsDisagree) {
  write_set(images(5, 5), labels(4, 4));
  EXPECT_TEXT_HAS(load_error(), "holds 5 images but");
}

TEST_F(BrokenFiles, TruncatedGzipStream) {
  write_set(images(50, 50), labels(50, 50));
  const std::string path = dir_ + "/train-images-idx3-ubyte.gz";
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  ASSERT_EQ(::truncate(path.c_str(), st.st_size / 2), 0);
  EXPECT_TEXT_HAS(load_error(), "train-images-idx3-ubyte.gz is");
}

TEST_F(BrokenFiles, CorruptGzipStream) {
  write_set(images(50, 50), labels(50, 50));
  const std::string path = dir_ + "/train-images-idx3-ubyte.gz";
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-6, std::ios::end);  // inside the gzip trailer's CRC32
  const char byte = static_cast<char>(f.get() ^ 0xff);
  f.seekp(-6, std::ios::end);
  f.put(byte);
  f.close();
  EXPECT_TEXT_HAS(load_error(), "train-images-idx3-ubyte.gz is corrupt");
}

// The second reader maps the first one's decoded copy (Note [One decoded copy per host]).
TEST_F(BrokenFiles, SecondReaderMapsTheFirstOnesDecodedCopy) {
  write_set(images(5, 5), labels(5, 5));
  dpx::FashionMNIST first(dir_);
  const auto files = cached();
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(size_of(files[0]), 64 + 5 * 784);
  EXPECT_EQ(first.pixels().dtype(), torch::kUInt8);
  EXPECT_EQ(first.pixels().sizes(), (std::vector<int64_t>{5, 1, 28, 28}));
  {  // Change the copy's last pixel: a reader that decodes again would not see it.
    std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put(char(200));
  }
  dpx::FashionMNIST second(dir_);
  EXPECT_EQ(second.pixels()[4][0][27][27].item<int>(), 200);
  EXPECT_EQ(second.pixels()[4][0][27][26].item<int>(), 7);
  EXPECT_FLOAT_EQ(second.get(4).data[0][27][27].item<float>(), 200.0f / 255);
  EXPECT_EQ(first.pixels()[4][0][27][27].item<int>(), 200);  // one copy, mapped by both
}

TEST_F(BrokenFiles, ChangedFilesAreDecodedAgain) {
  write_set(images(5, 5), labels(5, 5));
  { dpx::FashionMNIST first(dir_); }
  // The same length, other pixels, another modification time.
  write_gz("train-images-idx3-ubyte.gz", images(5, 0) + std::string(5 * 784, 9));
  const std::string path = dir_ + "/train-images-idx3-ubyte.gz";
  const timespec times[2] = {{0, UTIME_OMIT}, {12345, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  dpx::FashionMNIST again(dir_);
  EXPECT_EQ(again.pixels()[0][0][0][0].item<int>(), 9);
  EXPECT_EQ(cached().size(), 2u);
}

TEST_F(BrokenFiles, CutShortCopyIsReplaced) {
  write_set(images(5, 5), labels(5, 5));
  { dpx::FashionMNIST first(dir_); }
  ASSERT_EQ(cached().size(), 1u);
  ASSERT_EQ(::truncate(cached()[0].c_str(), 100), 0);
  dpx::FashionMNIST again(dir_);
  EXPECT_EQ(again.pixels().sum().item<int64_t>(), 5 * 784 * 7);
  EXPECT_EQ(size_of(cached()[0]), 64 + 5 * 784);
}

TEST_F(BrokenFiles, NoCopyWhenTheCacheIsOffOrCannotBeWritten) {
  write_set(images(5, 5), labels(5, 5));
  ::setenv("DPX_DATA_CACHE", "off", 1);
  EXPECT_EQ(dpx::FashionMNIST(dir_).pixels().sum().item<int64_t>(), 5 * 784 * 7);
  EXPECT_FALSE(dpx::path_exists(cache()));
  ::setenv("DPX_DATA_CACHE", "/proc/dpx-no-such-folder", 1);
  EXPECT_EQ(dpx::FashionMNIST(dir_).pixels().sum().item<int64_t>(), 5 * 784 * 7);
}

}  // namespace
