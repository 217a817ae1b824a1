// Chapter 13: chapter 10's varlen paged prefill, rebuilt on Hopper's asynchronous machinery.
//
// One thread block of three warpgroups takes 128 query rows of one sequence and one KV head
// (rows i * G + h as in chapter 10: new token i, query head kv_head * G + h):
//   warpgroup 0, the producer: one warp moves the pages of K and V into a ring of shared-
//     memory stages with TMA (tensor-map copies, each completing on an mbarrier);
//   warpgroups 1 and 2, the consumers: 64 rows each, S = Q K^T and O += P V with wgmma, the
//     online softmax in registers between them.
// The pools stay in chapter 2's layouts: K [block][kv head][D / 8][block_size][8] and V
// [block][kv head][D][block_size]. A tensor map reads K's page token-major (one 128-byte
// row per token and 64 dims), so that the stage is the K-major tile wgmma reads.
//
// Queries and outputs fp16 or bf16, the cache the same dtype; head sizes 64, 128 and 256;
// block sizes 8, 16 and 32; causal attention over the cached prefix, as chapter 10's.
// Hopper (sm_90a) only on the GPU; everywhere on the emulator.
#pragma once

#include <cstdint>
#include <vector>

#include "pa/backend.h"
#include "pa/device_buffer.h"
#include "pa/dtype.h"
#include "pa/ch10_varlen.h"

namespace pa::ch13 {

// ANCHOR: prefill_item
// The query rows of one thread block: rows [row0, row0 + kCtaRows) of sequence `seq` (those
// it has), against its keys [0, kv_end): kv_end is the last row's position + 1.
inline constexpr int kCtaRows = 128;   // two consumer warpgroups x 64 rows
struct PrefillItem {
  int seq, kv_head, row0, kv_end;
};
// ANCHOR_END: prefill_item

// Throws pa::Error naming what this kernel does not take (a head size other than 64, 128
// or 256, a block size other than 8, 16 or 32), after chapter 10's check_shape.
void check_prefill_shape(const ch10::VarlenShape& s);

// Every (128-row tile, KV head) of the batch's sequences with new tokens, longest KV first:
// the thread blocks that start first take the most work.
std::vector<PrefillItem> prefill_items(const ch10::VarlenShape& s, const std::vector<int>& seq_lens,
                                       const std::vector<int>& query_start_loc);

// Does this device run the Hopper kernels (compute capability 9.0)? The emulator: yes.
bool hopper_device();

// Plan once per step (the host's lengths), run once per layer, as chapter 10's runner.
class HopperPrefill {
 public:
  void plan(const ch10::VarlenShape& s, const std::vector<int>& seq_lens,
            const std::vector<int>& query_start_loc, cudaStream_t stream = nullptr);
  // Attention of every row of q (device pointers, the planned shape); T is half or bf16.
  template <typename T>
  void run(T* out, const T* q, const T* k_pool, const T* v_pool, const int* block_table,
           const int* seq_lens, const int* query_start_loc, float scale,
           cudaStream_t stream = nullptr);
  int num_items() const { return num_items_; }

 private:
  ch10::VarlenShape shape_{};
  DeviceBuffer<PrefillItem> items_;
  int num_items_ = 0;
};

}  // namespace pa::ch13
