// dpx's dtypes and reduce ops as MPI's. MPI has no float16 or bfloat16 (OpenMPI 4 none at all,
// MPICH only as MPIX_ extensions), so those move as 16-bit integers and reduce through
// user-defined MPI_Ops that compute in float32 and round each partial result. Included only by
// the mpi backend's files, inside #if DPX_WITH_MPI.
#pragma once

#include <ATen/ATen.h>
#include <mpi.h>

#include "dpx/comm/types.h"

namespace dpx::detail::mpi {

// The datatype a tensor of `t` moves as; every dtype ProcessGroup accepts has one.
MPI_Datatype datatype(at::ScalarType t);

// The MPI_Op that reduces `t` by `op`; kAvg is the sum (the caller divides afterwards).
// Needs create_user_ops() first for float16 and bfloat16.
MPI_Op reduce_op(at::ScalarType t, ReduceOp op);

// On the MPI thread, once, after MPI_Init: the float16 and bfloat16 ops.
void create_user_ops();

}  // namespace dpx::detail::mpi
