#include "comm/backends/shm/algorithms.h"

#include <c10/util/SmallVector.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "comm/backends/shm/copy.h"
#include "comm/backends/shm/reduce.h"

namespace dpx::detail::shm {
namespace {

// Slice q of `n` elements cut world ways, on 64-byte boundaries so reductions run aligned.
struct Slice {
  std::int64_t begin;
  std::int64_t size;
};

Slice slice(std::int64_t n, int world, int q, std::size_t element_size) {
  const std::int64_t align = std::max<std::int64_t>(1, 64 / element_size);
  std::int64_t per = (n + world - 1) / world;
  per = (per + align - 1) / align * align;
  const std::int64_t begin = std::min(n, per * q);
  return {begin, std::min(per, n - begin)};
}

char* bytes(const at::Tensor& t) { return static_cast<char*>(t.data_ptr()); }

// Rounds of at most `per_round` elements; a collective of zero elements still runs one round,
// so that every rank posts (and checks descriptors) the same number of times.
template <typename F>
void for_each_round(std::int64_t n, std::int64_t per_round, F body) {
  std::int64_t offset = 0;
  do {
    const std::int64_t m = std::min(per_round, n - offset);
    body(offset, m);
    offset += m;
  } while (offset < n);
}

// Note [Own data]
// The small all-reduce takes the rank's own part from its tensor, not from the slot or control
// line it has just written: a peer reads that line in between, and on the AMD EPYC VM of
// docs/performance.md (issue #47) reading it back then costs a transfer between cores (most
// likely AMD's migratory sharing: a modified line that another core reads moves to that core).
// Cycle counters there, 2 ranks, 256 B, one call: 1248 -> 832 cycles (the wait for the peer,
// whose own read-back it waited out, 1040 -> 364); 4 B to 4 KiB took 0.47-0.68x the time.
// The tensor holds the same bytes, so the result's bits are the same.
//
// Note [Streaming copy-in]
// From options.streaming_in_bytes (32 KiB) on, the one-post all-reduce copies into its slot with
// streaming stores. An ordinary store must first own the line, and every line of the slot was
// last read by a peer, so each store waits for a transfer between cores; streaming stores write
// to memory without taking the line, and the peer's reduction then reads it from memory, which
// costs the same wherever the cores are. On the AMD EPYC VM of docs/performance.md (issue #47),
// whose two vCPUs move between a near placement (cross-core round trip ~0.08 us) and a far one
// (~0.33 us), cycle counters gave the ordinary copy-in 18 cycles a line near and 70 far, 76% and
// 83% of a 64 KiB all-reduce; streaming it made 32-64 KiB 3.5-4.1x faster far and took 0.98-1.10x
// the time near (four runs). Below 32 KiB the near state lost more (8 KiB: 1.67-1.71x), so smaller messages
// keep memcpy. The two-post path's owning stores (copy-in and the reduction into the own slot)
// are not streamed: streaming its copy-in alone made 256-512 KiB 1.06-1.41x slower near. The
// bytes are the same, so the result's bits are too.
void allreduce_small(Channel& ch, at::Tensor& t, ReduceOp op, const AlgorithmOptions& options) {
  const std::size_t bytes_n = t.numel() * t.element_size();
  const bool in_line = bytes_n <= kInlineBytes;  // Note [Inline data] in segment.h
  if (in_line) {
    std::memcpy(ch.mine_inline(), bytes(t), bytes_n);
  } else if (bytes_n >= options.streaming_in_bytes) {
    copy_streaming(ch.mine(), bytes(t), bytes_n);  // Note [Streaming copy-in]
  } else {
    std::memcpy(ch.mine(), bytes(t), bytes_n);
  }
  ch.sync();
  c10::SmallVector<const void*, 8> srcs(ch.world());  // no allocation (Note [Call cost])
  for (int q = 0; q < ch.world(); ++q) {
    srcs[q] = in_line ? static_cast<const void*>(ch.inline_slot(q)) : ch.slot(q);
  }
  // The own part from the tensor (Note [Own data]). reduce() lets dst be srcs[0] or srcs[1]
  // only, so ranks from 2 on keep reading their slot.
  if (ch.rank() < 2) srcs[ch.rank()] = bytes(t);
  reduce(t.scalar_type(), op, bytes(t), srcs.data(), ch.world(), t.numel(), ch.world());
  ch.next_round();
}

void allreduce_large(Channel& ch, at::Tensor& t, ReduceOp op, const AlgorithmOptions& options) {
  const std::size_t es = t.element_size();
  const bool stream = t.numel() * es >= options.streaming_bytes;
  const int world = ch.world(), me = ch.rank();
  std::vector<const void*> srcs(world);
  for_each_round(t.numel(), ch.slot_bytes() / es, [&](std::int64_t offset, std::int64_t m) {
    char* data = bytes(t) + offset * es;
    for (int q = 0; q < world; ++q) {
      const Slice s = slice(m, world, q, es);
      if (q != me) std::memcpy(ch.mine() + s.begin * es, data + s.begin * es, s.size * es);
    }
    ch.sync();
    const Slice own = slice(m, world, me, es);
    for (int q = 0; q < world; ++q) {
      srcs[q] = (q == me ? data : ch.slot(q)) + own.begin * es;
    }
    reduce(t.scalar_type(), op, ch.mine() + own.begin * es, srcs.data(), world, own.size, world);
    ch.sync();
    for (int q = 0; q < world; ++q) {
      const Slice s = slice(m, world, q, es);
      if (stream) {
        copy_streaming(data + s.begin * es, ch.slot(q) + s.begin * es, s.size * es);
      } else {
        std::memcpy(data + s.begin * es, ch.slot(q) + s.begin * es, s.size * es);
      }
    }
    ch.next_round();
  });
}

}  // namespace

void allreduce_shared(Channel& ch, const Segment& shared, std::size_t offset, at::Tensor& t,
                      ReduceOp op) {
  const std::size_t es = t.element_size();
  const int world = ch.world(), me = ch.rank();
  const Slice own = slice(t.numel(), world, me, es);
  std::vector<void*> parts(world);  // the own slice of every rank's tensor
  for (int q = 0; q < world; ++q) parts[q] = shared.slot(q, 0) + offset + own.begin * es;
  ch.sync();  // every rank's tensor is complete
  reduce_into_all(t.scalar_type(), op, parts.data(), world, own.size, world);
  ch.sync();  // every slice is written everywhere
  ch.next_round();
}

void barrier(Channel& ch) {
  ch.sync();
  ch.next_round();
}

void allreduce(Channel& ch, at::Tensor& tensor, ReduceOp op, const AlgorithmOptions& options) {
  const std::size_t n = tensor.numel() * tensor.element_size();
  if (ch.world() == 1) {
    barrier(ch);  // the tensor already is the result
  } else if (n <= std::min(options.small_bytes, ch.slot_bytes())) {
    allreduce_small(ch, tensor, op, options);
  } else {
    allreduce_large(ch, tensor, op, options);
  }
}

void broadcast(Channel& ch, at::Tensor& tensor, int root) {
  const std::size_t es = tensor.element_size();
  const std::size_t n = tensor.numel() * es;
  if (n <= kInlineBytes) {  // Note [Inline data] in segment.h
    if (ch.rank() == root) std::memcpy(ch.mine_inline(), bytes(tensor), n);
    ch.sync();
    if (ch.rank() != root) std::memcpy(bytes(tensor), ch.inline_slot(root), n);
    ch.next_round();
    return;
  }
  for_each_round(tensor.numel(), ch.slot_bytes() / es, [&](std::int64_t offset, std::int64_t m) {
    char* data = bytes(tensor) + offset * es;
    if (ch.rank() == root) std::memcpy(ch.mine(), data, m * es);
    ch.sync();
    if (ch.rank() != root) std::memcpy(data, ch.slot(root), m * es);
    ch.next_round();
  });
}

void allgather(Channel& ch, at::Tensor& output, const at::Tensor& input) {
  const std::size_t es = input.element_size();
  const std::int64_t n = input.numel();
  for_each_round(n, ch.slot_bytes() / es, [&](std::int64_t offset, std::int64_t m) {
    const char* in = bytes(input) + offset * es;
    std::memcpy(ch.mine(), in, m * es);
    ch.sync();
    for (int q = 0; q < ch.world(); ++q) {
      char* out = bytes(output) + (q * n + offset) * es;
      std::memcpy(out, q == ch.rank() ? in : ch.slot(q), m * es);
    }
    ch.next_round();
  });
}

void reduce_scatter(Channel& ch, at::Tensor& output, const at::Tensor& input, ReduceOp op) {
  const std::size_t es = input.element_size();
  const int world = ch.world(), me = ch.rank();
  const std::int64_t n = output.numel();
  std::vector<const void*> srcs(world);
  // Each round carries m elements of every rank's slice, packed slice after slice in the slot.
  const std::int64_t per_round = std::max<std::int64_t>(1, ch.slot_bytes() / (es * world));
  for_each_round(n, per_round, [&](std::int64_t offset, std::int64_t m) {
    for (int q = 0; q < world; ++q) {
      if (q != me) std::memcpy(ch.mine() + q * m * es, bytes(input) + (q * n + offset) * es, m * es);
    }
    ch.sync();
    for (int q = 0; q < world; ++q) {
      srcs[q] = q == me ? bytes(input) + (me * n + offset) * es : ch.slot(q) + me * m * es;
    }
    reduce(input.scalar_type(), op, bytes(output) + offset * es, srcs.data(), world, m, world);
    ch.next_round();
  });
}

}  // namespace dpx::detail::shm
