// Chapter 8: a tiny decoder whose attention reads and writes the paged KV cache.
//
// A few layers of: RMSNorm -> Q, K, V projections -> rotary positions -> attention ->
// output projection (residual) -> RMSNorm -> SiLU MLP (residual); then a final RMSNorm
// and the logits. Weights are drawn from a seeded splitmix64, so nothing is downloaded
// and every run is bit-for-bit the same. Activations are fp32; the KV cache is fp32 unless
// ModelConfig::kv_dtype says fp16 or bf16.
//
// The same weights run two ways:
//   paged: a step's new tokens of many sequences at once; K/V go into chapter 2's pools
//          (reshape_and_cache), decode tokens attend with chapter 5's paged_attention and
//          prefill chunks with this chapter's prefill_attention;
//   dense: one token per sequence per call into chapter 1's DenseKVCache, attended with
//          chapter 1's decode kernel: the reference the paged path must agree with.
// An MLA model (ModelConfig::attention, chapter 11) caches one latent row per token and
// layer instead: paged, absorbed, through ch11::MlaStepAttention; dense, decompressed
// into plain attention of Hq heads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>
#include <vector>

#include "pa/ch01_dense.h"
#include "pa/ch02_paged.h"
#include "pa/ch03_block_table.h"
#include "pa/ch05_paged_attention_v2.h"
#include "pa/ch08_cascade.h"
#include "pa/dtype.h"

namespace pa::ch08 {

// ANCHOR: model_config
// How a layer's attention caches its keys and values.
enum class AttentionKind {
  gqa,  // K and V per KV head (chapters 1-10): num_kv_heads heads of head_size
  mla,  // multi-head latent attention (chapter 11): one latent row per token, see below
};

struct ModelConfig {
  int vocab_size = 128;
  int num_layers = 2;
  int num_q_heads = 4;   // Hq
  int num_kv_heads = 2;  // Hkv: GQA, two query heads per KV head
  int head_size = 64;    // D; hidden size = Hq * D
  int ffn_size = 512;
  uint64_t seed = 8;     // the weights' seed
  // The paged cache's type. Activations are fp32; a 16-bit cache gets q, k and v rounded
  // to it (chapter 10's tensor-core kernel needs fp16 or bf16).
  DType kv_dtype = DType::fp32;
  // MLA: every layer caches, per token, one row [c_kv (latent_dim) | k_rope (rope_dim)]
  // shared by all Hq heads (num_kv_heads is unused). Head h's key is [c_kv W_UK[h] | k_rope]
  // and its value c_kv W_UV[h] (both head_size + rope_dim and head_size wide). The paged
  // path runs it absorbed through a step attention (ch11::MlaStepAttention); chapter 11's
  // kernel takes latent_dim 512, rope_dim 64 and a 16-bit cache.
  AttentionKind attention = AttentionKind::gqa;
  int latent_dim = 512;  // d_c
  int rope_dim = 64;     // d_r
  // Chapter 12, the layer pattern (GQA only). windows[l] > 0: layer l is a sliding-window
  // layer (a row at position p sees the keys [p - window + 1, p]); 0: full attention. Empty:
  // every layer full. sinks: one learned logit per query head (Hq) that joins every layer's
  // softmax and adds no value (gpt-oss); empty: none. A hybrid model's paged path needs a
  // step attention that takes windows and sinks (ch12::HybridStepAttention).
  std::vector<int> windows;
  std::vector<float> sinks;
  // Chapter 14, DeepSeek Sparse Attention (DSA): every layer also caches the lightning
  // indexer's key of each token, index_head_dim (128) e4m3 values and their float32 scale,
  // in a second paged pool under the same block ids (PagedKV::indexer_pools). The paged path
  // writes it (the key is h W_IK, rotated like the other keys); chapter 14's indexer reads it.
  // Not with windows or sinks.
  bool dsa = false;
  int index_head_dim = 128;
  int window_of(int layer) const { return windows.empty() ? 0 : windows[size_t(layer)]; }
  bool hybrid() const;  // any window, or sinks
  // Layer groups (chapter 12): layers of one window (0: full) in groups of
  // layers_per_group() layers each, the gcd of the windows' layer counts (Gemma 3's 5:1: one
  // layer a group; gpt-oss's 1:1 over 24 layers: 12), numbered in order of first layer.
  // Layer l attends with group layer_group(l)'s block tables and stores its K/V in the
  // paged pool layer_slot(l) (its place in its group): a block id belongs to one group, so
  // the groups share layers_per_group() pools, one page size. A model of one window (every
  // model before chapter 12): one group of every layer, pool l for layer l.
  std::vector<int> group_windows() const;  // each group's window
  int layer_group(int layer) const;
  int layers_per_group() const;
  int layer_slot(int layer) const;
  // num_sliding layers of `window`, then num_full full layers, repeated over num_layers
  // (Gemma 3: 5 and 1; gpt-oss: 1 and 1).
  static std::vector<int> layer_pattern(int num_layers, int num_sliding, int num_full, int window);
  int hidden() const { return num_q_heads * head_size; }
  bool mla() const { return attention == AttentionKind::mla; }
  int elem_bytes() const { return kv_dtype == DType::fp32 ? 4 : 2; }
  // What one token costs in the cache, every layer: K and V of every KV head (GQA), or one
  // latent row (MLA: 1,152 B a layer in 16 bits); DSA adds the indexer's 132 B a layer.
  int64_t kv_bytes_per_token() const;
  // The shape of forward_dense's caches (chapter 1) for num_seqs rows of max_seq_len
  // tokens. MLA decompressed: Hq heads of K and V, head_size + rope_dim wide (V's last
  // rope_dim columns are zeros).
  ch01::DenseShape dense_shape(int num_seqs, int max_seq_len) const {
    if (mla()) return {num_seqs, max_seq_len, num_q_heads, num_q_heads, head_size + rope_dim};
    return {num_seqs, max_seq_len, num_q_heads, num_kv_heads, head_size};
  }
  // The softmax scale: 1/sqrt of the key's width (MLA: the decompressed head's).
  float attention_scale() const;
};
// ANCHOR_END: model_config

// Runs f(T{}) with T the cache's element type: float, half or bf16.
template <typename F>
void with_kv_type(DType d, F&& f) {
  if (d == DType::fp32) f(float{});
  else if (d == DType::fp16) f(half{});
  else f(bf16{});
}

// ANCHOR: indexer_layout
// The indexer pool (DSA, chapter 14): per token a 128-wide e4m3 key and its float32 scale,
// 132 bytes. Within a block the block_size keys come first, then their block_size scales:
//   block b: [ key 0 | key 1 | ... | key bs-1 | scale 0 | ... | scale bs-1 ]
// so with block_size a multiple of 4 every key row and the scale array start on a 16-byte
// boundary (bulk copies, TMA). reference/pa_ref/dsa.py is the spec. Offsets in 64 bits.
inline constexpr int kIndexHeadDim = 128;
inline constexpr int kIndexScaleBytes = 4;
inline constexpr int kIndexBytesPerToken = kIndexHeadDim + kIndexScaleBytes;  // 132
__host__ __device__ inline int64_t indexer_block_bytes(int block_size) {
  return int64_t(block_size) * kIndexBytesPerToken;
}
// Byte offset in the flat pool of the key of the token at `offset` of `block`.
__host__ __device__ inline int64_t indexer_key_offset(int64_t block, int offset, int block_size) {
  return block * indexer_block_bytes(block_size) + int64_t(offset) * kIndexHeadDim;
}
// Byte offset in the flat pool of that token's scale: after the block's keys.
__host__ __device__ inline int64_t indexer_scale_offset(int64_t block, int offset, int block_size) {
  return block * indexer_block_bytes(block_size) + int64_t(block_size) * kIndexHeadDim +
         int64_t(offset) * kIndexScaleBytes;
}
// Quantizes each token's key k[i] (128 floats, device) with its own scale, float32(max |k[i]|)
// / 448 (1 for an all-zero row), each value e4m3(saturate(k / scale)) as chapter 6's, and
// writes key and scale to slot slot_mapping[i] of the pool (num_blocks blocks); slots < 0
// are skipped, nothing else changes. Slots are checked by the caller.
void reshape_and_cache_indexer(const float* k, int num_tokens, uint8_t* indexer_pool, int block_size,
                               const int64_t* slot_mapping, cudaStream_t stream = nullptr);
// ANCHOR_END: indexer_layout

// One paged pool pair per layer (chapter 2's KVPool), sharing one block numbering (a hybrid
// model: one per layer slot, ModelConfig::layers_per_group, shared by the groups), of the
// model's kv_dtype (the vectors of the other two types stay empty). An MLA model has one
// latent pool per layer instead, [num_blocks, block_size, latent_dim + rope_dim], NaN to
// start; `shape` then says num_kv_heads 1 and head_size latent_dim + rope_dim, so a block
// is block_size * shape.head_size elements either way. A DSA model also has one indexer pool
// per layer under the same block ids, [num_blocks, block_size * 132] bytes, 0xFF (NaN) to
// start: whatever copies, swaps or shares a block's K/V or latent bytes moves these too.
struct PagedKV {
  PagedKV(const ModelConfig& c, int num_blocks, int block_size);
  ch02::PoolShape shape;
  DType dtype;
  bool latent = false;  // MLA: latent_pools, not the K/V pools
  std::vector<ch02::KVPool<float>> f32;
  std::vector<ch02::KVPool<half>> f16;
  std::vector<ch02::KVPool<bf16>> b16;
  std::vector<DeviceBuffer<uint8_t>> latent_pools;  // MLA, one per layer, of dtype
  std::vector<DeviceBuffer<uint8_t>> indexer_pools;  // DSA, one per layer (none otherwise)
  template <typename T>
  std::vector<ch02::KVPool<T>>& layers() {
    if constexpr (std::is_same_v<T, float>) return f32;
    else if constexpr (std::is_same_v<T, half>) return f16;
    else return b16;
  }
  std::vector<void*> k_pools();  // device pointers, one per layer (MLA: the latent pools)
  std::vector<void*> v_pools();  // (MLA: none)
  std::vector<void*> index_pools();  // device pointers, one per layer (DSA; none otherwise)
  int64_t index_block_bytes() const { return indexer_block_bytes(shape.block_size); }
  int elem_bytes() const { return dtype == DType::fp32 ? 4 : 2; }
  // One block of one layer's K pool or latent pool.
  int64_t block_bytes() const {
    return int64_t(shape.num_kv_heads) * shape.head_size * shape.block_size * elem_bytes();
  }
};

// ANCHOR: step_input
// What one step of the paged path computes: N new tokens of a batch that chapter 3's
// build_batch described. Sequences with one new token come first: their rows attend with
// chapter 5's decode kernel, the rest (prefill chunks) with this chapter's kernel.
struct StepInput {
  std::vector<int> tokens, positions;  // [N]
  ch03::BatchMetadata batch;           // block_table, context_lens, slot_mapping [N], query_start_loc
  std::vector<int> logit_rows;         // rows whose logits come back (a sequence's last new token)
  // Chapter 12, a hybrid model: the step's metadata as each layer group sees it
  // (ModelConfig::group_windows; each group its own block tables and slot_mapping, the same
  // tokens, context_lens and query_start_loc as batch). Empty: batch serves every layer.
  std::vector<ch03::BatchMetadata> groups;
  bool cascade = false;                // decode rows that share a prefix: cascade attention
  // The leading sequences with exactly one new token: chapter 5's part of the batch.
  int num_decode() const;
};
// ANCHOR_END: step_input

// ANCHOR: step_attention
// The whole step's attention in one call per layer, prefill chunks and decodes together,
// the way serving engines run it today. Chapter 10's varlen kernel plugs in here
// (ch10::VarlenStepAttention), and chapter 11's latent kernel (ch11::MlaStepAttention). It
// needs a 16-bit cache (ModelConfig::kv_dtype).

// What every layer's cache looks like: what plan() is told besides the batch.
struct StepCache {
  ch02::PoolShape pool{};   // K/V: each layer's K and V pools; latent: num_blocks and
                            // block_size (num_kv_heads 1, head_size latent_dim + rope_dim)
  int num_q_heads = 0;      // Hq
  DType dtype = DType::fp16;
  bool latent = false;      // MLA: one latent pool per layer, no V pool
  int latent_dim = 0, rope_dim = 0;  // latent: the widths of c_kv and k_rope
  // Chapter 12: per planned group, its sliding window (0: full attention; empty: every group
  // full), and the sinks (Hq logits) every group's softmax takes (empty: none).
  std::vector<int> windows;
  std::vector<float> sinks;
};

class StepAttention {
 public:
  virtual ~StepAttention() = default;
  // Once per step, on the host, before the layers. groups[g] is the step's metadata as
  // layer group g sees it (chapter 12: each group has its own block tables; tokens,
  // query_start_loc and context_lens are the same in every group). A model without layer
  // groups passes one.
  virtual void plan(const std::vector<ch03::BatchMetadata>& groups, const StepCache& cache) = 0;
  // Once per K/V layer: out and q [N, Hq, D] and the layer's K and V pools, all of the
  // planned dtype; group indexes plan()'s groups.
  virtual void run(int group, void* out, const void* q, const void* k_pool, const void* v_pool,
                   float scale, cudaStream_t stream);
  // Once per MLA layer, before run_latent: the step's new rows c_kv [N, latent_dim] and
  // k_rope [N, rope_dim] go to their slots (the group's slot_mapping) of the latent pool.
  virtual void write_latent(int group, void* latent_pool, const void* c_kv, const void* k_rope,
                            cudaStream_t stream);
  // Once per MLA layer: out [N, Hq, latent_dim] = the absorbed attention of q [N, Hq,
  // latent_dim + rope_dim] over the layer's one latent pool (no V pool: V is c_kv).
  virtual void run_latent(int group, void* out, const void* q, const void* latent_pool, float scale,
                          cudaStream_t stream);
  // One group of K/V pools (chapter 10's calls): plan({batch}, ...) and run(0, ...).
  void plan(const ch03::BatchMetadata& batch, const ch02::PoolShape& pool, int num_q_heads, DType dtype);
  void run(void* out, const void* q, const void* k_pool, const void* v_pool, float scale,
           cudaStream_t stream) {
    run(0, out, q, k_pool, v_pool, scale, stream);
  }
};
// ANCHOR_END: step_attention

class TinyModel {
 public:
  explicit TinyModel(const ModelConfig& c);
  ~TinyModel();
  const ModelConfig& config() const { return cfg_; }

  // The paged path: checks `in`, writes the step's K/V into `kv` and returns the logits of
  // in.logit_rows, [logit_rows.size() * vocab_size]. Attention: chapter 5 for the decode rows
  // (cascade attention if in.cascade) and this chapter's prefill kernel for the chunks, or
  // one StepAttention call per layer if one is set (an MLA model needs one: write_latent
  // and run_latent per layer).
  std::vector<float> forward_paged(const StepInput& in, PagedKV& kv);
  void set_step_attention(std::shared_ptr<StepAttention> a) { step_attention_ = std::move(a); }
  StepAttention* step_attention() const { return step_attention_.get(); }

  // ANCHOR: graphs
  // GPU only: a decode step (every sequence one new token) replayed from a CUDA graph,
  // captured at first use for each batch-size bucket (powers of two up to max_batch; rows
  // past the batch are padding that writes no slot). A graph holds kv's pool addresses and
  // fixed metadata buffers max_blocks_per_seq wide; max_context_len sizes chapter 5's grid
  // for every replay. Gives forward_paged's logits (equal up to rounding).
  std::vector<float> forward_decode_graph(const StepInput& in, PagedKV& kv, int max_batch,
                                          int max_blocks_per_seq, int max_context_len);
  static bool graphs_supported();  // false on the emulator (it has no graphs)
  int graphs_captured() const;
  // ANCHOR_END: graphs

  // The dense path: one token per sequence b with active[b], appended to caches[layer]
  // (chapter 1); returns the logits of every row, [B * vocab_size] (inactive rows: junk).
  std::vector<float> forward_dense(const std::vector<int>& tokens, const std::vector<bool>& active,
                                   std::vector<ch01::DenseKVCache<float>>& caches);

 private:
  struct Weights;
  struct Scratch;
  void qkv(Scratch& s, int layer, int n, const int* positions, cudaStream_t stream);
  void mla_qkv(Scratch& s, int layer, int n, const int* positions, cudaStream_t stream);
  void mla_decompress(Scratch& s, int layer, int n, cudaStream_t stream);
  void mla_out(Scratch& s, int layer, int n, cudaStream_t stream);
  void write_index_keys(Scratch& s, int layer, int n, PagedKV& kv, const int64_t* slots, cudaStream_t stream);
  template <typename C>
  std::vector<float> forward_latent_as(const StepInput& in, PagedKV& kv);
  void out_and_mlp(Scratch& s, int layer, int n, cudaStream_t stream);
  void run(Scratch& s, int n, const int* tokens, const int* positions, cudaStream_t stream,
           const std::function<void(int)>& attend);
  std::vector<float> logits_of(Scratch& s, int n, const std::vector<int>& rows, cudaStream_t stream);
  struct Graphs;
  void check_step(const StepInput& in, const PagedKV& kv, const char* who) const;
  void plan_groups(const StepInput& in, const PagedKV& kv);
  template <typename C>
  std::vector<float> forward_paged_as(const StepInput& in, PagedKV& kv);
  template <typename C>
  std::vector<float> forward_graph_as(const StepInput& in, PagedKV& kv, int max_batch, int max_blocks,
                                      int max_context_len);
  ModelConfig cfg_;
  std::unique_ptr<Weights> w_;
  std::unique_ptr<Scratch> s_;
  std::unique_ptr<Graphs> graphs_;
  std::shared_ptr<StepAttention> step_attention_;
  std::unique_ptr<CascadeDevicePlan> cascade_plan_;
  ch05::Workspace ws_;
};

// Greedy decoding on the dense path, sequence by sequence position: the reference.
struct Generation {
  std::vector<int> tokens;                  // generated tokens
  std::vector<std::vector<float>> logits;   // the logits each one was chosen from
};
std::vector<Generation> generate_dense(TinyModel& model,
                                       const std::vector<std::vector<int>>& prompts,
                                       const std::vector<int>& max_new_tokens);

// The index of the largest logit (the first one on a tie): greedy decoding.
int argmax(const float* logits, int n);

}  // namespace pa::ch08
