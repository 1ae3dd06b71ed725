// The pickle fuzzer's seed files (pickle_fuzz.cpp): torch.save files as a pickle plus the other
// zip records, so a mutated pickle can be zipped again with valid CRCs and reach the reader.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace dpx::fuzz {

struct SeedFile {
  std::string name;
  std::string pickle;                                        // data.pkl
  std::vector<std::pair<std::string, std::string>> records;  // the others (data/0, byteorder)
};

// Files dpx writes (torch_save of dicts, lists, tuples, tensors of several dtypes and views) and
// pickles in the style of Python's torch.save (memo, OrderedDict with _metadata, parameters,
// storages shared by two views), written into `dir`.
std::vector<SeedFile> builtin_seeds(const std::string& dir);

// The .pt files in `dir` (written by the Python oracle), read back as seeds.
std::vector<SeedFile> seeds_from_dir(const std::string& dir);

// A torch.save zip of `pickle` and `records` at `path`.
void write_seed_file(const std::string& path, const std::string& pickle,
                     const std::vector<std::pair<std::string, std::string>>& records);

}  // namespace dpx::fuzz
