#include "comm/coordination/control.h"

#include "comm/copy_back_work.h"

namespace dpx::detail {
namespace {

bool on_host(const ProcessGroup& pg) { return pg.options().device.is_cpu(); }

}  // namespace

std::shared_ptr<Work> control_allreduce(ProcessGroup& pg, at::Tensor& cpu, ReduceOp op) {
  if (on_host(pg)) return pg.allreduce(cpu, {op});
  at::Tensor device = cpu.to(pg.options().device);
  auto work = pg.allreduce(device, {op});
  return std::make_shared<CopyBackWork>(
      std::move(work), [cpu, device]() mutable { cpu.copy_(device); }, pg.options().timeout);
}

void control_broadcast(ProcessGroup& pg, at::Tensor& cpu, int root,
                       std::optional<std::chrono::milliseconds> timeout) {
  const auto limit = timeout.value_or(pg.options().timeout);
  if (on_host(pg)) {
    pg.broadcast(cpu, {root})->wait(limit);
    return;
  }
  at::Tensor device = cpu.to(pg.options().device);
  pg.broadcast(device, {root})->wait(limit);
  cpu.copy_(device);
}

void control_allgather(ProcessGroup& pg, at::Tensor& output, const at::Tensor& input,
                       std::optional<std::chrono::milliseconds> timeout) {
  const auto limit = timeout.value_or(pg.options().timeout);
  if (on_host(pg)) {
    pg.allgather(output, input)->wait(limit);
    return;
  }
  at::Tensor in = input.to(pg.options().device);
  at::Tensor out = at::empty(output.sizes(), output.options().device(pg.options().device));
  pg.allgather(out, in)->wait(limit);
  output.copy_(out);
}

}  // namespace dpx::detail
