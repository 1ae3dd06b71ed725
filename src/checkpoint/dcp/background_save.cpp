// Note [Asynchronous DCP save] in background_save.h.
#include "checkpoint/dcp/background_save.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <c10/util/StringUtil.h>

#include <cstring>
#include <exception>

#include "dpx/checkpoint/checkpoint_file.h"
#include "dpx/errors.h"
#include "dpx/runtime/files.h"

namespace dpx::detail::dcp {
namespace {

constexpr int kWriterNice = 10;

std::string layout_file(const std::string& folder, int rank) {
  return folder + "/.layout-" + std::to_string(rank);
}

}  // namespace

BackgroundSave::BackgroundSave(Job job) : job_(std::move(job)), thread_([this] { run(); }) {}

BackgroundSave::~BackgroundSave() {
  if (std::uncaught_exceptions() > 0) stop_ = true;
  if (thread_.joinable()) thread_.join();
}

std::string BackgroundSave::join() {
  if (thread_.joinable()) thread_.join();
  return error_;
}

void BackgroundSave::run() {
  // Below training's threads: the write (serialising, checksumming, copying into the page cache)
  // takes the cores training leaves idle, not the ones it computes on. Linux's nice value is per
  // thread; where that fails the write keeps the process's priority.
  ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), kWriterNice);
  Layout mine(layout_size(job_.items), 0);
  try {
    mine = write_part(job_.items, job_.folder, job_.rank, job_.world, job_.write);
  } catch (const std::exception& e) {
    error_ = std::string("could not write its part: ") + e.what();
  }
  try {  // its layout says whether the part is there (mine[0])
    write_checkpoint_file(layout_file(job_.folder, job_.rank),
                          std::string(reinterpret_cast<const char*>(mine.data()),
                                      mine.size() * sizeof(int64_t)));
    if (job_.rank == 0 && error_.empty()) publish_when_all_parts_are_written(mine);
  } catch (const std::exception& e) {
    error_ += (error_.empty() ? "" : "; then ") + std::string(e.what());
  }
  job_.items.clear();  // the host copies go as soon as they are written
  finished_ = true;
}

void BackgroundSave::publish_when_all_parts_are_written(const Layout& mine) {
  const size_t bytes = mine.size() * sizeof(int64_t);
  std::vector<Layout> layouts(static_cast<size_t>(job_.world));
  layouts[0] = mine;
  std::vector<int> missing;
  for (int r = 1; r < job_.world; ++r) missing.push_back(r);
  const auto deadline = std::chrono::steady_clock::now() + job_.timeout;
  while (!missing.empty()) {
    std::vector<int> still;
    for (const int r : missing) {
      const auto path = layout_file(job_.folder, r);
      if (!path_exists(path)) {  // renamed into place whole: there means complete
        still.push_back(r);
        continue;
      }
      const auto data = read_checkpoint_file(path);
      if (data.size() != bytes) {
        throw CheckpointError(path + " holds " + std::to_string(data.size()) + " bytes, not the " +
                              std::to_string(bytes) + " of a layout of this save's " +
                              std::to_string(job_.items.size()) + " entries");
      }
      layouts[static_cast<size_t>(r)].resize(mine.size());
      std::memcpy(layouts[static_cast<size_t>(r)].data(), data.data(), bytes);
    }
    missing = std::move(still);
    if (missing.empty()) break;
    if (stop_ || std::chrono::steady_clock::now() >= deadline) {
      throw CheckpointError("rank(s) " + c10::Join(", ", missing) + " did not finish their part of " +
                            job_.folder + (stop_ ? " before the checkpointer was destroyed"
                                                 : " within " + std::to_string(
                                                       job_.timeout.count()) + " ms") +
                            "; no .metadata was written");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::vector<const int64_t*> parts;
  for (const auto& layout : layouts) parts.push_back(layout.data());
  check_parts_written(parts, job_.folder, "");
  write_file_atomically(job_.folder + "/.metadata", pickle_metadata(metadata_of(job_.items,
                                                                                parts)));
  for (int r = 0; r < job_.world; ++r) ::unlink(layout_file(job_.folder, r).c_str());
  job_.publish();
}

}  // namespace dpx::detail::dcp
