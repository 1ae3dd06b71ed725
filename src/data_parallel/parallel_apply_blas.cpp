#include "data_parallel/parallel_apply_blas.h"

#include <dlfcn.h>

namespace dpx::detail {
namespace {

struct OpenBlas {
  using Set = void (*)(int);
  using Get = int (*)();
  Set set = reinterpret_cast<Set>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  Get get = reinterpret_cast<Get>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
};

const OpenBlas& openblas() {
  static const OpenBlas found;
  return found;
}

}  // namespace

ScopedBlasThreads::ScopedBlasThreads(int threads) {
  const auto& blas = openblas();
  if (blas.set && blas.get) {
    const int current = blas.get();
    if (current > threads) {
      previous_ = current;
      blas.set(threads);
    }
  }
}

ScopedBlasThreads::~ScopedBlasThreads() {
  if (previous_ > 0) {
    openblas().set(previous_);
  }
}

}  // namespace dpx::detail
