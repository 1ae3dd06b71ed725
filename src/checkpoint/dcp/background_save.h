// A DCP save written by a thread while training goes on (DcpCheckpointerOptions::async_save).
//
// Note [Asynchronous DCP save]
// save() with async_save:
//   1. waits for the save before it (wait(): its failure is reported there, on every rank);
//   2. rank 0 makes dcp-<step>.partial/; a barrier;
//   3. every rank copies its entries (dcp_items.h) to host memory and returns to training;
//   4. a thread of each rank writes its part (__<rank>_0.distcp), then its layout as
//      .layout-<rank> beside it (a rank whose write failed says so there);
//   5. rank 0's thread waits for every rank's layout (polling the folder, for at most the
//      checkpointer's timeout), writes .metadata, removes the layouts, renames the folder to
//      dcp-<step> and prunes.
// No collective runs on the thread: collectives are matched by their order on each rank, and a
// thread of its own would interleave with training's differently on each. The layouts go
// through the folder instead, which every rank sees already (one host, or a shared file system).
// wait() (at the next save, at load_latest, and by the program once training ends) joins the
// thread, and one all-gather of each rank's outcome makes every rank throw a CheckpointError when
// any part or the publishing failed: a failure is reported, never lost. Until rank 0's thread
// publishes it the folder is dcp-<step>.partial, which no load takes: a job killed mid-save
// resumes from the checkpoint before.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "dpx/checkpoint/checkpoint_file.h"
#include "checkpoint/dcp/dcp_items.h"

namespace dpx::detail::dcp {

class BackgroundSave {
 public:
  struct Job {
    std::vector<Item> items;  // a snapshot: nothing else changes them
    std::string folder;       // made by rank 0 before any rank starts
    int rank = 0;
    int world = 1;
    std::chrono::milliseconds timeout{0};  // how long rank 0 waits for the others' parts
    CheckpointWriteOptions write;
    std::function<void()> publish;  // rank 0, once .metadata is written
  };

  explicit BackgroundSave(Job job);
  // Joins the thread; when the stack unwinds for an exception, rank 0 first stops waiting for
  // the others (a peer that died would otherwise hold it for the whole timeout).
  ~BackgroundSave();
  BackgroundSave(const BackgroundSave&) = delete;
  BackgroundSave& operator=(const BackgroundSave&) = delete;

  // Waits for the thread: "" when this rank's part (and on rank 0 the checkpoint) was written,
  // else what went wrong.
  std::string join();
  // Whether the thread has ended (its part written, and on rank 0 the checkpoint published, or
  // failed); join() then returns at once.
  bool finished() const { return finished_; }

 private:
  void run();
  void publish_when_all_parts_are_written(const Layout& mine);

  Job job_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> finished_{false};
  std::string error_;
  std::thread thread_;
};

}  // namespace dpx::detail::dcp
