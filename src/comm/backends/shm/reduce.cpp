#include "comm/backends/shm/reduce.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

namespace dpx::detail::shm {
namespace {

constexpr std::int64_t kBlock = 2048;  // elements; a few blocks stay in L1

// Integers wrap around like PyTorch's (two's complement) instead of overflowing into UB.
template <typename T, bool = std::is_integral_v<T>>
struct ArithOf {
  using type = T;
};
template <typename T>
struct ArithOf<T, true> {
  using type = std::make_unsigned_t<T>;
};
template <typename T>
using Arith = typename ArithOf<T>::type;

template <typename T>
struct Sum {
  T operator()(T a, T b) const { return static_cast<T>(Arith<T>(a) + Arith<T>(b)); }
};
template <typename T>
struct Product {
  T operator()(T a, T b) const { return static_cast<T>(Arith<T>(a) * Arith<T>(b)); }
};
template <typename T>
struct Min {
  T operator()(T a, T b) const { return b < a ? b : a; }
};
template <typename T>
struct Max {
  T operator()(T a, T b) const { return a < b ? b : a; }
};

template <typename T, typename F>
void combine(T* dst, const T* a, const T* b, std::int64_t n, F f) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = f(a[i], b[i]);
}

template <typename T, typename F>
void reduce_full(T* dst, const void* const* srcs, int nsrcs, std::int64_t n, F f, int divisor) {
  for (std::int64_t i = 0; i < n; i += kBlock) {
    const std::int64_t m = std::min(kBlock, n - i);
    T* d = dst + i;
    const T* s0 = static_cast<const T*>(srcs[0]) + i;
    if (nsrcs == 1) {
      if (d != s0) std::memcpy(d, s0, m * sizeof(T));
    } else {
      combine(d, s0, static_cast<const T*>(srcs[1]) + i, m, f);
    }
    for (int k = 2; k < nsrcs; ++k) combine(d, d, static_cast<const T*>(srcs[k]) + i, m, f);
    if (divisor > 1) {
      const T w = static_cast<T>(divisor);
      for (std::int64_t j = 0; j < m; ++j) d[j] = d[j] / w;
    }
  }
}

struct BFloat16Bits {
  static float widen(std::uint16_t x) { return c10::detail::f32_from_bits(x); }
  static std::uint16_t narrow(float x) { return c10::detail::round_to_nearest_even(x); }
};
struct HalfBits {
  static float widen(std::uint16_t x) { return c10::detail::fp16_ieee_to_fp32_value(x); }
  static std::uint16_t narrow(float x) { return c10::detail::fp16_ieee_from_fp32_value(x); }
};

template <typename Bits, typename F>
void reduce_half(std::uint16_t* dst, const void* const* srcs, int nsrcs, std::int64_t n, F f,
                 int divisor) {
  float acc[kBlock];
  for (std::int64_t i = 0; i < n; i += kBlock) {
    const std::int64_t m = std::min(kBlock, n - i);
    const auto* s0 = static_cast<const std::uint16_t*>(srcs[0]) + i;
    for (std::int64_t j = 0; j < m; ++j) acc[j] = Bits::widen(s0[j]);
    for (int k = 1; k < nsrcs; ++k) {
      const auto* s = static_cast<const std::uint16_t*>(srcs[k]) + i;
      for (std::int64_t j = 0; j < m; ++j) acc[j] = f(acc[j], Bits::widen(s[j]));
    }
    if (divisor > 1) {
      const float w = static_cast<float>(divisor);
      for (std::int64_t j = 0; j < m; ++j) acc[j] = acc[j] / w;
    }
    for (std::int64_t j = 0; j < m; ++j) dst[i + j] = Bits::narrow(acc[j]);
  }
}

template <typename T, template <typename> class Op>
void run(void* dst, const void* const* srcs, int nsrcs, std::int64_t n,
         int divisor) {
  reduce_full<T>(static_cast<T*>(dst), srcs, nsrcs, n, Op<T>{}, divisor);
}

template <template <typename> class Op>
void dispatch(at::ScalarType dtype, void* dst, const void* const* srcs, int nsrcs, std::int64_t n,
              int divisor) {
  auto* d16 = static_cast<std::uint16_t*>(dst);
  switch (dtype) {
    case at::kFloat: return run<float, Op>(dst, srcs, nsrcs, n, divisor);
    case at::kDouble: return run<double, Op>(dst, srcs, nsrcs, n, divisor);
    case at::kInt: return run<std::int32_t, Op>(dst, srcs, nsrcs, n, divisor);
    case at::kLong: return run<std::int64_t, Op>(dst, srcs, nsrcs, n, divisor);
    case at::kBFloat16:
      return reduce_half<BFloat16Bits>(d16, srcs, nsrcs, n, Op<float>{}, divisor);
    case at::kHalf: return reduce_half<HalfBits>(d16, srcs, nsrcs, n, Op<float>{}, divisor);
    default: TORCH_CHECK(false, "shm backend: no reduction for dtype ", dtype);
  }
}

}  // namespace

void reduce(at::ScalarType dtype, ReduceOp op, void* dst, const void* const* srcs, int nsrcs,
            std::int64_t n, int world) {
  switch (op) {
    case ReduceOp::kSum: return dispatch<Sum>(dtype, dst, srcs, nsrcs, n, 1);
    case ReduceOp::kAvg: return dispatch<Sum>(dtype, dst, srcs, nsrcs, n, world);
    case ReduceOp::kProduct: return dispatch<Product>(dtype, dst, srcs, nsrcs, n, 1);
    case ReduceOp::kMin: return dispatch<Min>(dtype, dst, srcs, nsrcs, n, 1);
    case ReduceOp::kMax: return dispatch<Max>(dtype, dst, srcs, nsrcs, n, 1);
  }
}

void reduce_into_all(at::ScalarType dtype, ReduceOp op, void* const* parts, int nparts,
                     std::int64_t n, int world) {
  const std::size_t es = c10::elementSize(dtype);
  alignas(64) unsigned char block[kBlock * sizeof(double)];
  std::vector<const void*> at_block(nparts);
  for (std::int64_t i = 0; i < n; i += kBlock) {
    const std::int64_t m = std::min(kBlock, n - i);
    for (int k = 0; k < nparts; ++k) at_block[k] = static_cast<const char*>(parts[k]) + i * es;
    reduce(dtype, op, block, at_block.data(), nparts, m, world);
    for (int k = 0; k < nparts; ++k) {
      std::memcpy(static_cast<char*>(parts[k]) + i * es, block, m * es);
    }
  }
}

}  // namespace dpx::detail::shm
