#include "support/temp_dir.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "dpx/runtime/files.h"

namespace dpx::test {

TempDir::TempDir() {
  char tmpl[] = "/tmp/dpx-test-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    throw std::runtime_error(std::string("mkdtemp(/tmp/dpx-test-XXXXXX) failed: ") +
                             std::strerror(errno));
  }
  path_ = tmpl;
}

TempDir::~TempDir() { remove_tree(path_); }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void spit(const std::string& path, const std::string& data) {
  std::ofstream(path, std::ios::binary) << data;
}

}  // namespace dpx::test
