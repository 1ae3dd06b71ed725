// torch.save and safetensors files crafted to hurt the reader: a million levels of nesting,
// deep tuples, memo sharing that expands exponentially, cycles, keys hashed over and over,
// overflowing shapes. Each loads in a child process under CPU, memory and time limits: it must
// load or end in a CheckpointError, never crash, hang or run out of memory.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <string>

using namespace std::string_literals;

#include "support/bounded_child.h"
#include "support/checkpoint_files.h"
#include "dpx/checkpoint/python_format.h"

namespace {

using dpx::test::ChildLimits;
using dpx::test::run_bounded;
using dpx::test::TempDir;

// torch_load(path) in a bounded child: exit 0 when it throws a CheckpointError containing
// `text`, 1 when it loads, 2 on another message.
dpx::test::ChildResult load_expecting_error(const std::string& path, const std::string& text,
                                            const ChildLimits& limits = {}) {
  return run_bounded(
      [&](std::string& message) {
        try {
          dpx::torch_load(path);
          message = "loaded";
          return 1;
        } catch (const dpx::CheckpointError& e) {
          message = e.what();
          return message.find(text) != std::string::npos ? 0 : 2;
        }
      },
      limits);
}

ChildLimits bounds(int cpu_seconds, double wall_seconds, size_t extra = size_t{1} << 30) {
  ChildLimits limits;
  limits.cpu_seconds = cpu_seconds;
  limits.wall_seconds = wall_seconds;
  limits.extra_address_space = extra;
  return limits;
}

std::string pickle(const std::string& body) { return std::string("\x80\x02", 2) + body + "."; }

std::string le32(uint32_t n) { return std::string(reinterpret_cast<const char*>(&n), 4); }

}  // namespace

TEST(HostileFilesTest, MillionLevelNestingIsRefusedWithoutACrash) {
  SKIP_WITHOUT(DPX_PYTHON, "torch");
  TempDir dir;
  for (const char* name : {"deep_lists.pt", "deep_dicts.pt"}) {
    ASSERT_TRUE(dpx::test::oracle("write_hostile " + dir / name));
    const auto r = load_expecting_error(dir / name, "nested deeper than 1000 levels",
                                        bounds(20, 120));
    EXPECT_TRUE(r.exited(0)) << name << ": " << r.describe();
  }
}

TEST(HostileFilesTest, DeepTuplesAreRefusedInLinearTime) {
  SKIP_WITHOUT(DPX_PYTHON, "torch");
  TempDir dir;
  ASSERT_TRUE(dpx::test::oracle("write_hostile " + dir / "deep_tuples.pt"));
  // 100,000 levels: Python reads them in 0.04 s; a reader that copies each level is quadratic.
  const auto r = load_expecting_error(dir / "deep_tuples.pt", "nested deeper than 1000 levels",
                                      bounds(5, 60));
  EXPECT_TRUE(r.exited(0)) << r.describe();
}

TEST(HostileFilesTest, MemoSharedTuplesStayShared) {
  SKIP_WITHOUT(DPX_PYTHON, "torch");
  TempDir dir;
  ASSERT_TRUE(dpx::test::oracle("write_hostile " + dir / "shared_tuples.pt"));
  // t = (); 40 times t = (t, t): 2^40 tuples if copied, 41 when shared as Python shares them.
  const auto r = run_bounded(
      [&](std::string& message) {
        c10::IValue t = dpx::torch_load(dir / "shared_tuples.pt");
        for (int level = 40; level > 1; --level) {
          const auto& xs = t.toTupleRef().elements();
          if (xs.size() != 2 || !xs[0].is(xs[1])) {
            message = "level " + std::to_string(level) + " is not (t, t) with t shared";
            return 1;
          }
          t = xs[0];
        }
        // ((), ()): Python's () is one object, pickled twice without the memo.
        const auto& xs = t.toTupleRef().elements();
        return xs.size() == 2 && xs[0].toTupleRef().elements().empty() ? 0 : 1;
      },
      bounds(5, 60, size_t{256} << 20));
  EXPECT_TRUE(r.exited(0)) << r.describe();
}

TEST(HostileFilesTest, ObjectLimitIsAClearError) {
  TempDir dir;
  std::string body = "](";  // a list of 5000 ints
  for (int i = 0; i < 5000; ++i) body += "K\x07";
  dpx::test::write_zip_with_pickle(dir / "many.pt", pickle(body + "e"));
  EXPECT_EQ(dpx::torch_load(dir / "many.pt").toListRef().size(), 5000u);
  dpx::TorchLoadLimits limits;
  limits.max_objects = 1000;
  EXPECT_CHECKPOINT_ERROR(dpx::torch_load(dir / "many.pt", limits),
                          "more than 1000 objects (TorchLoadLimits::max_objects)");
}

TEST(HostileFilesTest, CyclesAndUnhashableKeysAreRefused) {
  TempDir dir;
  dpx::test::write_zip_with_pickle(dir / "cycle.pt", pickle("]q\x00h\x00" "a"s));
  EXPECT_CHECKPOINT_ERROR(dpx::torch_load(dir / "cycle.pt"), "a list contains itself");
  dpx::test::write_zip_with_pickle(dir / "key.pt", pickle("}]Ns"));
  EXPECT_CHECKPOINT_ERROR(dpx::torch_load(dir / "key.pt"), "unhashable dict key: a list");
  // None as a key: LibTorch 2.x hashes it, 1.13 cannot; either way a value or a CheckpointError
  // (the fuzzer found 1.13's std::runtime_error escaping).
  dpx::test::write_zip_with_pickle(dir / "none.pt", pickle("}NNs"));
  try {
    EXPECT_EQ(dpx::torch_load(dir / "none.pt").toGenericDict().size(), 1u);
  } catch (const dpx::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("unhashable dict key"), std::string::npos) << e.what();
  }
  // A list inside a tuple inside the list: the cycle goes through the tuple.
  dpx::test::write_zip_with_pickle(dir / "cycle2.pt", pickle("]q\x00h\x00\x85" "a"s));
  EXPECT_CHECKPOINT_ERROR(dpx::torch_load(dir / "cycle2.pt"), "contains itself");
}

TEST(HostileFilesTest, AKeySharedMillionsOfTimesIsNotHashedMillionsOfTimes) {
  TempDir dir;
  // A 1 MB string in the memo, then 200,000 dicts each keyed by it: 2e11 bytes to hash.
  const std::string big(1 << 20, 'k');
  std::string body = "]X" + le32(static_cast<uint32_t>(big.size())) + big + "q\x00" "0"s;
  for (int i = 0; i < 200000; ++i) body += "}h\x00" "Nsa"s;
  dpx::test::write_zip_with_pickle(dir / "keys.pt", pickle(body));
  const auto r = load_expecting_error(dir / "keys.pt", "dict keys are too large to hash",
                                      bounds(10, 60));
  EXPECT_TRUE(r.exited(0)) << r.describe();
}

TEST(HostileFilesTest, SharedKeyInOneDictIsHashedOnce) {
  TempDir dir;
  // The same memoized key set 100,000 times in one dict: one entry, the last value.
  const std::string big(1 << 16, 'k');
  std::string body = "}X" + le32(static_cast<uint32_t>(big.size())) + big + "q\x00" "0("s;
  for (int i = 0; i < 100000; ++i) body += std::string("h\x00K", 3) + static_cast<char>(i % 200);
  dpx::test::write_zip_with_pickle(dir / "same.pt", pickle(body + "u"));
  const auto d = dpx::torch_load(dir / "same.pt").toGenericDict();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d.at(big).toInt(), 99999 % 200);
}

TEST(HostileFilesTest, SafetensorsShapeOverflowNamesTheFile) {
  TempDir dir;
  const std::string header =
      R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,0]}})";
  uint64_t n = header.size();
  std::string bytes(reinterpret_cast<const char*>(&n), 8);
  dpx::test::spit(dir / "big.safetensors", bytes + header);
  EXPECT_CHECKPOINT_ERROR(dpx::safetensors_load(dir / "big.safetensors"),
                          dir / "big.safetensors" + ": tensor w has a shape whose size overflows");
}

TEST(HostileFilesTest, ZipRecordDeclaringMoreThanItStoresIsRefused) {
  TempDir dir;
  dpx::torch_save(c10::IValue(int64_t{3}), dir / "x.pt");
  std::string zip = dpx::test::read_file(dir / "x.pt");
  // The central directory entry of data.pkl: its uncompressed size (offset 24) made huge.
  const auto central = zip.find(std::string("PK\x01\x02", 4));
  ASSERT_NE(central, std::string::npos);
  const uint32_t huge = 0x7fffffff;
  std::memcpy(&zip[central + 24], &huge, 4);
  dpx::test::spit(dir / "x.pt", zip);
  EXPECT_CHECKPOINT_ERROR(dpx::torch_load(dir / "x.pt"), "declares 2147483647 bytes but stores");
}
