// Device math the attention kernels share.
#pragma once

#include <cmath>

namespace pa {

// 2^x in one instruction (ex2.approx; the emulator: exp2f). exp2f adds a range check.
__device__ inline float fast_exp2(float x) {
#if defined(PA_BACKEND_CPU)
  return exp2f(x);
#else
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#endif
}

}  // namespace pa
