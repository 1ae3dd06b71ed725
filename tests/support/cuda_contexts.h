// Whether this process has a CUDA context on a GPU, asked of the driver (libcuda, loaded at run
// time: the tests build where there is none), which answers without making one.
#pragma once

#include <dlfcn.h>

#include <optional>

namespace dpx::test {

// Whether the primary context of CUDA device `index` is active in this process; nullopt where
// the driver cannot say (no libcuda).
inline std::optional<bool> has_cuda_context(int index) {
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) lib = ::dlopen("libcuda.so.1", RTLD_NOW);
  if (lib == nullptr) return std::nullopt;
  using Init = int (*)(unsigned);
  using DeviceGet = int (*)(int*, int);
  using GetState = int (*)(int, unsigned*, int*);
  auto init = reinterpret_cast<Init>(::dlsym(lib, "cuInit"));
  auto device_get = reinterpret_cast<DeviceGet>(::dlsym(lib, "cuDeviceGet"));
  auto get_state = reinterpret_cast<GetState>(::dlsym(lib, "cuDevicePrimaryCtxGetState"));
  int device = 0, active = 0;
  unsigned flags = 0;
  if (init == nullptr || device_get == nullptr || get_state == nullptr || init(0) != 0 ||
      device_get(&device, index) != 0 || get_state(device, &flags, &active) != 0) {
    return std::nullopt;
  }
  return active != 0;
}

}  // namespace dpx::test
