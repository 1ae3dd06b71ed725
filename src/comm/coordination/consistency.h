// The one cross-rank consistency mechanism every backend uses (Note [Consistency]): what a rank
// says about each collective it runs, how two such descriptions are compared, and the set-up
// check of the settings that must agree across ranks.
//
// Note [Consistency]
// Ranks that disagree on a collective (op, dtype, element count, reduce op, root) or on a
// setting that shapes the data exchange (DPX_SHM_SMALL_BYTES, the slot size, the backend) give
// a wrong result, a crash inside the transport, or a wait until the timeout. So:
//  1. At set-up, each backend publishes its settings through the group's store and compares
//     them with every peer's (check_settings_agree); a difference raises on every rank, naming
//     the setting and both values, before any segment or connection is made.
//  2. Before each collective exchanges data, every rank compares its CollectiveDescriptor with
//     every peer's (check_same): the shm backend through its segment (Note [Mismatch check] in
//     comm/backends/shm/channel.h), the gloo backend through a small allgather that precedes the
//     data. Every rank raises MismatchError, and the group stays usable.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "dpx/errors.h"
#include "dpx/store/store.h"

namespace dpx::detail {

enum class CollectiveKind : std::int16_t {
  kAllreduce = 1,
  kBroadcast,
  kAllgather,
  kReduceScatter,
  kBarrier,
};

const char* to_string(CollectiveKind kind);

// Plain data: the shm backend stores it in shared memory, the gloo backend sends its bytes.
struct CollectiveDescriptor {
  std::uint32_t seq = 0;  // how many collectives this rank ran before on this group
  CollectiveKind kind = CollectiveKind::kBarrier;
  std::int16_t dtype = 0;      // at::ScalarType of the input
  std::int16_t reduce_op = 0;  // dpx::ReduceOp of a reduction
  std::int16_t shared = 0;     // a shared all-reduce's block number (SharedBlocks), else 0
  std::int32_t root = 0;   // of a broadcast; of a shared all-reduce, its offset in 64-byte lines
  std::int64_t numel = 0;  // of the input
};
static_assert(sizeof(CollectiveDescriptor) == 24, "the shm segment's layout depends on it");

// The description of a call; `t` may be undefined (barrier). `seq` is left 0 for the backend.
CollectiveDescriptor describe_call(CollectiveKind kind, const at::Tensor& t, int reduce_op = 0,
                                   int root = 0);

// "allreduce(sum) on 100 Float as collective #3".
std::string to_string(const CollectiveDescriptor& d);

// Throws MismatchError naming both calls unless `theirs` (rank `peer`'s) equals `mine`.
void check_same(const CollectiveDescriptor& mine, const CollectiveDescriptor& theirs, int peer,
                const std::string& where, const std::string& backend);

// A setting every rank of a group must share, as a name users can act on (the environment
// variable that sets it) and its effective value on this rank.
struct Setting {
  std::string name;
  std::string value;
};

// Collective over the group's store (step 1 of Note [Consistency]): returns when every rank
// has the same settings, else throws DistributedError on every rank, naming the first setting
// that differs and both values. Waits at most `timeout` for the peers' settings.
void check_settings_agree(Store& store, int rank, int size, const std::vector<Setting>& mine,
                          std::chrono::milliseconds timeout, const std::string& where);

}  // namespace dpx::detail
