#if DPX_WITH_MPI
#include "comm/backends/mpi/datatypes.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>

namespace dpx::detail::mpi {
namespace {

// User ops for float16 and bfloat16, indexed [bfloat16?][sum, product, min, max].
MPI_Op g_user_ops[2][4] = {};

struct Add {
  float operator()(float a, float b) const { return a + b; }
};
struct Mul {
  float operator()(float a, float b) const { return a * b; }
};
struct Min {
  float operator()(float a, float b) const { return std::min(a, b); }
};
struct Max {
  float operator()(float a, float b) const { return std::max(a, b); }
};

// MPI_User_function: inout[i] = in[i] op inout[i], computed in float32, rounded to T.
template <typename T, typename F>
void reduce16(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  const F f;
  for (int i = 0; i < *len; ++i) b[i] = T(f(static_cast<float>(a[i]), static_cast<float>(b[i])));
}

template <typename T>
void create_ops(MPI_Op* ops) {
  MPI_Op_create(&reduce16<T, Add>, /*commute=*/1, &ops[0]);
  MPI_Op_create(&reduce16<T, Mul>, 1, &ops[1]);
  MPI_Op_create(&reduce16<T, Min>, 1, &ops[2]);
  MPI_Op_create(&reduce16<T, Max>, 1, &ops[3]);
}

int op_index(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return 0;
    case ReduceOp::kProduct: return 1;
    case ReduceOp::kMin: return 2;
    case ReduceOp::kMax: return 3;
  }
  TORCH_INTERNAL_ASSERT(false, "unknown ReduceOp");
}

}  // namespace

MPI_Datatype datatype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return MPI_FLOAT;
    case at::kDouble: return MPI_DOUBLE;
    case at::kInt: return MPI_INT32_T;
    case at::kLong: return MPI_INT64_T;
    case at::kHalf:
    case at::kBFloat16: return MPI_UINT16_T;  // bits; reductions use the user ops
    default: break;
  }
  TORCH_INTERNAL_ASSERT(false, "mpi backend: no MPI datatype for ", t,
                        " (ProcessGroup should have refused it)");
}

void create_user_ops() {
  create_ops<c10::Half>(g_user_ops[0]);
  create_ops<c10::BFloat16>(g_user_ops[1]);
}

MPI_Op reduce_op(at::ScalarType t, ReduceOp op) {
  if (t == at::kHalf || t == at::kBFloat16) return g_user_ops[t == at::kBFloat16][op_index(op)];
  static const MPI_Op kBuiltin[4] = {MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX};
  return kBuiltin[op_index(op)];
}

}  // namespace dpx::detail::mpi
#endif  // DPX_WITH_MPI
