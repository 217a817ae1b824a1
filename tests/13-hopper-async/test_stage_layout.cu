// Chapter 13, exercise 1 alone: TMA writes a stage through the tensor maps (k_map_spec,
// v_map_spec) and wgmma reads it back through the descriptors (k_desc, v_desc). One-hot
// operands make each product a copy: S = E K^T with E's row r the unit vector of dim d0 + r
// gives S[r][t] = K[t][d0 + r], and O = E V with E's row r the unit vector of token t0 + r
// gives O[r][d] = V[t0 + r][d]. Each element read back is compared with the pool, by name:
// which token, which dim, which page and block.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "compare.h"
#include "need_hopper.h"
#include "pa/launch.h"
#include "stage_pipeline.cuh"
#include "tile_math.cuh"

namespace {

using pa::ch13::Smem;
using pa::ch13::TileShape;


// One warpgroup: loads the stage's pages (page p from blocks[p], KV head kv_head), then for
// each 64-dim pass of K and each 64-token pass of V a one-hot product, written to
// k_out [D][kTokens] (S[r][t] at dim d0 + r) and v_out [kTokens][D].
template <typename T, int D>
__global__ void stage_read_kernel(const __grid_constant__ pa::TensorMap k_map,
                                  const __grid_constant__ pa::TensorMap v_map, const int* blocks,
                                  int bs, int kv_head, float* k_out, float* v_out) {
  using S = TileShape<D>;
  constexpr int N = S::kTokens;
  PA_DYNAMIC_SHARED(unsigned char, raw);
  const Smem<D> sm(raw);
  const int t = threadIdx.x, pages = N / bs;
  const uint32_t page_bytes = uint32_t(bs) * D * 2;
  if (t == 0) {
    pa::mbarrier_init(sm.k_full(0), 1);
    pa::mbarrier_init(sm.v_full(0), 1);
    pa::fence_mbarrier_init();
  }
  __syncthreads();
  if (t == 0) {
    pa::mbarrier_arrive_expect_tx(sm.k_full(0), pages * page_bytes);
    pa::mbarrier_arrive_expect_tx(sm.v_full(0), pages * page_bytes);
  }
  if (t < 32)  // warp 0, as the kernel's producer: its lanes share K's boxes
    for (int p = 0; p < pages; ++p) {
      pa::ch13::load_k_page(k_map, sm, 0, p, bs, kv_head, blocks[p], t);
      if (t == 0) pa::tma_load_4d(sm.v_box(0, p, bs), v_map, 0, 0, kv_head, blocks[p], sm.v_full(0));
    }
  pa::mbarrier_wait_parity(sm.k_full(0), 0);
  pa::mbarrier_wait_parity(sm.v_full(0), 0);
  // S = E K^T, one 64-dim slab at a time: E (Q's place, stored as q_desc reads it) has row
  // r = the unit vector of dim d0 + r.
  unsigned char* e = sm.q(0);
  const uint32_t base = pa::smem_address(e);
  for (int d0 = 0; d0 < D; d0 += 64) {
    for (int i = t; i < 64 * D; i += 128) {
      const int r = i / D, d = i % D;
      const uint32_t at = pa::swizzle_address(base + pa::ch13::q_chunk_offset(r, d / 8) + (d % 8) * 2, 128);
      *reinterpret_cast<T*>(e + (at - base)) = pa::from_float<T>(d == d0 + r ? 1.f : 0.f);
    }
    pa::fence_proxy_async();
    pa::named_barrier_sync(1, 128);
    pa::WgmmaAcc<N> sc;
    pa::wgmma_fence();
    for (int ks = 0; ks < D / 16; ++ks)
      pa::wgmma_mma_async<T>(sc, pa::ch13::q_desc(e, ks), pa::ch13::k_desc(sm, 0, ks), ks > 0);
    pa::wgmma_commit_group();
    pa::wgmma_wait_group<0>(sc);
    for (int i = 0; i < pa::WgmmaAcc<N>::kRegs; ++i)
      k_out[(d0 + pa::WgmmaAcc<N>::row(i, t)) * N + pa::WgmmaAcc<N>::col(i, t)] = sc.d[i];
    pa::named_barrier_sync(1, 128);  // every wgmma read E before it is rewritten
  }
  // O = E V, 64 tokens at a time: E's row r = the unit vector of token t0 + r, in registers.
  for (int t0 = 0; t0 < N; t0 += 64) {
    uint32_t a[N / 16][4];
    for (int ks = 0; ks < N / 16; ++ks)
      for (int j = 0; j < 4; ++j) {
        const int row = 16 * (t / 32) + (t % 32) / 4 + 8 * (j % 2);
        const int key = 16 * ks + 8 * (j / 2) + 2 * (t % 4);
        a[ks][j] = pa::ch13::pack_pair<T>(key == t0 + row ? 1.f : 0.f, key + 1 == t0 + row ? 1.f : 0.f);
      }
    pa::WgmmaAcc<D> o;
    for (int i = 0; i < pa::WgmmaAcc<D>::kRegs; ++i) o.d[i] = 0.f;
    pa::wgmma_fence();
    for (int ks = 0; ks < N / 16; ++ks)
      pa::wgmma_mma_async_rs<T>(o, a[ks], pa::ch13::v_desc(sm, 0, ks, bs));
    pa::wgmma_commit_group();
    pa::wgmma_wait_group<0>(o);
    for (int i = 0; i < pa::WgmmaAcc<D>::kRegs; ++i)
      v_out[(t0 + pa::WgmmaAcc<D>::row(i, t)) * D + pa::WgmmaAcc<D>::col(i, t)] = o.d[i];
  }
}

template <typename T, int D>
void check_stage(int bs) {
  SCOPED_TRACE("D " + std::to_string(D) + ", block size " + std::to_string(bs));
  constexpr int N = TileShape<D>::kTokens;
  const int hkv = 2, kv_head = 1, pages = N / bs, num_blocks = pages + 3;
  // Distinct values: element (block, head, d, token) -> a small integer code, exact in fp16.
  auto code = [&](int block, int head, int d, int tok) {
    return float(((block * 7 + head * 3 + d * 5 + tok * 11) % 97) - 48) / 16.f;
  };
  std::vector<T> k(size_t(num_blocks) * hkv * D * bs), v(k.size());
  for (int b = 0; b < num_blocks; ++b)
    for (int h = 0; h < hkv; ++h)
      for (int d = 0; d < D; ++d)
        for (int tok = 0; tok < bs; ++tok) {
          const size_t blk = (size_t(b) * hkv + h) * D * bs;
          k[blk + (size_t(d / 8) * bs + tok) * 8 + d % 8] = pa::from_float<T>(code(b, h, d, tok));
          v[blk + size_t(d) * bs + tok] = pa::from_float<T>(-code(b, h, d, tok));
        }
  std::vector<int> blocks(static_cast<size_t>(pages));
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), std::mt19937(3));
  for (int& b : blocks) b = (b * 5 + 2) % num_blocks;  // scattered, not in order
  const pa::ch10::VarlenShape s{1, 1, hkv, hkv, D, bs, num_blocks, pages};
  pa::DeviceBuffer<T> dk(k), dv(v);
  pa::DeviceBuffer<int> db(blocks);
  const pa::TensorMap km = pa::encode_tensor_map(pa::ch13::k_map_spec(dk.get(), s));
  const pa::TensorMap vm = pa::encode_tensor_map(pa::ch13::v_map_spec(dv.get(), s));
  pa::DeviceBuffer<float> k_out(static_cast<size_t>(D * N)), v_out(static_cast<size_t>(N * D));
  k_out.fill_bytes(0xFF);
  v_out.fill_bytes(0xFF);
  const size_t smem = TileShape<D>::kSmem;
  PA_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(stage_read_kernel<T, D>),
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  pa::launch(stage_read_kernel<T, D>, dim3(1), dim3(128), smem, nullptr, km, vm, db.get(), bs, kv_head,
             k_out.get(), v_out.get());
  const std::vector<float> gk = k_out.download(), gv = v_out.download();
  int bad = 0;
  for (int d = 0; d < D && bad < 5; ++d)
    for (int tok = 0; tok < N && bad < 5; ++tok) {
      const int p = tok / bs, b = blocks[size_t(p)];
      const float want = code(b, kv_head, d, tok % bs), got = gk[size_t(d) * N + tok];
      if (got != want)
        ADD_FAILURE() << "K through k_desc: token " << tok << " (page " << p << ", block " << b
                      << ", slot " << tok % bs << "), dim " << d << " (chunk " << d / 8
                      << "): read " << got << ", the pool has " << want << (++bad == 5 ? " (and more)" : "");
    }
  for (int tok = 0; tok < N && bad < 10; ++tok)
    for (int d = 0; d < D && bad < 10; ++d) {
      const int p = tok / bs, b = blocks[size_t(p)];
      const float want = -code(b, kv_head, d, tok % bs), got = gv[size_t(tok) * D + d];
      if (got != want)
        ADD_FAILURE() << "V through v_desc: token " << tok << " (page " << p << ", block " << b
                      << ", slot " << tok % bs << "), dim " << d << ": read " << got
                      << ", the pool has " << want << (++bad == 10 ? " (and more)" : "");
    }
}

TEST(StageLayout, TmaWritesWhatWgmmaReadsForEveryBlockSize) {
  PA_NEED_HOPPER();
  for (int bs : {8, 16, 32}) check_stage<pa::half, 128>(bs);
}

TEST(StageLayout, TmaWritesWhatWgmmaReadsForEveryHeadSize) {
  PA_NEED_HOPPER();
  check_stage<pa::bf16, 64>(16);
  check_stage<pa::half, 256>(32);
  check_stage<pa::bf16, 256>(8);
}

}  // namespace
