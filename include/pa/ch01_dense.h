// Chapter 1: the dense KV cache.
//
// Every sequence owns one contiguous slab of max_seq_len token slots per layer:
//   k_cache, v_cache: [num_seqs, max_seq_len, num_kv_heads, head_size]
// Decoding appends one token's K and V per sequence, then every query head attends over
// its sequence's first context_len slots. Simple and fast to index; wasteful, because
// every slab is sized for the longest sequence the model allows.
#pragma once

#include <cstdint>
#include <vector>

#include "pa/backend.h"
#include "pa/device_buffer.h"
#include "pa/trace.h"

namespace pa::ch01 {

// ANCHOR: shape
struct DenseShape {
  int num_seqs;      // B: sequences in the batch
  int max_seq_len;   // token slots reserved per sequence
  int num_q_heads;   // Hq: query heads
  int num_kv_heads;  // Hkv: K/V heads; Hq / Hkv query heads share one (GQA; 1 = MQA)
  int head_size;     // D: 64, 80, 96, 112, 128 or 256
};
// ANCHOR_END: shape

// Throws pa::Error naming the problem: non-positive sizes, Hq not a multiple of Hkv,
// an unsupported head size, or a cache too large to index.
void check_shape(const DenseShape& s);

// Copies one new token per sequence into the cache:
//   k_cache[b, positions[b], :, :] = k_new[b, :, :]   (likewise v)
// k_new, v_new: [num_seqs, num_kv_heads, head_size]. positions[b] < 0 skips sequence b
// (a padding row). All pointers are device pointers. Positions must be < max_seq_len;
// DenseKVCache::append checks that on the host.
template <typename T>
void append_kv(const DenseShape& s, T* k_cache, T* v_cache, const T* k_new, const T* v_new,
               const int* positions, cudaStream_t stream = nullptr);

// Decode attention, one new query token per sequence:
//   out[b, h, :] = softmax(scale * q[b, h, :] . K[b, t, g(h), :] for t < context_lens[b])
//                  . V[b, t, g(h), :]          with g(h) = h / (Hq / Hkv)
// q, out: [num_seqs, num_q_heads, head_size]. context_len 0 gives zeros. Slots at or
// beyond context_lens[b] are never read. Accumulation is in fp32 for every T.
template <typename T>
void decode_attention(const DenseShape& s, T* out, const T* q, const T* k_cache,
                      const T* v_cache, const int* context_lens, float scale,
                      cudaStream_t stream = nullptr);

// Many new tokens at once (chapter 1's stretch exercise, append_kv_varlen.cu):
// k_new, v_new: [num_tokens, num_kv_heads, head_size], the new tokens of sequence 0, then
// of sequence 1, ...; cu_tokens: [num_seqs + 1] running sums of the sequences' new-token
// counts (0 first, num_tokens last); start: [num_seqs] the position of each sequence's first
// new token. Token cu_tokens[b] + j goes to slot start[b] + j of sequence b. Device
// pointers; positions must be < max_seq_len.
template <typename T>
void append_kv_varlen(const DenseShape& s, T* k_cache, T* v_cache, const T* k_new, const T* v_new,
                      int num_tokens, const int* cu_tokens, const int* start,
                      cudaStream_t stream = nullptr);

// A dense cache that owns its device buffers and keeps each sequence's length on the
// host, so that every call is checked before a kernel runs.
template <typename T>
class DenseKVCache {
 public:
  explicit DenseKVCache(const DenseShape& shape);

  const DenseShape& shape() const { return shape_; }
  const std::vector<int>& lengths() const { return lengths_; }

  // Appends one token to each sequence b with active[b] (all when `active` is empty).
  // k_new, v_new: device [num_seqs, num_kv_heads, head_size]. Throws, changing nothing,
  // if an active sequence is already full.
  void append(const T* k_new, const T* v_new, const std::vector<bool>& active = {});

  // out, q: device [num_seqs, num_q_heads, head_size]; scale defaults to 1/sqrt(D).
  void decode(T* out, const T* q, float scale = 0.f);

  T* k_cache() { return k_.get(); }
  T* v_cache() { return v_.get(); }

 private:
  DenseShape shape_;
  DeviceBuffer<T> k_, v_;
  DeviceBuffer<int> positions_, context_lens_;
  std::vector<int> lengths_;
};

// ANCHOR: report
// What a dense cache costs on a trace: every request reserves max_seq_len slots but
// fills only prompt + output of them.
struct MemoryReport {
  int64_t reserved_bytes;        // num_requests * max_seq_len * bytes_per_token
  int64_t used_bytes;            // sum(prompt + output) * bytes_per_token
  double waste_fraction;         // 1 - used / reserved
  int64_t dense_seqs_in_budget;  // budget / (max_seq_len * bytes_per_token), rounded down
  int64_t ideal_seqs_in_budget;  // budget / (mean(prompt + output) * bytes_per_token), down
};
MemoryReport dense_memory_report(const std::vector<Request>& trace, const KVConfig& cfg,
                                 int64_t budget_bytes);
// ANCHOR_END: report

}  // namespace pa::ch01
