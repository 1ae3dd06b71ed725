// The DcpCheckpointer (Note [DCP training checkpoint] in dcp_checkpointer.h): DCP directories
// kept per step by the StepDirectory, the progress as objects beside the model and optimizer.
#include "dpx/checkpoint/dcp_checkpointer.h"

#include <c10/util/StringUtil.h>

#include <array>
#include <cstdio>
#include <vector>

#include "dpx/checkpoint/dcp.h"
#include "dpx/errors.h"
#include "dpx/runtime/files.h"
#include "checkpoint/dcp/background_save.h"
#include "checkpoint/dcp/chunk_reader.h"
#include "checkpoint/dcp/dcp_extras.h"
#include "checkpoint/dcp/dcp_items.h"
#include "checkpoint/dcp/metadata.h"
#include "checkpoint/step_directory.h"
#include "comm/coordination/control.h"

namespace dpx {
namespace {

constexpr const char* kDcpStepPrefix = "dcp-";      // dcp-<step>/: a complete checkpoint
constexpr const char* kDcpPartial = ".partial";     // dcp-<step>.partial/: being written
constexpr const char* kModelPrefix = "model.";
constexpr const char* kOptimPrefix = "optim.";
constexpr std::array<const char*, 3> kProgressKeys = {"epoch", "step", "sampler_position"};

detail::StepDirectory dcp_folders(const std::string& directory) {
  return {directory, kDcpStepPrefix, ""};
}

// The progress saved in `dir` (read on every rank; three small objects).
TrainingProgress read_progress(const std::string& dir) {
  const auto metadata = detail::dcp::read_metadata(dir, {});
  detail::dcp::ChunkFiles files(dir);
  std::array<int64_t, 3> values{};
  for (size_t i = 0; i < kProgressKeys.size(); ++i) {
    const std::string fqn = std::string("progress.") + kProgressKeys[i];
    const auto found = metadata.objects.find(fqn);
    if (found == metadata.objects.end()) {
      throw CheckpointError(dir + " has no " + fqn + " entry: not a DcpCheckpointer checkpoint "
                            "(a DCP checkpoint of the model alone loads with dcp_load_state_dict)");
    }
    const auto value = detail::dcp::read_object(found->second, fqn, files, {});
    if (!value.isInt()) throw CheckpointError(dir + ": " + fqn + " is not an int");
    values[i] = value.toInt();
  }
  return {.epoch = values[0], .step = values[1], .sampler_position = values[2]};
}

}  // namespace

DcpCheckpointer::DcpCheckpointer(DcpCheckpointerOptions options, std::shared_ptr<ProcessGroup> pg)
    : options_(std::move(options)), pg_(std::move(pg)) {
  TORCH_CHECK(!options_.directory.empty(), "DcpCheckpointer: directory is empty");
  TORCH_CHECK(pg_, "DcpCheckpointer: the process group is null");
  TORCH_CHECK(options_.keep_last >= 1, "DcpCheckpointer: keep_last must be at least 1, got ",
              options_.keep_last);
}

DcpCheckpointer::~DcpCheckpointer() {
  if (!in_flight_) return;
  const std::string error = in_flight_->join();
  if (!error.empty()) {
    std::fprintf(stderr, "%sDcpCheckpointer: the background save of %s failed, and no wait() "
                 "reported it before the checkpointer was destroyed: %s\n", pg_->where().c_str(),
                 in_flight_folder_.c_str(), error.c_str());
  }
}

std::string DcpCheckpointer::path_for_step(int64_t step) const {
  return dcp_folders(options_.directory).path_for_step(step);
}

void DcpCheckpointer::barrier() { pg_->barrier()->wait(options_.timeout); }

std::vector<std::string> DcpCheckpointer::list() const {
  std::vector<std::string> complete;
  for (auto& dir : dcp_folders(options_.directory).list()) {
    if (path_exists(dir + "/.metadata")) complete.push_back(std::move(dir));
  }
  return complete;
}

std::string DcpCheckpointer::save(const torch::nn::Module& model,
                                  const torch::optim::Optimizer& optimizer,
                                  const TrainingProgress& progress) {
  wait();
  const auto folders = dcp_folders(options_.directory);
  const std::string final_dir = path_for_step(progress.step);
  const std::string partial = final_dir + kDcpPartial;
  if (pg_->rank() == 0) {  // a save of this step killed before left its files: start afresh
    folders.create();
    remove_tree(partial);
  }
  const std::vector<detail::dcp::ExtraEntry> extras = {
      {{"progress", kProgressKeys[0]}, progress.epoch},
      {{"progress", kProgressKeys[1]}, progress.step},
      {{"progress", kProgressKeys[2]}, progress.sampler_position}};
  const DcpSaveOptions save_options{.prefix = kModelPrefix, .optimizer_prefix = kOptimPrefix,
                                    .timeout = options_.timeout, .write = options_.write};
  if (options_.async_save) {  // Note [Asynchronous DCP save] in background_save.h
    detail::dcp::save_group(model, pg_);  // refuses a module sharded over another group
    if (pg_->rank() == 0) make_dirs(partial);
    barrier();
    const int keep_last = options_.keep_last;
    in_flight_ = std::make_unique<detail::dcp::BackgroundSave>(detail::dcp::BackgroundSave::Job{
        .items = detail::dcp::snapshot(
            detail::dcp::collect_items(model, &optimizer, save_options, extras, pg_)),
        .folder = partial,
        .rank = pg_->rank(),
        .world = pg_->size(),
        .timeout = options_.timeout,
        .write = options_.write,
        .publish = [folders, partial, step = progress.step, keep_last] {
          folders.publish(partial, step);
          folders.prune(keep_last, kDcpPartial);
        }});
    in_flight_folder_ = final_dir;
    return final_dir;
  }
  // save_with_extras makes the folder on rank 0 and waits for it before any rank writes.
  detail::dcp::save_with_extras(model, optimizer, partial, pg_, save_options, extras);
  if (pg_->rank() == 0) {
    folders.publish(partial, progress.step);
    folders.prune(options_.keep_last, kDcpPartial);
  }
  barrier();
  return final_dir;
}

bool DcpCheckpointer::saving() const { return in_flight_ && !in_flight_->finished(); }

void DcpCheckpointer::wait() {
  if (!in_flight_) return;
  const std::string error = in_flight_->join();
  in_flight_.reset();
  // Every rank learns which ranks failed: a failure on one is a failure of the checkpoint.
  auto mine = at::full({1}, error.empty() ? 0 : 1, at::kLong);
  auto all = at::empty({pg_->size()}, at::kLong);
  detail::control_allgather(*pg_, all, mine, options_.timeout);
  std::vector<int> failed;
  for (int r = 0; r < pg_->size(); ++r) {
    if (all[r].item<int64_t>() != 0) failed.push_back(r);
  }
  if (failed.empty()) return;
  throw CheckpointError(pg_->where() + "DcpCheckpointer: the background save of " +
                        in_flight_folder_ + " failed on rank(s) " + c10::Join(", ", failed) +
                        (error.empty() ? " (their own errors say why)" : ": " + error) +
                        "; it is no checkpoint, and the one before it is still the newest");
}

std::optional<TrainingProgress> DcpCheckpointer::load_latest(torch::nn::Module& model,
                                                             torch::optim::Optimizer& optimizer) {
  wait();
  barrier();
  // The .metadata reads, and the progress is there.
  const int64_t step = detail::agree_on_latest_step(
      *pg_, options_.timeout, dcp_folders(options_.directory), [&] { return list(); },
      [](const std::string& dir) { read_progress(dir); }, "DcpCheckpointer");
  if (step < 0) return std::nullopt;
  const std::string dir = path_for_step(step);
  const auto progress = read_progress(dir);
  dcp_load_state_dict(model, dir, {.prefix = kModelPrefix});
  dcp_load_optimizer_state_dict(model, optimizer, dir, {.prefix = kOptimPrefix});
  barrier();
  return progress;
}

}  // namespace dpx
