// One directory of checkpoints, one per step, that every checkpointer keeps the same way: named
// <prefix><step><suffix>, listed newest first, pruned to the newest few, with what killed saves
// left behind removed.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dpx/comm/process_group.h"

namespace dpx::detail {

class StepDirectory {
 public:
  // `digits`: the step is zero-padded to that many digits (0: not padded). A name is a
  // checkpoint's whatever its padding, so a directory of either kind reads the same.
  StepDirectory(std::string directory, std::string prefix, std::string suffix, int digits = 0);

  const std::string& directory() const { return directory_; }
  std::string path_for_step(int64_t step) const;
  // The step of the entry `name` (no folder), or -1 for a name that is not a checkpoint.
  int64_t step_of(const std::string& name) const;
  // The checkpoints' paths, newest first.
  std::vector<std::string> list() const;

  // Creates the directory (and those above it); a CheckpointError says why it cannot.
  void create() const;
  // Removes all but the newest `keep_last` checkpoints, and every entry that starts with the
  // prefix and holds `leftover` in its name (a killed writer's temporary file or folder).
  // Only one rank may call it, when no save is in progress.
  void prune(int keep_last, const std::string& leftover) const;
  // Renames the folder `partial` to the checkpoint of `step` (replacing one of that step) and
  // syncs the directory: a checkpoint folder is complete or absent, never in between.
  std::string publish(const std::string& partial, int64_t step) const;

 private:
  std::string directory_;
  std::string prefix_;
  std::string suffix_;
  int digits_;
};

// Collective over `pg`: rank 0 goes through `newest_first()` (called there only), skipping with
// a warning that names `who` each checkpoint `check` rejects with a CheckpointError, and every
// rank returns the step (in `folders`) of the first that passes, or -1 when none does.
int64_t agree_on_latest_step(ProcessGroup& pg, std::chrono::milliseconds timeout,
                             const StepDirectory& folders,
                             const std::function<std::vector<std::string>()>& newest_first,
                             const std::function<void(const std::string&)>& check,
                             const std::string& who);

}  // namespace dpx::detail
