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
