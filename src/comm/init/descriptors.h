// How many file descriptors a rank needs, checked against its limit before the store listens.
#pragma once

namespace dpx::detail {

// Note [Descriptor budget]
// A rank needs descriptors for its own work, and the process that serves the rendezvous store
// (rank 0, unless dpxrun's agent serves it) also holds one per client and lets connections that
// have not said who they are hold up to a quarter of its limit (Note [Out of descriptors] in
// src/store/tcp_server.cpp). Measured at the peak of /proc/PID/fd while the example trained:
// 14-19 descriptors per rank on 2 ranks, 18-22 on 4, shm and gloo alike. Set-up asks for
//   own    = 24 + 2 per other rank (standard streams, LibTorch's and OpenMP's, the store client,
//            shared-memory segments while they are mapped, a Gloo pair per peer), and
//   server = 4 + 1 per rank (listener, spare, wake pipe, one connection per rank),
// Set-up fails at once, naming the limit and the number to raise it to, when the limit is below
// own, or, on the store's host, when own + server exceed three quarters of it.

// The descriptors a rank of `world` needs, with the store it may serve.
int descriptors_needed(int world, bool serves_store);
// The smallest ulimit -n that leaves descriptors_needed() once strangers hold their share.
int descriptor_limit_needed(int world, bool serves_store);
// Throws (TORCH_CHECK) when this process's limit is below descriptor_limit_needed().
void check_descriptor_limit(int rank, int world, bool serves_store);

}  // namespace dpx::detail
