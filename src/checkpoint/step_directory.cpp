#include "checkpoint/step_directory.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <utility>

#include <c10/util/Exception.h>

#include "dpx/errors.h"
#include "comm/coordination/control.h"
#include "dpx/runtime/files.h"

namespace dpx::detail {

StepDirectory::StepDirectory(std::string directory, std::string prefix, std::string suffix,
                             int digits)
    : directory_(std::move(directory)),
      prefix_(std::move(prefix)),
      suffix_(std::move(suffix)),
      digits_(digits) {}

std::string StepDirectory::path_for_step(int64_t step) const {
  char digits[32];
  std::snprintf(digits, sizeof(digits), "%0*lld", digits_, static_cast<long long>(step));
  return directory_ + "/" + prefix_ + digits + suffix_;
}

int64_t StepDirectory::step_of(const std::string& name) const {
  if (name.size() <= prefix_.size() + suffix_.size() || name.rfind(prefix_, 0) != 0 ||
      name.compare(name.size() - suffix_.size(), suffix_.size(), suffix_) != 0) {
    return -1;
  }
  const auto digits = name.substr(prefix_.size(), name.size() - prefix_.size() - suffix_.size());
  if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) {
    return -1;  // more than 18 digits could overflow: not a name dpx writes
  }
  return std::stoll(digits);
}

std::vector<std::string> StepDirectory::list() const {
  std::vector<std::pair<int64_t, std::string>> found;
  for (const auto& name : list_dir(directory_)) {
    if (const int64_t step = step_of(name); step >= 0) {
      found.emplace_back(step, directory_ + "/" + name);
    }
  }
  std::sort(found.rbegin(), found.rend());
  std::vector<std::string> paths;
  for (auto& f : found) paths.push_back(std::move(f.second));
  return paths;
}

void StepDirectory::create() const {
  try {
    make_dirs(directory_);
  } catch (const std::runtime_error& e) {
    throw CheckpointError("the checkpoint directory " + directory_ +
                          " does not exist and cannot be made (" + e.what() +
                          "): choose a folder this process may write to");
  }
}

void StepDirectory::prune(int keep_last, const std::string& leftover) const {
  const auto paths = list();
  for (size_t i = static_cast<size_t>(keep_last); i < paths.size(); ++i) remove_tree(paths[i]);
  for (const auto& name : list_dir(directory_)) {
    if (name.rfind(prefix_, 0) == 0 && name.find(leftover) != std::string::npos) {
      remove_tree(directory_ + "/" + name);
    }
  }
}

std::string StepDirectory::publish(const std::string& partial, int64_t step) const {
  const std::string final_path = path_for_step(step);
  remove_tree(final_path);
  if (::rename(partial.c_str(), final_path.c_str()) != 0) {
    throw CheckpointError("cannot rename " + partial + " to " + final_path + ": " +
                          std::strerror(errno));
  }
  // The rename is durable once the directory is: without it a power cut could undo it.
  if (const int fd = ::open(directory_.c_str(), O_RDONLY | O_DIRECTORY); fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  return final_path;
}

int64_t agree_on_latest_step(ProcessGroup& pg, std::chrono::milliseconds timeout,
                             const StepDirectory& folders,
                             const std::function<std::vector<std::string>()>& newest_first,
                             const std::function<void(const std::string&)>& check,
                             const std::string& who) {
  int64_t step = -1;
  if (pg.rank() == 0) {
    for (const auto& path : newest_first()) {
      try {
        check(path);
        step = folders.step_of(path.substr(path.rfind('/') + 1));
        break;
      } catch (const CheckpointError& e) {
        TORCH_WARN(where(pg.rank(), pg.size()), who, ": skipping ", e.what());
      }
    }
  }
  auto chosen = at::full({1}, step, at::kLong);
  if (pg.size() > 1) control_broadcast(pg, chosen, 0, timeout);  // the group may be on a GPU
  return chosen.item<int64_t>();
}

}  // namespace dpx::detail
