#include "comm/coordination/consistency.h"

#include <c10/core/ScalarType.h>

#include <sstream>

#include "store/round.h"
#include "dpx/comm/types.h"

namespace dpx::detail {
namespace {

bool same(const CollectiveDescriptor& a, const CollectiveDescriptor& b) {
  return a.seq == b.seq && a.kind == b.kind && a.dtype == b.dtype && a.reduce_op == b.reduce_op &&
         a.shared == b.shared && a.root == b.root && a.numel == b.numel;
}

// "name\tvalue\n" per setting: names and values are ours, free of tabs and newlines.
std::string encode(const std::vector<Setting>& settings) {
  std::string s;
  for (const auto& x : settings) s += x.name + "\t" + x.value + "\n";
  return s;
}

std::vector<Setting> decode(const std::string& s) {
  std::vector<Setting> out;
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line)) {
    const auto tab = line.find('\t');
    if (tab != std::string::npos) out.push_back({line.substr(0, tab), line.substr(tab + 1)});
  }
  return out;
}

std::string value_of(const std::vector<Setting>& settings, const std::string& name) {
  for (const auto& x : settings) {
    if (x.name == name) return x.value;
  }
  return "(not used there)";
}

}  // namespace

const char* to_string(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllreduce: return "allreduce";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kAllgather: return "allgather";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kBarrier: return "barrier";
  }
  return "?";
}

CollectiveDescriptor describe_call(CollectiveKind kind, const at::Tensor& t, int reduce_op,
                                   int root) {
  CollectiveDescriptor d;
  d.kind = kind;
  if (t.defined()) {
    d.dtype = static_cast<std::int16_t>(t.scalar_type());
    d.numel = t.numel();
  }
  d.reduce_op = static_cast<std::int16_t>(reduce_op);
  d.root = root;
  return d;
}

std::string to_string(const CollectiveDescriptor& d) {
  std::string s = to_string(d.kind);
  if (d.kind == CollectiveKind::kAllreduce || d.kind == CollectiveKind::kReduceScatter) {
    s += std::string("(") + dpx::to_string(static_cast<ReduceOp>(d.reduce_op)) + ")";
  } else if (d.kind == CollectiveKind::kBroadcast) {
    s += "(root " + std::to_string(d.root) + ")";
  }
  if (d.kind != CollectiveKind::kBarrier) {
    s += std::string(" on ") + std::to_string(d.numel) + " " +
         c10::toString(static_cast<at::ScalarType>(d.dtype));
  }
  if (d.shared) {
    // The block's number (SharedBlocks in comm/shared_memory.h), then the offset.
    s += " in shared memory block " + std::to_string(d.shared) +
         " at byte " + std::to_string(64 * std::int64_t{d.root});
  }
  return s + " as collective #" + std::to_string(d.seq);
}

void check_same(const CollectiveDescriptor& mine, const CollectiveDescriptor& theirs, int peer,
                const std::string& where, const std::string& backend) {
  if (same(mine, theirs)) return;
  throw MismatchError(where + backend + ": ranks disagree on the collective: this rank called " +
                      to_string(mine) + ", rank " + std::to_string(peer) + " called " +
                      to_string(theirs) + ". Every rank must issue the same collectives in the "
                      "same order, with the same dtype, size, op and root.");
}

void check_settings_agree(Store& store, int rank, int size, const std::vector<Setting>& mine,
                          std::chrono::milliseconds timeout, const std::string& where) {
  if (size == 1) return;
  std::string round;
  const auto all = store_all_gather(store, "settings", rank, size, encode(mine), timeout, &round);
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    const std::vector<Setting> theirs = decode(all[r]);
    for (const auto& x : mine) {
      const std::string other = value_of(theirs, x.name);
      if (other == x.value) continue;
      // Every rank finds a difference (each compares with all): fail together
      // (Note [Failing together] in store/round.h).
      if (rank == 0) {
        wait_until_read(store, round, ranks_but_0(size), std::min(timeout, kReadLimit));
      } else {
        done_reading(store, round, rank);
      }
      throw DistributedError(where + "ranks disagree on " + x.name + ": this rank has " +
                             x.value + ", rank " + std::to_string(r) + " has " + other +
                             ". Set it to the same value on every rank (or leave it unset "
                             "everywhere).");
    }
  }
}

}  // namespace dpx::detail
