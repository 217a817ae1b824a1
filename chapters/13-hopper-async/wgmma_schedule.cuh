// Your exercise file. (Generated from solutions/13-hopper-async/wgmma_schedule.cuh; instructors regenerate with tools/make_skeletons.py.)
// Chapter 13, exercise 3 of 3 (core): a consumer warpgroup's schedule of waits and wgmma
// groups over the stages the producer fills.
#pragma once

#include <cmath>
#include <cstdint>

#include "pa/hopper.h"
#include "tile_math.cuh"

namespace pa::ch13 {

// ANCHOR: consumer
template <typename T, int D>
__device__ void consume(const PrefillArgs<T>& a, const PrefillItem& it, const Smem<D>& sm, int wg,
                        int seq_len, int n_new, int q_start) {
  using S = TileShape<D>;
  constexpr int N = S::kTokens;
  const int t = threadIdx.x % 128;  // the thread's index in its warpgroup
  const int G = a.num_q_heads / a.num_kv_heads;
  load_q<T, D>(a, it, sm.q(wg), wg, n_new, q_start, t);
  named_barrier_sync(1 + wg, 128);  // the warpgroup's Q is in shared memory

  RowState st;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    st.row[j] = it.row0 + 64 * wg + WgmmaAcc<D>::row(2 * j, t);
    const int token = st.row[j] / G < n_new ? st.row[j] / G : n_new - 1;
    st.pos[j] = seq_len - n_new + token;
    st.m[j] = -INFINITY;
    st.l[j] = 0.f;
  }
  WgmmaAcc<D> o;
#pragma unroll
  for (int i = 0; i < WgmmaAcc<D>::kRegs; ++i) o.d[i] = 0.f;
  const unsigned char* q_s = sm.q(wg);
  const int tiles = (it.kv_end + N - 1) / N;
  for (int n = 0; n < tiles; ++n) {
    const int stage = n % S::kStages;
    WgmmaAcc<N> sc;
    uint32_t p[N / 16][4];
    float corr[2];
    // TODO(ch13): one KV tile, in stage `stage` (the n-th use of a stage; stage_pipeline.cuh
    //   says which phase that is): on return sc held the tile's scores S = Q K^T (D / 16
    //   k-steps of q_desc(q_s, ks) and k_desc(sm, stage, ks), S not accumulated onto anything
    //   earlier), softmax_step(sc, st, n * N, a.scale_log2, p, corr) turned them into P, o
    //   was rescaled by corr (rescale(o, corr)), and o accumulated O += P V (N / 16 k-steps
    //   of v_desc(sm, stage, ks, a.block_size) with p[ks] as A's registers), every product
    //   complete; the stage is released (one arrival on empty(stage) for the warpgroup, once
    //   no wgmma of it reads the stage any more), and no operand or accumulator was read or
    //   written by ordinary code while a wgmma owned it. Read a stage only after its bytes
    //   landed: K and V have barriers of their own.
    (void)sc, (void)p, (void)corr, (void)stage, (void)q_s;
  }
  store_rows<T, D>(a, it, o, st, n_new, q_start);
}
// ANCHOR_END: consumer

}  // namespace pa::ch13
