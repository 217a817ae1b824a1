// Chapter 4: paged attention v1, the decode kernel that walks the block table.
//
// Chapter 2's gather copied the pool into a dense buffer before chapter 1's kernel could
// run. Here the attention kernel reads K and V straight from the pool: for each logical
// block of its sequence it looks up the physical block in block_table and reads that
// block's K (16-byte chunks, chapter 2's layout) and V. One thread block per
// (query head, sequence); its four warps take turns over the KV blocks, each with an
// online softmax, and merge at the end as in chapter 1.
#pragma once

#include <cstdint>

#include "pa/backend.h"
#include "pa/ch03_block_table.h"
#include "pa/device_buffer.h"

namespace pa::ch04 {

// ANCHOR: shape
struct PagedAttentionShape {
  int num_seqs;            // B
  int num_q_heads;         // Hq
  int num_kv_heads;        // Hkv; Hq must be a multiple of it (GQA; 1 = MQA)
  int head_size;           // D: 64, 80, 96, 112, 128 or 256
  int block_size;          // tokens per KV block: 8, 16 or 32
  int num_blocks;          // blocks in each pool
  int max_blocks_per_seq;  // the block table's width
};
// ANCHOR_END: shape

// Throws pa::Error naming the problem: an unsupported head or block size, Hq not a
// multiple of Hkv, non-positive sizes, a grid too large to launch.
void check_shape(const PagedAttentionShape& s);

// out[b, h, :] = attention of q[b, h, :] over the first context_lens[b] tokens of
// sequence b, whose K and V live in the pools (chapter 2's layouts) at the blocks listed
// in row b of block_table [num_seqs, max_blocks_per_seq]. Padding entries of the table
// and slots past a sequence's end are never read. context_len 0 gives zeros. All
// pointers are device pointers; T is float, half or bf16; accumulation is in fp32.
template <typename T>
void paged_attention_v1(const PagedAttentionShape& s, T* out, const T* q, const T* k_pool,
                        const T* v_pool, const int* block_table, const int* context_lens,
                        float scale, cudaStream_t stream = nullptr);

// Chapter 4's stretch exercise (paged_attention_suffix.cu): v1 over each sequence's tokens
// from block first_block[b] on (tokens first_block[b] * block_size .. context_lens[b] - 1;
// the table's entries before it are never read), writing also lse[b * Hq + h] = log(sum
// over those tokens of exp(scale * q . k)) (natural log; -inf, and a zero output, when
// there is none). head_size 64 or 128. Device pointers.
template <typename T>
void paged_attention_suffix(const PagedAttentionShape& s, T* out, float* lse, const T* q,
                            const T* k_pool, const T* v_pool, const int* block_table,
                            const int* context_lens, const int* first_block, float scale,
                            cudaStream_t stream = nullptr);

// The checked mode: chapter 3's metadata, validated on the host (a block id out of range,
// a context_len beyond the table, a negative length are refused with a message) and only
// then copied to the device, where the kernels can trust it.
struct DeviceBatch {
  DeviceBatch(const ch03::BatchMetadata& md, int num_blocks, int block_size);
  int num_seqs, max_blocks_per_seq, max_context_len;
  DeviceBuffer<int> block_table, context_lens;
};

}  // namespace pa::ch04
