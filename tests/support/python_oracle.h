// The skeleton every test with PyTorch as its oracle shares: skip when this machine's Python
// cannot run the reference, run a script of tests/python/ bounded in time with its output kept
// for the failure message, and compare a tensor of dpx's with PyTorch's within a tolerance.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace dpx::test {

// Whether `python -c <code>` exits 0 (its output discarded): "import numpy", or a feature probe.
bool python_runs(const std::string& python, const std::string& code);

// "" when `python` can import `module`, else the SKIPPED line that says so.
std::string why_python_lacks(const std::string& python, const std::string& module);

struct PythonScript {
  std::string script;  // a file of tests/python/
  std::vector<std::string> args;
  std::string python = DPX_PYTHON;  // this build's oracle (the PyTorch of its LibTorch)
  std::chrono::seconds timeout = std::chrono::seconds(120);  // then its process group is killed
  std::string log;  // appended to with its stdout and stderr; "" leaves them the test's
  // PyTorch's gloo has been seen to abort its own Python process on a loaded machine: a script
  // whose failure can be the oracle's fault gets more attempts, each after before_attempt.
  int attempts = 1;
  std::function<void()> before_attempt;
};

struct PythonExit {
  int exit_code = -1;  // -1 when killed by a signal or timed out
  bool timed_out = false;
  bool ok() const { return exit_code == 0; }
};

// Runs the script in its own process group (the ranks it spawns included), killed at the
// timeout; returns how the last attempt ended.
PythonExit run_python(const PythonScript& s);

// For a script that writes files for several tests to read: runs it with the folder it is to
// fill as its last argument, once per build, script text and arguments, and returns the folder
// (under DPX_BINARY_DIR/test-cache/); every later call, from this process or another test
// process (CTest runs each test in its own), returns the same folder without running it again.
// Concurrent callers wait on a lock for the first to finish. "" when the script failed.
std::string python_output_once(const PythonScript& s);

// Passes when `ours` has PyTorch's sizes and torch::allclose(ours, theirs, rtol, atol); the
// failure says by how much they differ.
::testing::AssertionResult close_to_pytorch(const torch::Tensor& ours, const torch::Tensor& theirs,
                                            double rtol, double atol);

}  // namespace dpx::test

// Skips the test (GTEST_SKIP: in the test's own body) when `python` cannot import `module`.
#define DPX_SKIP_UNLESS_PYTHON_HAS(python, module)                                    \
  if (const auto dpx_why_ = ::dpx::test::why_python_lacks((python), (module));       \
      !dpx_why_.empty())                                                             \
  GTEST_SKIP() << dpx_why_
