#include "dpx/runtime/files.h"

#include <dirent.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "runtime/env_read.h"

namespace dpx {

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return names;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

bool path_exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

void make_dirs(const std::string& dir) {
  for (std::size_t end = dir.find('/', 1);; end = dir.find('/', end + 1)) {
    const std::string prefix = dir.substr(0, end);
    if (!prefix.empty() && ::mkdir(prefix.c_str(), 0777) != 0 && errno != EEXIST) {
      throw std::runtime_error("cannot create the folder " + prefix + ": " +
                               std::strerror(errno));
    }
    if (end == std::string::npos) break;
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw std::runtime_error("cannot create the folder " + dir + ": a file of that name is there");
  }
}

void remove_tree(const std::string& path) noexcept {
  // Depth first (a folder after its contents), on the links themselves, within one file system.
  ::nftw(
      path.c_str(),
      [](const char* p, const struct stat*, int type, FTW*) {
        (type == FTW_DP ? ::rmdir(p) : ::unlink(p));
        return 0;
      },
      16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

std::string absolute_path(const std::string& path) {
  if (!path.empty() && path[0] == '/') return path;
  char* cwd = ::getcwd(nullptr, 0);
  if (cwd == nullptr) {
    throw std::runtime_error(std::string("cannot read the working directory: ") +
                             std::strerror(errno));
  }
  std::string out = cwd;
  std::free(cwd);
  if (path.empty() || path == ".") return out;
  return (out == "/" ? "" : out) + "/" + (path.rfind("./", 0) == 0 ? path.substr(2) : path);
}

std::string temp_dir() {
  return detail::env_string("TMPDIR").value_or("/tmp");
}

}  // namespace dpx
