// Fuzzes dpx's reader of torch.save files (dpx::torch_load, dpx::load_state_dict) with mutated
// and random files, each loaded in its own process under CPU, memory and wall-clock limits
// (tests/support/bounded_child.h). A file must load or end in a dpx::CheckpointError; a crash,
// a hang, an exhausted limit or any other exception is a failure, kept for replay.
//
//   dpx_pickle_fuzz [--dcp] [--files N] [--seed S] [--python PY] [--keep DIR] [--replay FILE]...
//
// --dcp fuzzes the reader of DCP checkpoints (dpx::dcp_read_tensors) instead: the seeds are
// checkpoint folders (dpx's own, and with --python the oracle's, protocol 4), and each file is a
// seed's .metadata mutated as below and read with the seed's .distcp files beside it. A replayed
// file is then a .metadata, read in a folder of the seed dpx writes.
//
// Seeds: files dpx writes, pickles in Python's style, and with --python the oracle's files
// written by that PyTorch. Of each file: 70% a seed's pickle mutated (bits, bytes, opcodes,
// lengths, cut, spliced) then zipped again with valid CRCs so it reaches the pickle reader,
// 10% a random opcode sequence, 10% a seed's zip bytes mutated, 10% a seed's tensor records
// cut or grown.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <random>

#include "support/bounded_child.h"
#include "fuzz/pickle_seeds.h"
#include "dpx/checkpoint/dcp.h"
#include "dpx/checkpoint/python_format.h"
#include "support/python_oracle.h"

namespace {

using dpx::fuzz::SeedFile;
using Rng = std::mt19937_64;

// Opcodes the reader knows, a few it does not, and the allowed and refused globals.
const char kOpcodes[] = "\x80.(0}])N\x88\x89KMJ\x8aGXTUt\x85\x86\x87suaeqrhjcRbQ\x81\x8b\x94I\x95\x8c\x8d\x93";
const char* const kGlobals[] = {
    "ccollections\nOrderedDict\n", "ctorch._utils\n_rebuild_tensor_v2\n",
    "ctorch._utils\n_rebuild_parameter\n", "ctorch\nFloatStorage\n", "ctorch\nLongStorage\n",
    "ctorch\nBFloat16Storage\n", "cos\nsystem\n", "c__main__\nEvil\n",
    // Protocol 4's STACK_GLOBAL: the module and name pushed as short strings.
    "\x8c\x0b" "collections\x8c\x0b" "OrderedDict\x93", "\x8c\x02os\x8c\x06system\x93"};

size_t pick(Rng& rng, size_t n) { return n == 0 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng); }

std::string random_arg(Rng& rng) {
  static const uint32_t kEdges[] = {0, 1, 2, 0x7f, 0x80, 0xff, 0xffff, 0x7fffffff, 0x80000000,
                                    0xffffffff};
  const uint32_t v = pick(rng, 2) ? kEdges[pick(rng, 10)] : static_cast<uint32_t>(rng());
  return std::string(reinterpret_cast<const char*>(&v), 1 + pick(rng, 4));
}

// One opcode, with what follows it in a well-formed pickle (roughly).
std::string random_op(Rng& rng) {
  const size_t k = pick(rng, 12);
  if (k == 0) return kGlobals[pick(rng, std::size(kGlobals))];
  if (k == 1) return "X" + std::string("\x03\x00\x00\x00", 4) + "abc";
  if (k == 2) return std::string(1, "qhrj"[pick(rng, 4)]) + std::string(1, static_cast<char>(pick(rng, 4))) + std::string(3, '\0');
  return std::string(1, kOpcodes[pick(rng, sizeof(kOpcodes) - 1)]) + (pick(rng, 3) ? random_arg(rng) : "");
}

void mutate(std::string& s, Rng& rng, const std::vector<SeedFile>& seeds) {
  const size_t at = pick(rng, s.size() + 1);
  switch (pick(rng, 9)) {
    case 0: if (!s.empty()) s[pick(rng, s.size())] ^= static_cast<char>(1 << pick(rng, 8)); break;
    case 1: if (!s.empty()) s[pick(rng, s.size())] = static_cast<char>(rng()); break;
    case 2: if (!s.empty()) s[pick(rng, s.size())] = kOpcodes[pick(rng, sizeof(kOpcodes) - 1)]; break;
    case 3: s.insert(at, random_op(rng)); break;
    case 4: s.erase(at, 1 + pick(rng, 16)); break;
    case 5: s.insert(at, s.substr(pick(rng, s.size() + 1), 1 + pick(rng, 64))); break;
    case 6: {  // splice another seed's bytes in
      const auto& other = seeds[pick(rng, seeds.size())].pickle;
      s.insert(at, other.substr(pick(rng, other.size() + 1), 1 + pick(rng, 128)));
      break;
    }
    case 7: s.resize(at); break;
    default: {
      const std::string arg = random_arg(rng);
      if (at + arg.size() <= s.size()) s.replace(at, arg.size(), arg);
    }
  }
}

std::string mutated_pickle(const SeedFile& seed, Rng& rng, const std::vector<SeedFile>& seeds) {
  std::string p = seed.pickle;
  for (size_t n = 1 + pick(rng, 2) + (pick(rng, 4) == 0 ? pick(rng, 8) : 0); n > 0; --n) {
    mutate(p, rng, seeds);
  }
  return p;
}

std::string random_pickle(Rng& rng) {
  std::string p = "\x80\x02";
  for (size_t n = 1 + pick(rng, 200); n > 0; --n) p += random_op(rng);
  return p + ".";
}

// Writes file number `i` to `path`; returns its kind.
const char* make_file(const std::string& path, Rng& rng, const std::vector<SeedFile>& seeds,
                      const std::string& scratch) {
  const SeedFile& seed = seeds[pick(rng, seeds.size())];
  const size_t kind = pick(rng, 10);
  if (kind < 7) {
    dpx::fuzz::write_seed_file(path, mutated_pickle(seed, rng, seeds), seed.records);
    return "mutated pickle";
  }
  if (kind == 7) {
    dpx::fuzz::write_seed_file(path, random_pickle(rng), seed.records);
    return "random pickle";
  }
  auto records = seed.records;
  if (kind == 8) {
    dpx::fuzz::write_seed_file(scratch, seed.pickle, records);
    std::ifstream in(scratch, std::ios::binary);
    std::string zip((std::istreambuf_iterator<char>(in)), {});
    for (size_t n = 1 + pick(rng, 4); n > 0; --n) mutate(zip, rng, seeds);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << zip;
    return "mutated zip";
  }
  for (auto& [name, bytes] : records) {
    if (pick(rng, 2)) bytes.resize(pick(rng, bytes.size() + 9));
  }
  dpx::fuzz::write_seed_file(path, seed.pickle, records);
  return "resized records";
}

// In the child: 0 loaded, 1 refused with a CheckpointError; other exceptions escape.
int load_dcp(const std::string& dir, std::string& message) {
  try {
    dpx::dcp_read_tensors(dir);
    return 0;
  } catch (const dpx::CheckpointError& e) {
    message = e.what();
    return 1;
  }
}

int load(const std::string& path, std::string& message) {
  try {
    const auto v = dpx::torch_load(path);
    if (v.isGenericDict()) {
      torch::nn::Sequential model(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4));
      dpx::load_state_dict(*model, path, {/*strict=*/false});
    }
    return 0;
  } catch (const dpx::CheckpointError& e) {
    message = e.what();
    return 1;
  }
}

struct Options {
  bool dcp = false;
  long files = 1000;
  uint64_t seed = 1;
  std::string python, keep;
  std::vector<std::string> replay;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--dcp") o.dcp = true;
    else if (a == "--files" && has_value) o.files = std::atol(argv[++i]);
    else if (a == "--seed" && has_value) o.seed = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--python" && has_value) o.python = argv[++i];
    else if (a == "--keep" && has_value) o.keep = argv[++i];
    else if (a == "--replay" && has_value) o.replay.push_back(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--dcp] [--files N] [--seed S] [--python PY] [--keep DIR] "
                   "[--replay FILE]...\n", argv[0]);
      std::exit(2);
    }
  }
  return o;
}

int replay(const std::vector<std::string>& files, const dpx::test::ChildLimits& limits) {
  int bad = 0;
  for (const auto& f : files) {
    const auto r = dpx::test::run_bounded([&](std::string& m) { return load(f, m); }, limits);
    std::printf("%s: %s\n", f.c_str(), r.describe().c_str());
    bad += r.exited(0) || r.exited(1) ? 0 : 1;
  }
  return bad == 0 ? 0 : 1;
}

// The oracle's files (values, a model, old-style state dicts) as seeds, when `python` has torch.
bool add_python_seeds(const std::string& python, const std::string& dir,
                      std::vector<SeedFile>& seeds) {
  if (std::system((python + " -c 'import torch' 2>/dev/null").c_str()) != 0) {
    std::printf("pickle_fuzz: %s cannot import torch: fuzzing dpx's own seeds only\n",
                python.c_str());
    return true;
  }
  const std::string py = dir + "/python", run = python + " " DPX_SOURCE_DIR
                                                     "/tests/python/state_dict_oracle.py ";
  const std::string cmd = "mkdir -p " + py + " && " + run + "write " + py + "/values.pt && " +
                          run + "write_model " + py + "/model.pt && " + run + "write_old " + py +
                          " 3";
  if (std::system(cmd.c_str()) != 0) return false;
  for (auto& s : dpx::fuzz::seeds_from_dir(py)) seeds.push_back(std::move(s));
  return true;
}

// DCP seeds: folders whose .metadata each case replaces (SeedFile::name is the folder).
std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

std::string dpx_dcp_seed(const std::string& dir) {
  torch::nn::Sequential model(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4),
                              torch::nn::Linear(4, 2));
  model[2]->to(torch::kBFloat16);
  dpx::dcp_save_state_dict(*model, dir, nullptr, {.prefix = "model."});
  return dir;
}

std::vector<SeedFile> dcp_seeds(const std::string& dir, const std::string& python) {
  std::vector<SeedFile> seeds;
  seeds.push_back({dpx_dcp_seed(dir + "/dpx"), "", {}});
  if (!python.empty() && dpx::test::why_python_lacks(python, "torch.distributed.checkpoint").empty()) {
    const std::string oracle = dpx::test::python_output_once(
        {.script = "dcp_oracle.py", .args = {"write"}, .python = python,
         .timeout = std::chrono::seconds(240), .attempts = 2});
    for (const char* name : {"one", "three"}) {
      if (oracle.empty()) break;
      const std::string copy = dir + "/" + name;  // the cache is shared: mutate a copy
      if (std::system(("cp -r " + oracle + "/" + name + " " + copy).c_str()) == 0) {
        seeds.push_back({copy, "", {}});
      }
    }
  }
  for (auto& s : seeds) s.pickle = read_bytes(s.name + "/.metadata");
  return seeds;
}

struct Tally {
  std::map<std::string, long> kinds;
  long loaded = 0, refused = 0, failed = 0;
  double slowest = 0;
};

void fuzz_one(long i, Rng& rng, const std::vector<SeedFile>& seeds, const std::string& dir,
              const Options& options, const dpx::test::ChildLimits& limits, Tally& tally) {
  std::string path = dir + "/case.pt";
  const char* kind = nullptr;
  std::function<int(std::string&)> run;
  if (options.dcp) {
    const SeedFile& seed = seeds[pick(rng, seeds.size())];
    kind = pick(rng, 10) == 0 ? "random pickle" : "mutated pickle";
    path = seed.name + "/.metadata";
    std::ofstream(path, std::ios::binary | std::ios::trunc)
        << (kind[0] == 'r' ? random_pickle(rng) : mutated_pickle(seed, rng, seeds));
    run = [&, folder = seed.name](std::string& m) { return load_dcp(folder, m); };
  } else {
    kind = make_file(path, rng, seeds, dir + "/scratch.pt");
    run = [&](std::string& m) { return load(path, m); };
  }
  ++tally.kinds[kind];
  const auto r = dpx::test::run_bounded(run, limits);
  tally.slowest = std::max(tally.slowest, r.seconds);
  if (r.exited(0) || r.exited(1)) {
    ++(r.exited(0) ? tally.loaded : tally.refused);
    return;
  }
  ++tally.failed;
  const std::string kept = (options.keep.empty() ? dir : options.keep) + "/failure-" +
                           std::to_string(i) + (options.dcp ? ".metadata" : ".pt");
  std::rename(path.c_str(), kept.c_str());
  std::printf("FAILED file %ld (%s, kept as %s): %s\n", i, kind, kept.c_str(),
              r.describe().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  at::set_num_threads(1);  // the children fork from here: no OpenMP pool to inherit
  dpx::test::ChildLimits limits;
  limits.cpu_seconds = 5;
  limits.wall_seconds = 60;
  limits.extra_address_space = size_t{1} << 30;
  char tmpl[] = "/tmp/dpx_pickle_fuzz_XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  if (!options.replay.empty() && options.dcp) {  // each .metadata beside dpx's seed's files
    int bad = 0;
    const std::string folder = dpx_dcp_seed(dir + "/replay");
    for (const auto& f : options.replay) {
      std::ofstream(folder + "/.metadata", std::ios::binary | std::ios::trunc) << read_bytes(f);
      const auto r = dpx::test::run_bounded(
          [&](std::string& m) { return load_dcp(folder, m); }, limits);
      std::printf("%s: %s\n", f.c_str(), r.describe().c_str());
      bad += r.exited(0) || r.exited(1) ? 0 : 1;
    }
    return bad == 0 ? 0 : 1;
  }
  if (!options.replay.empty()) return replay(options.replay, limits);
  auto seeds = options.dcp ? dcp_seeds(dir, options.python) : dpx::fuzz::builtin_seeds(dir);
  if (!options.dcp && !options.python.empty() && !add_python_seeds(options.python, dir, seeds)) {
    std::fprintf(stderr, "pickle_fuzz: the oracle (%s) could not write its seeds\n",
                 options.python.c_str());
    return 1;
  }
  std::printf("pickle_fuzz%s: %zu seeds, %ld files, seed %llu\n", options.dcp ? " --dcp" : "",
              seeds.size(), options.files,
              static_cast<unsigned long long>(options.seed));
  Rng rng(options.seed);
  Tally tally;
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < options.files; ++i) fuzz_one(i, rng, seeds, dir, options, limits, tally);
  const double total =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const auto& [k, n] : tally.kinds) std::printf("  %-16s %ld files\n", k.c_str(), n);
  std::printf("pickle_fuzz: %ld files in %.1f s (slowest %.2f s): %ld loaded, %ld refused with "
              "a CheckpointError, %ld crashed, hung, ran out of a limit or threw another error\n",
              options.files, total, tally.slowest, tally.loaded, tally.refused, tally.failed);
  if (tally.failed == 0) std::system(("rm -rf " + dir).c_str());
  return tally.failed == 0 ? 0 : 1;
}
