// The command lines of dpx-bench and the examples: --help exits 0 on every program and
// sub-command; a user's mistake is one line on stderr and a non-zero exit, never LibTorch's
// C++ backtrace. (dpxrun's own are in launcher_test.cpp.)
#include <sys/stat.h>

#include <algorithm>

#include "support/harness.h"
#include "support/launcher_harness.h"

namespace dpx::test {
namespace {

using std::chrono::seconds;

std::string bench_path() { return std::string(DPX_BINARY_DIR) + "/bench/dpx-bench"; }
std::string example_path() {
  return std::string(DPX_BINARY_DIR) + "/examples/fashion_mnist/fashion_mnist";
}

std::string dist_mnist_path() {
  return std::string(DPX_BINARY_DIR) + "/examples/dist_mnist/dist_mnist";
}

bool built(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

void expect_no_backtrace(const std::string& output) {
  EXPECT_EQ(output.find("Exception raised from"), std::string::npos) << output;
  EXPECT_EQ(output.find("frame #"), std::string::npos) << output;
  EXPECT_EQ(output.find("INTERNAL ASSERT"), std::string::npos) << output;
}

// One line naming `says`, exit code `code`, no backtrace.
void expect_one_line_error(const std::vector<std::string>& argv, const std::string& says,
                           int code = 2, LaunchOptions options = {}) {
  auto r = run_launcher(argv, seconds(60), options);
  EXPECT_EQ(r.exit_code, code) << argv.back() << "\n" << r.output;
  EXPECT_NE(r.output.find(says), std::string::npos) << says << "\n" << r.output;
  EXPECT_EQ(lines(r.output), 1) << r.output;
  expect_no_backtrace(r.output);
}

TEST(Cli, BenchHelpExitsZeroForEverySubCommand) {
  if (!built(bench_path())) GTEST_SKIP() << "dpx-bench is not built";
  auto top = run_launcher({bench_path(), "--help"}, seconds(30));
  EXPECT_EQ(top.exit_code, 0) << top.output;
  for (const std::string sub : {"allreduce", "ddp", "dp"}) {
    EXPECT_NE(top.output.find(sub), std::string::npos) << top.output;
    auto r = run_launcher({bench_path(), sub, "--help"}, seconds(30));
    EXPECT_EQ(r.exit_code, 0) << sub << "\n" << r.output;
    EXPECT_NE(r.output.find("--"), std::string::npos) << r.output;  // lists its flags
    expect_no_backtrace(r.output);
  }
}

TEST(Cli, BenchMistakesAreOneLine) {
  if (!built(bench_path())) GTEST_SKIP() << "dpx-bench is not built";
  const auto b = bench_path();
  expect_one_line_error({b}, "subcommand");
  expect_one_line_error({b, "frobnicate"}, "unknown sub-command 'frobnicate'");
  expect_one_line_error({b, "ddp", "--frobnicate"}, "--frobnicate");
  expect_one_line_error({b, "ddp", "--rounds", "abc"}, "--rounds");
  expect_one_line_error({b, "ddp", "--rounds", "0"}, "--rounds");
  expect_one_line_error({b, "ddp", "--models", "cnn,rnn"}, "rnn");
  expect_one_line_error({b, "dp", "--batch", "0"}, "--batch");
  expect_one_line_error({b, "allreduce", "--seconds", "nan"}, "--seconds");
  expect_one_line_error({b, "allreduce", "--iters"}, "--iters");
  expect_one_line_error({b, "handwritten", "--model", "rnn"}, "rnn");
}

// Errors at run time: the message of the c10::Error, not its backtrace; exit code 1.
TEST(Cli, BenchRunTimeErrorsAreOneLine) {
  if (!built(bench_path())) GTEST_SKIP() << "dpx-bench is not built";
  LaunchOptions o;
  o.set_env["DPX_MALLOC"] = "bogus";
  expect_one_line_error({bench_path(), "dp", "--batch", "8", "--steps", "1", "--rounds", "1",
                         "--warmup", "0"},
                        "DPX_MALLOC must be retain or system, got 'bogus'", 1, o);
}

TEST(Cli, ExampleHelpExitsZero) {
  if (!built(example_path())) GTEST_SKIP() << "the example is not built";
  auto r = run_launcher({example_path(), "--help"}, seconds(30));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* flag : {"--epochs", "--batch-size", "--data-dir", "--metrics-file",
                           "--checkpoint-format"}) {
    EXPECT_NE(r.output.find(flag), std::string::npos) << flag << "\n" << r.output;
  }
  expect_no_backtrace(r.output);
}

TEST(Cli, ExampleMistakesAreOneLine) {
  if (!built(example_path())) GTEST_SKIP() << "the example is not built";
  const auto e = example_path();
  expect_one_line_error({e, "--frobnicate"}, "--frobnicate");
  expect_one_line_error({e, "--epochs", "abc"}, "--epochs");
  expect_one_line_error({e, "--batch-size", "0"}, "--batch-size");  // was an INTERNAL ASSERT
  expect_one_line_error({e, "--lr", "nan"}, "--lr");
  expect_one_line_error({e, "--checkpoint-every", "0"}, "--checkpoint-every");
  expect_one_line_error({e, "--data-dir", "/nonexistent/fashion"}, "/nonexistent/fashion");
  expect_one_line_error({e, "--device", "tpu"}, "--device");
  expect_one_line_error({e, "--checkpoint-format", "zip"}, "--checkpoint-format");
}

TEST(Cli, DistMnistHelpAndMistakes) {
  if (!built(dist_mnist_path())) GTEST_SKIP() << "examples/dist_mnist is not built";
  const auto e = dist_mnist_path();
  auto r = run_launcher({e, "--help"}, seconds(30));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* flag : {"--epochs", "--max-steps", "--data"}) {
    EXPECT_NE(r.output.find(flag), std::string::npos) << flag << "\n" << r.output;
  }
  expect_one_line_error({e, "--frobnicate"}, "--frobnicate");
  expect_one_line_error({e, "--epochs", "0"}, "--epochs: expects an integer >= 1, got '0'");
  expect_one_line_error({e, "--max-steps", "-2"},
                        "expects an integer >= -1 (-1: the whole epoch), got '-2'");
  expect_one_line_error({e, "--data", "/nonexistent/fashion"}, "/nonexistent/fashion");
}

// --device cuda where the process sees no GPU: one line saying so, before any connection.
TEST(Cli, ExampleDeviceCudaWithoutAGpuIsOneLine) {
  if (!built(example_path())) GTEST_SKIP() << "the example is not built";
  LaunchOptions o;
  o.set_env = {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "127.0.0.1"},
               {"MASTER_PORT", "0"}, {"LOCAL_RANK", "0"}, {"CUDA_VISIBLE_DEVICES", ""}};
  expect_one_line_error({example_path(), "--device", "cuda"}, "sees no CUDA device", 1, o);
}

// Errors at run time: the message of the c10::Error, not its backtrace; exit code 1.
TEST(Cli, ExampleRunTimeErrorsAreOneLine) {
  if (!built(example_path())) GTEST_SKIP() << "the example is not built";
  TempDir dir;
  LaunchOptions o;
  o.set_env = {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "127.0.0.1"},
               {"MASTER_PORT", "0"}, {"DPX_MALLOC", "bogus"}};
  const std::vector<std::string> argv = {example_path(), "--checkpoint-dir", dir.path() + "/ckpt",
                                         "--metrics-file", dir.path() + "/m.jsonl",
                                         "--data-dir", dir.path(), "--max-steps", "1"};
  // DPX_MALLOC is read before or after the data, depending on the build; either error is a line.
  auto r = run_launcher(argv, seconds(60), o);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find("fashion_mnist: error: "), std::string::npos) << r.output;
  expect_no_backtrace(r.output);
  // An empty data directory: the file that is missing and what to do.
  o.set_env.erase("DPX_MALLOC");
  expect_one_line_error(argv, "not found; install the Debian package dataset-fashion-mnist", 1,
                        o);
  // A master that does not resolve: named as such at once.
  o.set_env["MASTER_ADDR"] = "dpx-no-such-host.invalid";
  o.set_env["RANK"] = "1";
  o.set_env["WORLD_SIZE"] = "2";
  o.set_env["MASTER_PORT"] = "29500";
  expect_one_line_error(argv, "MASTER_ADDR 'dpx-no-such-host.invalid' does not resolve", 1, o);
}

}  // namespace
}  // namespace dpx::test
