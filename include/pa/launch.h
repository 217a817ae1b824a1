// One way to launch a kernel on both backends:
//   pa::launch(my_kernel<T>, grid, block, shared_bytes, stream, arg1, arg2, ...);
// On the GPU this is my_kernel<<<grid, block, shared_bytes, stream>>>(args...); on the
// CPU emulator every CUDA thread becomes a fiber that calls my_kernel(args...).
// A failed launch throws pa::Error (with the emulator's file:line diagnosis).
#pragma once

#include <cstdlib>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include "pa/check.h"

#if defined(PA_BACKEND_CPU)
namespace emu {
// The launch's arguments, for the report of a write outside a buffer: which argument points
// into it (emu/src/memory_map.h).
void note_launch_arguments(const void* kernel, int count, const void* const* values,
                           const size_t* sizes, const char* const* types,
                           const size_t* elem_sizes);
}  // namespace emu
#endif

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

// A pointer argument's element size (1 for void*); 0 for an argument that is not a pointer.
template <typename P>
constexpr size_t element_size() {
  if constexpr (!std::is_pointer_v<P>) {
    return 0;
  } else {
    using E = std::remove_cv_t<std::remove_pointer_t<P>>;
    if constexpr (std::is_void_v<E>) return 1;
    else if constexpr (std::is_object_v<E>) return sizeof(E);
    else return 0;  // a function pointer
  }
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
  // Where each argument is, its size and type, so that a write past a buffer can be
  // reported with the argument that points to it (one extra slot: a kernel may take none).
  constexpr int count = int(sizeof...(Params));
  const void* values[count + 1] = {};
  const size_t sizes[count + 1] = {sizeof(Params)..., 0};
  const char* const types[count + 1] = {typeid(Params).name()..., nullptr};
  const size_t elem_sizes[count + 1] = {detail::element_size<Params>()..., 0};
  std::apply([&](const auto&... p) {
    [[maybe_unused]] int i = 0;
    ((values[i++] = &p), ...);
  }, params);
  const void* id = reinterpret_cast<const void*>(kernel);
  ::emu::note_launch_arguments(id, count, values, sizes, types, elem_sizes);
  cudaError_t err = ::emu::launch(id, grid, block, shared_bytes,
                                  [&] { std::apply(kernel, params); });
  ::emu::note_launch_arguments(nullptr, 0, nullptr, nullptr, nullptr, nullptr);
  detail::check_launch(err, stream);
#elif defined(__CUDACC__)
  kernel<<<grid, block, shared_bytes, stream>>>(std::forward<Args>(args)...);
  detail::check_launch(cudaGetLastError(), stream);
#else
  static_assert(sizeof(kernel) == 0, "pa::launch must be called from a .cu file");
#endif
}

}  // namespace pa
