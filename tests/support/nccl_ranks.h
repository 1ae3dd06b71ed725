// Where a test's NCCL ranks run: a GPU each where there are enough, else all on cuda:0 as ranks
// of hosts of their own (Note [NCCL ranks sharing a GPU]).
#pragma once

#include <stdlib.h>

#include <c10/core/Device.h>

#include <string>

namespace dpx::test {

// Note [NCCL ranks sharing a GPU]
// NCCL refuses two ranks of one host on one GPU ("Duplicate GPU detected : rank 0 and rank 1
// both on CUDA device 60"), and the GPU machines this project runs on have one GPU. NCCL tells
// hosts apart by NCCL_HOSTID, though: processes with an id each are ranks of different hosts to
// it, connected through its socket transport (here over loopback), and may share the GPU. That
// runs real multi-rank NCCL (the communicator, the collectives, the failure paths) on one GPU;
// what it cannot show is NCCL's intra-host transports (P2P, NVLink, shared memory), which need
// two GPUs. Probed with PyTorch's own NCCL first: docs/gpu-runs/2026-11-28-1.

// The device of rank `rank` of a `world`-rank NCCL group where a child sees `gpus` GPUs. With
// fewer GPUs than ranks this process becomes a host of its own to NCCL: call it in the rank's
// process before NCCL is first used there (NCCL reads its variables once).
inline c10::Device nccl_rank_device(int rank, int world, int gpus) {
  if (gpus >= world) return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(rank));
  ::setenv("NCCL_HOSTID", ("dpx-test-host-" + std::to_string(rank)).c_str(), 1);
  ::setenv("NCCL_SOCKET_IFNAME", "lo", /*overwrite=*/0);  // the "hosts" meet on loopback
  ::setenv("NCCL_IB_DISABLE", "1", /*overwrite=*/0);
  return c10::Device(c10::kCUDA, 0);
}

}  // namespace dpx::test
