// Chapter 13: the warp-specialized prefill kernel (TMA + mbarrier + wgmma).
//
//   producer warp    for each KV tile: wait until its stage is free (`empty`), announce the
//                    bytes (expect_tx) and issue one TMA per page and 64 dims of K, one per
//                    page of V; they complete on `k_full` and `v_full` (stage_pipeline.cuh).
//   consumer WG c    rows 64 c .. 64 c + 63 of the tile. Q once into shared memory. Then for
//                    each KV tile: wait `k_full`, S = Q K^T (wgmma, one group), the mask and
//                    the online softmax in registers, P into A fragments, wait `v_full`,
//                    O += P V (wgmma from registers), wait, release the stage (`empty`)
//                    (wgmma_schedule.cuh).
// What each stage holds, and how TMA and wgmma agree on it: stage_layout.cuh.
#pragma once

#include "pa/hopper.h"
#include "wgmma_schedule.cuh"

namespace pa::ch13 {

// ANCHOR: kernel
template <typename T, int D>
__global__ void __launch_bounds__(384, 1)
    prefill_kernel(const __grid_constant__ TensorMap k_map, const __grid_constant__ TensorMap v_map,
                   PrefillArgs<T> a) {
  using S = TileShape<D>;
  PA_DYNAMIC_SHARED(unsigned char, raw);
  const Smem<D> sm(raw);
  const PrefillItem it = a.items[blockIdx.x];
  if (threadIdx.x == 0) {
    for (int s = 0; s < S::kStages; ++s) {
      mbarrier_init(sm.k_full(s), 1);
      mbarrier_init(sm.v_full(s), 1);
      mbarrier_init(sm.empty(s), 2);  // one arrival per consumer warpgroup
    }
    mbarrier_init(sm.patch(), 1);
    fence_mbarrier_init();
  }
  __syncthreads();
  const int seq_len = a.seq_lens[it.seq], q_start = a.query_start_loc[it.seq];
  const int n_new = a.query_start_loc[it.seq + 1] - q_start;
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    setmaxnreg_dec<40>();  // the producer needs few registers: the consumers take them
    if (threadIdx.x < 32) produce<T, D>(k_map, v_map, a, it, sm, seq_len, threadIdx.x);
  } else {
    setmaxnreg_inc<232>();
    consume<T, D>(a, it, sm, wg - 1, seq_len, n_new, q_start);
  }
}
// ANCHOR_END: kernel

}  // namespace pa::ch13
