// Chapter 8: prefill over paged KV, the attention of a chunk of new tokens.
//
// Decode (chapters 4-5) has one new token per sequence. A prompt, a piece of a prompt
// (chunked prefill) or what is left of a prompt after a prefix-cache hit has many. They
// come stacked, "varlen": sequence b's new tokens are rows query_start_loc[b] ..
// query_start_loc[b + 1] - 1 of q. Their K and V are written to the pool first (chapter
// 2's reshape_and_cache), so the kernel reads every key and value from the pool: the
// cached prefix and the chunk alike. New token i of sequence b (n_b new tokens) sits at
// position context_lens[b] - n_b + i and attends to positions 0 .. that one (causal).
#pragma once

#include <cstdint>
#include <vector>

#include "pa/backend.h"
#include "pa/device_buffer.h"

namespace pa::ch08 {

// ANCHOR: shape
struct PrefillShape {
  int num_seqs;            // B
  int num_tokens;          // new tokens of the whole batch: rows of q and out
  int num_q_heads;         // Hq
  int num_kv_heads;        // Hkv; Hq must be a multiple of it
  int head_size;           // D: 64, 80, 96, 112, 128 or 256
  int block_size;          // 8, 16 or 32
  int num_blocks;          // blocks in each pool
  int max_blocks_per_seq;  // the block table's width
};
// ANCHOR_END: shape

// Throws pa::Error naming the problem (as chapter 4's check_shape, plus num_tokens).
void check_shape(const PrefillShape& s);

// Host-side check of the varlen metadata before it goes to the device: query_start_loc
// [B + 1] starts at 0, never decreases and ends at num_tokens; 0 <= n_b <= context_lens[b]
// <= max_blocks_per_seq * block_size; each used table entry is a block of the pool.
void check_metadata(const PrefillShape& s, const std::vector<int>& block_table,
                    const std::vector<int>& context_lens,
                    const std::vector<int>& query_start_loc);

// out, q: [num_tokens, Hq, D]; pools in chapter 2's layouts; block_table [B, M];
// context_lens [B]; query_start_loc [B + 1]. Device pointers; T is float, half or bf16;
// fp32 accumulation. A sequence with no new tokens contributes no rows.
template <typename T>
void prefill_attention(const PrefillShape& s, T* out, const T* q, const T* k_pool,
                       const T* v_pool, const int* block_table, const int* context_lens,
                       const int* query_start_loc, float scale, cudaStream_t stream = nullptr);

}  // namespace pa::ch08
