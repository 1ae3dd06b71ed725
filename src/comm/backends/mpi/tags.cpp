// Note [Group epochs] in tags.h.
#include "comm/backends/mpi/tags.h"

#include <algorithm>

namespace dpx::detail::mpi {
namespace {

int round_epochs(int tag_ub) {
  return tag_ub / (kRoundCollectives * kRoundEpochs) >= 64 ? kRoundEpochs : 1;
}

}  // namespace

int round_stride(int tag_ub) { return tag_ub / (kRoundCollectives * round_epochs(tag_ub)); }

int check_tag(std::uint32_t epoch, std::uint32_t seq, int tag_ub) {
  const auto epochs = static_cast<std::uint32_t>((static_cast<std::int64_t>(tag_ub) + 1) >> 15);
  return static_cast<int>((epoch % std::max(epochs, 1U)) << 15 | (seq & 32767U));
}

int round_tag(std::uint32_t epoch, std::uint32_t seq, int round, int tag_ub) {
  const auto slot = (epoch % static_cast<std::uint32_t>(round_epochs(tag_ub))) * kRoundCollectives +
                    seq % static_cast<std::uint32_t>(kRoundCollectives);
  return static_cast<int>(slot) * round_stride(tag_ub) + round;
}

}  // namespace dpx::detail::mpi
