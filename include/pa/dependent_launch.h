// A kernel that may start before the kernel ahead of it in the stream has ended
// (programmatic dependent launch, sm_90 and later):
//   the first kernel calls pa::let_dependents_start() once its blocks are all running;
//   the host launches the second with pa::launch_dependent(...) instead of pa::launch;
//   the second kernel's blocks call pa::wait_for_prior_grid() before they read anything the
//   first one writes. The wait returns once the first kernel has ended and its writes are
//   visible, so the second's blocks are already placed and past their launch when it does.
// The emulator runs kernels one after the other: there, all three are the plain launch and
// nothing, which is a legal schedule of the overlapped one; so are they before sm_90.
#pragma once

#include <utility>

#include "pa/launch.h"

namespace pa {

__device__ inline void let_dependents_start() {
#if !defined(PA_BACKEND_CPU) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ inline void wait_for_prior_grid() {
#if !defined(PA_BACKEND_CPU) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                      cudaStream_t stream, Args&&... args) {
#if defined(PA_BACKEND_CPU)
  launch(kernel, grid, block, shared_bytes, stream, std::forward<Args>(args)...);
#elif defined(__CUDACC__)
  static_assert(sizeof...(Params) == sizeof...(Args), "wrong number of kernel arguments");
  // Before sm_90 there is no dependent launch: the plain one.
  int device = 0, major = 0;
  PA_CUDA_CHECK(cudaGetDevice(&device));
  PA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major < 9) return launch(kernel, grid, block, shared_bytes, stream, std::forward<Args>(args)...);
  cudaLaunchAttribute overlap[1];
  overlap[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = overlap;
  config.numAttrs = 1;
  detail::check_launch(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...), stream);
#else
  static_assert(sizeof(kernel) == 0, "pa::launch_dependent must be called from a .cu file");
#endif
}

}  // namespace pa
