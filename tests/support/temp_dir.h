// dpx: a scratch directory for one test.
#pragma once

#include <string>

namespace dpx::test {

// A fresh directory under /tmp, removed (recursively) at scope exit. One class for every test
// tier: two same-named classes in one namespace are an ODR violation the linker reports only
// when both land in one executable.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A whole file's bytes ("" when it cannot be read), and a file written with exactly `data`.
std::string read_file(const std::string& path);
void spit(const std::string& path, const std::string& data);

}  // namespace dpx::test
