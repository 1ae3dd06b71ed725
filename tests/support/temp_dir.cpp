#include "support/temp_dir.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
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

}  // namespace dpx::test
