#include <chrono>
#include <cstring>
#include <sstream>

#include "dpx/errors.h"
#include "ft/protocol.h"
#include "ft/state.h"

namespace dpx::ft {

std::string Manager::State::save() const {
  torch::serialize::OutputArchive archive;
  for (const auto& p : module->named_parameters()) archive.write("p." + p.key(), p.value());
  for (const auto& b : module->named_buffers()) archive.write("b." + b.key(), b.value(), true);
  torch::serialize::OutputArchive opt;
  optimizer->save(opt);
  archive.write("optimizer", opt);
  for (size_t i = 0; i < extra.size(); ++i) archive.write("x." + std::to_string(i), extra[i]);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void Manager::State::load(const std::string& bytes) {
  torch::serialize::InputArchive archive;
  archive.load_from(bytes.data(), bytes.size());
  torch::NoGradGuard no_grad;
  // Read into new tensors and copy: the registered tensors keep their storage, so autograd's
  // accumulators and the optimizer's references stay valid.
  auto take = [&](const std::string& key, const at::Tensor& into, bool buffer) {
    at::Tensor t;
    archive.read(key, t, buffer);
    into.copy_(t);
  };
  for (const auto& p : module->named_parameters()) take("p." + p.key(), p.value(), false);
  for (const auto& b : module->named_buffers()) take("b." + b.key(), b.value(), true);
  torch::serialize::InputArchive opt;
  archive.read("optimizer", opt);
  optimizer->load(opt);
  for (size_t i = 0; i < extra.size(); ++i) take("x." + std::to_string(i), extra[i], true);
}

std::uint64_t detail::checksum(const void* data, std::size_t n) {
  // FNV-1a, 8 bytes at a time (a check against torn or misrouted bytes, not an adversary).
  std::uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Every member takes part in the broadcast from the source (rank k of each group with rank k of
// the others); only the joiners keep what they receive.
void Manager::heal(const detail::Decision& d) {
  TORCH_CHECK(state_, "dpx::ft::Manager: a group joins at step ", d.step, " and must take the "
              "model from a peer, but register_state() was not called");
  const bool source = d.source == options_.group;
  const bool joining = d.joining(options_.group);
  const auto start = std::chrono::steady_clock::now();
  std::string bytes = source ? state_->save() : std::string();
  auto header = torch::zeros({3}, torch::kInt64);  // size, checksum, step
  if (source) {
    header[0] = static_cast<std::int64_t>(bytes.size());
    header[1] = static_cast<std::int64_t>(detail::checksum(bytes.data(), bytes.size()));
    header[2] = step_;
  }
  const int root = d.index_of(d.source);
  try {
    cross_->broadcast(header, {.root = root})->wait();
    // As int64 words (collectives carry no bytes), the last one padded.
    const int64_t size = header[0].item<int64_t>(), words = (size + 7) / 8;
    auto data = torch::zeros({words}, torch::kInt64);
    if (source) std::memcpy(data.data_ptr(), bytes.data(), bytes.size());
    cross_->broadcast(data, {.root = root})->wait();
    if (source) {
      ++stats_.heals_sent;
      say("sent the model and optimizer state at step " + std::to_string(step_) + " (" +
          std::to_string(bytes.size()) + " bytes) to joining group(s)");
      return;
    }
    if (!joining) return;
    const auto sum = detail::checksum(data.data_ptr(), size);
    if (static_cast<std::int64_t>(sum) != header[1].item<int64_t>()) {
      throw DistributedError("the state received from group " + std::to_string(d.source) +
                             " does not match its checksum; not loaded");
    }
    state_->load(std::string(static_cast<const char*>(data.data_ptr()), size));
    step_ = header[2].item<int64_t>();
    stats_.heal_bytes = size;
  } catch (const DistributedError& e) {
    // A joiner without the state must not train: it ends, its agent restarts it, and it asks
    // to join again. The others vote against the step.
    if (joining) throw;
    say(std::string("healing group(s) from group ") + std::to_string(d.source) +
        " failed (the step will not commit): " + e.what());
    cross_ok_ = false;
    return;
  }
  ++stats_.heals_received;
  stats_.heal_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  say("healed from group " + std::to_string(d.source) + " at step " + std::to_string(step_) +
      " (" + std::to_string(stats_.heal_bytes) + " bytes, " +
      std::to_string(stats_.heal_seconds) + " s, checksum ok)");
}

}  // namespace dpx::ft
