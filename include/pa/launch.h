// One way to launch a kernel on both backends:
//   pa::launch(my_kernel<T>, grid, block, shared_bytes, stream, arg1, arg2, ...);
// On the GPU this is my_kernel<<<grid, block, shared_bytes, stream>>>(args...); on the
// CPU emulator every CUDA thread becomes a fiber that calls my_kernel(args...).
// A failed launch throws pa::Error (with the emulator's file:line diagnosis).
#pragma once

#include <cstdlib>
#include <tuple>
#include <utility>

#include "pa/check.h"

namespace pa {

namespace detail {
// After a launch: PA_SYNC_LAUNCH=1 waits for each kernel on the GPU, so a fault is reported
// at its launch; a failed launch throws.
inline void check_launch(cudaError_t err, cudaStream_t stream) {
  static const bool sync_each = std::getenv("PA_SYNC_LAUNCH") != nullptr;
  if (err == cudaSuccess && sync_each) err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess)
    throw Error(std::string("kernel launch failed: ") + cudaGetErrorString(err));
}
}  // namespace detail

template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
            cudaStream_t stream, Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "wrong number of kernel arguments");
#if defined(PA_BACKEND_CPU)
  // Arguments are copied once, like the GPU's parameter buffer; each thread then gets
  // its own by-value copies when it calls the kernel.
  std::tuple<Params...> params(std::forward<Args>(args)...);
  cudaError_t err = ::emu::launch(reinterpret_cast<const void*>(kernel), grid, block,
                                  shared_bytes, [&] { std::apply(kernel, params); });
  detail::check_launch(err, stream);
#elif defined(__CUDACC__)
  kernel<<<grid, block, shared_bytes, stream>>>(std::forward<Args>(args)...);
  detail::check_launch(cudaGetLastError(), stream);
#else
  static_assert(sizeof(kernel) == 0, "pa::launch must be called from a .cu file");
#endif
}

}  // namespace pa
