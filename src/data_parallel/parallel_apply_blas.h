// Caps the thread count of a BLAS library with a process-wide thread pool while replicas run.
#pragma once

namespace dpx::detail {

// Note [BLAS threads]
// OpenBLAS's pthread build (Debian's default libblas.so.3, which ATen calls for Linear) keeps one
// pool of threads for the process, sized by openblas_set_num_threads, not by OpenMP. Replicas
// calling sgemm at once then queue for that pool and wait on each other. While replicas run, the
// count is lowered to the replicas' own intra-op count and restored afterwards. The functions
// are looked up at run time, so other BLAS libraries (or none) simply leave this a no-op. The
// setting is process-wide: BLAS calls from other threads during a DataParallel forward or
// backward see it too.
class ScopedBlasThreads {
 public:
  explicit ScopedBlasThreads(int threads);
  ~ScopedBlasThreads();
  ScopedBlasThreads(const ScopedBlasThreads&) = delete;
  ScopedBlasThreads& operator=(const ScopedBlasThreads&) = delete;

 private:
  int previous_ = 0;  // 0: nothing changed
};

}  // namespace dpx::detail
