// The backend switch: the one place that knows whether kernels run on a GPU or on the
// CPU emulator. Everything else includes this header and stays backend-agnostic.
#pragma once

#if defined(PA_BACKEND_CPU)
#include "emu/cuda_emu.h"
#define PA_BACKEND_NAME "cpu-emulator"
#else
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#define PA_BACKEND_NAME "cuda"
#endif

// Dynamic shared memory, sized at launch: `PA_DYNAMIC_SHARED(float, smem);` inside a
// kernel gives `float* smem`. (On the GPU this is `extern __shared__`; the emulator
// hands out its per-block buffer.)
#if defined(PA_BACKEND_CPU)
#define PA_DYNAMIC_SHARED(T, name) T* name = reinterpret_cast<T*>(::emu::detail::dynamic_shared_memory())
#else
#define PA_DYNAMIC_SHARED(T, name)                                   \
  extern __shared__ __align__(16) unsigned char pa_dynamic_smem_[]; \
  T* name = reinterpret_cast<T*>(pa_dynamic_smem_)
#endif

// Names a piece of shared memory in checked mode's reports, so that a read of memory no
// thread wrote says "q_s[72]" rather than "byte 288":
//   PA_SHARED_REGION(q_s);          a __shared__ array (its name, element type and shape)
//   PA_SHARED_REGION(k_s, count);   count elements of *k_s, carved from PA_DYNAMIC_SHARED
// It computes nothing: on the GPU and in the plain emulator it is no code at all.
#if defined(PA_BACKEND_CPU) && defined(PA_EMU_CHECK)
#define PA_SHARED_REGION_PICK_(a, b, macro, ...) macro
#define PA_SHARED_REGION_ARRAY_(array) ::emu::detail::name_shared_array(#array, array)
#define PA_SHARED_REGION_POINTER_(ptr, count) ::emu::detail::name_shared_pointer(#ptr, ptr, count)
#define PA_SHARED_REGION(...) \
  PA_SHARED_REGION_PICK_(__VA_ARGS__, PA_SHARED_REGION_POINTER_, PA_SHARED_REGION_ARRAY_, unused)(__VA_ARGS__)
#else
#define PA_SHARED_REGION(...) static_cast<void>(0)
#endif
