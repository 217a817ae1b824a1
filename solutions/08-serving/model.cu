// The tiny decoder of chapter 8 (given code): its layers are plain kernels; attention
// is the course's: chapter 2 writes K/V, chapters 5 and 8 read them (chapter 1 on the
// dense path).
#include <algorithm>
#include <map>
#include <cmath>
#include <numeric>

#include "pa/ch08_model.h"
#include "pa/ch08_prefill.h"
#include "pa/launch.h"
#include "pa/trace.h"

namespace pa::ch08 {

namespace {

constexpr int kThreads = 128;
constexpr int kRowsPerThread = 8;  // rows of the activation one matmul thread handles

__global__ void embed_kernel(float* x, const float* table, const int* tokens, int hidden) {
  const int64_t n = blockIdx.x;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x)
    x[n * hidden + i] = table[int64_t(tokens[n]) * hidden + i];
}

// out[n] = x[n] / rms(x[n]) * w, one block per row.
__global__ void rmsnorm_kernel(float* out, const float* x, const float* w, int hidden) {
  __shared__ float partial[kThreads];
  const int64_t n = blockIdx.x;
  float sum = 0.f;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) sum += x[n * hidden + i] * x[n * hidden + i];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (int(threadIdx.x) < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  const float inv = rsqrtf(partial[0] / float(hidden) + 1e-5f);
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) out[n * hidden + i] = x[n * hidden + i] * inv * w[i];
}

// out[n, m] (+)= sum_k in[n, k] * W[k, m]. Each row is computed alone, in the same order,
// whatever the batch: the paged and dense paths get bit-identical projections. Rows of in
// and out are ld_in and ld_out apart (MLA's per-head projections read and write one head's
// columns of a wider row).
__global__ void matmul_kernel(float* out, const float* in, const float* W, int N, int K, int M,
                              int accumulate, int64_t ld_in, int64_t ld_out) {
  const int m = blockIdx.x * blockDim.x + threadIdx.x;
  if (m >= M) return;
  const int n0 = blockIdx.y * kRowsPerThread;
  for (int n = n0; n < min(N, n0 + kRowsPerThread); ++n) {
    float sum = 0.f;
    for (int k = 0; k < K; ++k) sum += in[n * ld_in + k] * W[int64_t(k) * M + m];
    out[n * ld_out + m] = accumulate ? out[n * ld_out + m] + sum : sum;
  }
}

// out[r, c] = in[r, c] (zeros if in is null) for rows r < R and columns c < C, rows
// ld_out and ld_in apart: MLA packs and unpacks head columns with it.
__global__ void copy_cols_kernel(float* out, int64_t ld_out, const float* in, int64_t ld_in, int C) {
  const int64_t r = blockIdx.x;
  for (int c = threadIdx.x; c < C; c += blockDim.x) out[r * ld_out + c] = in ? in[r * ld_in + c] : 0.f;
}

// Rotary positions: rotates the pairs (i, i + D/2) of each head by pos * 10000^(-2i/D).
__global__ void rope_kernel(float* x, const int* positions, int num_heads, int D) {
  const int64_t n = blockIdx.x;
  const int half_d = D / 2;
  const float pos = float(positions[n]);
  for (int j = threadIdx.x; j < num_heads * half_d; j += blockDim.x) {
    const int h = j / half_d, i = j % half_d;
    const float angle = pos * powf(10000.f, -2.f * float(i) / float(D));
    const float c = cosf(angle), s = sinf(angle);
    float* head = x + (n * num_heads + h) * D;
    const float a = head[i], b = head[i + half_d];
    head[i] = a * c - b * s;
    head[i + half_d] = a * s + b * c;
  }
}

template <typename To, typename From>
__global__ void convert_kernel(To* out, const From* in, int64_t count) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) out[i] = from_float<To>(to_float(in[i]));
}

template <typename To, typename From>
void convert(To* out, const From* in, int64_t count, cudaStream_t stream) {
  if (count > 0)
    launch(convert_kernel<To, From>, dim3(unsigned((count + 255) / 256)), dim3(256), 0, stream, out, in, count);
}

// One block per token, one thread per key value: the row's amax, then its bytes and scale.
__global__ void indexer_write_kernel(const float* k, uint8_t* pool, int block_size, const int64_t* slot_mapping) {
  __shared__ float amax[kIndexHeadDim];
  const int64_t i = blockIdx.x, slot = slot_mapping[i];
  const int d = threadIdx.x;
  const float x = k[i * kIndexHeadDim + d];
  amax[d] = fabsf(x);
  __syncthreads();
  for (int stride = kIndexHeadDim / 2; stride > 0; stride /= 2) {
    if (d < stride) amax[d] = fmaxf(amax[d], amax[d + stride]);
    __syncthreads();
  }
  if (slot < 0) return;  // padding (every thread has passed the barriers)
  const float q = amax[0] / 448.f;
  const float scale = q > 0.f ? q : 1.f;  // an all-zero row: scale 1, as the reference's
  const int64_t block = slot / block_size;
  const int offset = int(slot % block_size);
  pool[indexer_key_offset(block, offset, block_size) + d] = __nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE, __NV_E4M3);
  if (d == 0) *reinterpret_cast<float*>(pool + indexer_scale_offset(block, offset, block_size)) = scale;
}

// Chapter 12's dense reference: one token per row b attends to the last `window` keys of
// its dense cache (window 0: every key), with an optional sink logit per query head in the
// softmax's denominator. One thread per (row, query head), two passes over the keys, fp32.
__global__ void dense_window_kernel(float* out, const float* q, const float* k_cache, const float* v_cache,
                                    const int* lens, int max_len, int Hq, int Hkv, int D, int window,
                                    const float* sinks, float scale) {
  const int b = blockIdx.x, h = threadIdx.x;
  if (h >= Hq) return;
  const int len = lens[b], first = window > 0 ? max(0, len - window) : 0, kh = h / (Hq / Hkv);
  const float* qr = q + (int64_t(b) * Hq + h) * D;
  float* o = out + (int64_t(b) * Hq + h) * D;
  auto key = [&](int t) { return (int64_t(b) * max_len + t) * Hkv * D + int64_t(kh) * D; };
  auto score = [&](int t) {
    float dot = 0.f;
    for (int d = 0; d < D; ++d) dot += qr[d] * k_cache[key(t) + d];
    return dot * scale;
  };
  float m = sinks ? sinks[h] : -INFINITY;
  for (int t = first; t < len; ++t) m = fmaxf(m, score(t));
  float sum = sinks ? expf(sinks[h] - m) : 0.f;
  for (int d = 0; d < D; ++d) o[d] = 0.f;
  for (int t = first; t < len; ++t) {
    const float p = expf(score(t) - m);
    sum += p;
    for (int d = 0; d < D; ++d) o[d] += p * v_cache[key(t) + d];
  }
  for (int d = 0; d < D; ++d) o[d] = sum > 0.f ? o[d] / sum : 0.f;
}

__global__ void silu_kernel(float* x, int64_t count) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) x[i] = x[i] / (1.f + expf(-x[i]));
}

void matmul(float* out, const float* in, const float* W, int N, int K, int M, bool accumulate,
            cudaStream_t stream, int64_t ld_in = -1, int64_t ld_out = -1) {
  if (N == 0) return;
  launch(matmul_kernel, dim3((M + kThreads - 1) / kThreads, (N + kRowsPerThread - 1) / kRowsPerThread),
         dim3(kThreads), 0, stream, out, in, W, N, K, M, int(accumulate), ld_in < 0 ? int64_t(K) : ld_in,
         ld_out < 0 ? int64_t(M) : ld_out);
}

void copy_cols(float* out, int64_t ld_out, const float* in, int64_t ld_in, int rows, int cols, cudaStream_t stream) {
  if (rows > 0) launch(copy_cols_kernel, dim3(unsigned(rows)), dim3(kThreads), 0, stream, out, ld_out, in, ld_in, cols);
}

// Deterministic weights: uniform in [-a, a] from splitmix64.
std::vector<float> draw(SplitMix64& rng, size_t count, float a, float offset = 0.f) {
  std::vector<float> w(count);
  for (float& e : w) e = offset + a * (float(double(rng.next() >> 11) * 0x1.0p-53) * 2.f - 1.f);
  return w;
}

template <typename T>
void ensure(DeviceBuffer<T>& buf, size_t count) {
  if (buf.size() < count) buf = DeviceBuffer<T>(std::max(count, 2 * buf.size()));
}

}  // namespace

struct TinyModel::Weights {
  DeviceBuffer<float> embed, lm_head, final_norm;
  std::vector<DeviceBuffer<float>> attn_norm, wq, wk, wv, wo, mlp_norm, w_up, w_down;
  // MLA, per layer: h -> c_kv [H, L] and k_rope [H, R]; h -> q_nope [H, Hq * D] and q_rope
  // [H, Hq * R]; per head h, W_UK[h] and W_UV[h] [L, D] (stored head after head), and
  // W_UK[h] transposed, [D, L], for the absorbed query.
  std::vector<DeviceBuffer<float>> w_dkv, w_kr, wq_rope, w_uk, w_uk_t, w_uv;
  std::vector<DeviceBuffer<float>> w_ik;  // DSA, per layer: h -> the indexer's key [H, 128]
};

struct TinyModel::Scratch {
  DeviceBuffer<float> x, h, q, k, v, attn, up, logits;
  DeviceBuffer<uint8_t> q_c, k_c, v_c, attn_c;  // q, k, v, attn in a 16-bit cache's type
  // MLA: c_kv [n, L], k_rope [n, R], q_rope [n, Hq, R]; absorbed: q_abs [n, Hq, L + R] and
  // the latent output o_lat [n, Hq, L]; decompressed (dense): k_full, v_full, q_full and
  // attn_full [n, Hq, D + R]. The _c buffers: in the cache's type.
  DeviceBuffer<float> ckv, krope, qrope, qabs, olat, kfull, vfull, qfull, attnfull;
  DeviceBuffer<float> ik;  // DSA: the indexer keys [n, 128]
  DeviceBuffer<uint8_t> ckv_c, krope_c, qabs_c, olat_c;
  DeviceBuffer<int> tokens, positions, decode_table, decode_lens, prefill_table, prefill_lens, qsl;
  DeviceBuffer<int64_t> slots;
  std::vector<DeviceBuffer<int64_t>> group_slots;  // chapter 12: each layer group's slot_mapping
  DeviceBuffer<int> dense_lens;                    // the dense path's lengths (windowed layers)
  DeviceBuffer<float> sinks;

  // Room for the activations of n token rows (both forward paths need the same).
  void reserve(int n, const ModelConfig& c) {
    const size_t rows = size_t(n), H = size_t(c.hidden()), D = size_t(c.head_size);
    ensure(x, rows * H);
    ensure(h, rows * H);
    ensure(q, rows * c.num_q_heads * D);
    ensure(k, rows * c.num_kv_heads * D);
    ensure(v, rows * c.num_kv_heads * D);
    ensure(attn, rows * c.num_q_heads * D);
    ensure(up, rows * c.ffn_size);
    ensure(logits, rows * c.vocab_size);
    if (c.kv_dtype != DType::fp32) {
      ensure(q_c, rows * c.num_q_heads * D * 2);
      ensure(k_c, rows * c.num_kv_heads * D * 2);
      ensure(v_c, rows * c.num_kv_heads * D * 2);
      ensure(attn_c, rows * c.num_q_heads * D * 2);
    }
    if (c.dsa) ensure(ik, rows * kIndexHeadDim);
    if (c.mla()) {
      const size_t L = size_t(c.latent_dim), R = size_t(c.rope_dim), Hq = size_t(c.num_q_heads);
      ensure(ckv, rows * L);
      ensure(krope, rows * R);
      ensure(qrope, rows * Hq * R);
      ensure(qabs, rows * Hq * (L + R));
      ensure(olat, rows * Hq * L);
      for (auto* b : {&kfull, &vfull, &qfull, &attnfull}) ensure(*b, rows * Hq * (D + R));
      ensure(ckv_c, rows * L * 2);
      ensure(krope_c, rows * R * 2);
      ensure(qabs_c, rows * Hq * (L + R) * 2);
      ensure(olat_c, rows * Hq * L * 2);
    }
  }

  // A buffer as the cache's type C: the fp32 buffer itself, or its 16-bit copy.
  template <typename C>
  static C* as(DeviceBuffer<float>& f32, DeviceBuffer<uint8_t>& c16) {
    if constexpr (std::is_same_v<C, float>) return f32.get();
    else return reinterpret_cast<C*>(c16.get());
  }

  // One layer's attention on a cache of type C, for n rows: q, k and v rounded to C (if C
  // is not float), the rows' K/V written to their slots (chapter 2), attend(out, q) into
  // attn, and attn back to fp32. Write first, then read: a new token attends to itself.
  template <typename C, typename Attend>
  void cache_attention(int n, const ModelConfig& c, const ch02::PoolShape& shape, ch02::KVPool<C>& pool,
                       const int64_t* slot_mapping, cudaStream_t stream, Attend&& attend) {
    const int64_t q_elems = int64_t(n) * c.num_q_heads * c.head_size;
    const int64_t kv_elems = int64_t(n) * c.num_kv_heads * c.head_size;
    C *cq = as<C>(q, q_c), *ck = as<C>(k, k_c), *cv = as<C>(v, v_c), *cattn = as<C>(attn, attn_c);
    if constexpr (!std::is_same_v<C, float>) {
      convert(cq, q.get(), q_elems, stream);
      convert(ck, k.get(), kv_elems, stream);
      convert(cv, v.get(), kv_elems, stream);
    }
    ch02::reshape_and_cache<C>(shape, ck, cv, n, pool.k.get(), pool.v.get(), slot_mapping, stream);
    attend(cattn, static_cast<const C*>(cq));
    if constexpr (!std::is_same_v<C, float>) convert(attn.get(), cattn, q_elems, stream);
  }
};

namespace {
// What a DSA model must be: a 128-wide index key, no layer groups.
void check_dsa(const ModelConfig& c) {
  if (!c.dsa) return;
  PA_REQUIRE(c.index_head_dim == kIndexHeadDim, "a DSA model's index_head_dim must be " << kIndexHeadDim
                                                    << " (the indexer pool's e4m3 key rows), got " << c.index_head_dim);
  PA_REQUIRE(!c.hybrid(), "a DSA model has no windows or sinks (its layers are one group under one block table)");
}
}  // namespace

int64_t ModelConfig::kv_bytes_per_token() const {
  const int64_t index = dsa ? int64_t(num_layers) * kIndexBytesPerToken : 0;
  if (mla()) return int64_t(num_layers) * (latent_dim + rope_dim) * elem_bytes() + index;
  return 2ll * num_layers * num_kv_heads * head_size * elem_bytes() + index;
}

TinyModel::TinyModel(const ModelConfig& c) : cfg_(c), w_(new Weights), s_(new Scratch) {
  PA_REQUIRE(c.vocab_size > 0 && c.num_layers > 0 && c.ffn_size > 0,
             "vocab_size, num_layers and ffn_size must be positive");
  PA_REQUIRE(c.num_kv_heads > 0 && c.num_q_heads % c.num_kv_heads == 0,
             "num_q_heads (" << c.num_q_heads << ") must be a multiple of num_kv_heads ("
                             << c.num_kv_heads << ")");
  PA_REQUIRE(!c.mla() || (c.latent_dim > 0 && c.rope_dim > 0 && c.rope_dim % 2 == 0),
             "an MLA model needs a positive latent_dim and a positive, even rope_dim (got " << c.latent_dim
                                                                                          << " and " << c.rope_dim << ")");
  PA_REQUIRE(c.windows.empty() || int(c.windows.size()) == c.num_layers,
             "windows: one per layer: expected " << c.num_layers << " (0: full attention), got " << c.windows.size());
  for (size_t l = 0; l < c.windows.size(); ++l)
    PA_REQUIRE(c.windows[l] >= 0, "windows: layer " << l << " has window " << c.windows[l]
                                                    << " (a sliding window must be positive; 0 is full attention)");
  PA_REQUIRE(c.sinks.empty() || int(c.sinks.size()) == c.num_q_heads,
             "sinks: one per query head: expected " << c.num_q_heads << " logits (Hq), got " << c.sinks.size());
  for (float x : c.sinks) PA_REQUIRE(std::isfinite(x), "sinks: " << x << " is not a finite logit");
  PA_REQUIRE(!c.hybrid() || !c.mla(), "windows and sinks are for GQA models; chapter 11's MLA layers are all full");
  check_dsa(c);
  if (!c.sinks.empty()) s_->sinks = DeviceBuffer<float>(c.sinks);
  const int H = c.hidden(), D = c.head_size, F = c.ffn_size;
  SplitMix64 rng(c.seed);
  auto up = [](const std::vector<float>& v) { return DeviceBuffer<float>(v); };
  const float a_h = std::sqrt(3.f / float(H)), a_f = std::sqrt(3.f / float(F));
  // Sharp attention (q and k twice the usual scale: scores of std ~4) with a strong output
  // projection, so that every token depends on which K/V it reads: a test that feeds the
  // wrong blocks or positions changes the tokens, not just the last digits of a logit.
  w_->embed = up(draw(rng, size_t(c.vocab_size) * H, 1.f));
  for (int l = 0; l < c.num_layers; ++l) {
    w_->attn_norm.push_back(up(draw(rng, size_t(H), 0.1f, 1.f)));
    if (c.mla()) {
      // The same sharpness as GQA's: q and each key part of std ~2, scores of std ~4.
      const size_t L = size_t(c.latent_dim), R = size_t(c.rope_dim), Hq = size_t(c.num_q_heads);
      const float a_l = std::sqrt(3.f / float(L));
      w_->wq.push_back(up(draw(rng, size_t(H) * Hq * D, 2.f * a_h)));
      w_->wq_rope.push_back(up(draw(rng, size_t(H) * Hq * R, 2.f * a_h)));
      w_->w_dkv.push_back(up(draw(rng, size_t(H) * L, a_h)));
      w_->w_kr.push_back(up(draw(rng, size_t(H) * R, 2.f * a_h)));
      const std::vector<float> uk = draw(rng, Hq * L * D, 2.f * a_l);
      std::vector<float> uk_t(uk.size());
      for (size_t h = 0; h < Hq; ++h)
        for (size_t i = 0; i < L; ++i)
          for (size_t d = 0; d < size_t(D); ++d) uk_t[(h * D + d) * L + i] = uk[(h * L + i) * D + d];
      w_->w_uk.push_back(up(uk));
      w_->w_uk_t.push_back(up(uk_t));
      w_->w_uv.push_back(up(draw(rng, Hq * L * D, a_l)));
      w_->wo.push_back(up(draw(rng, size_t(c.num_q_heads) * D * H, 2.f * a_h)));
      w_->mlp_norm.push_back(up(draw(rng, size_t(H), 0.1f, 1.f)));
      w_->w_up.push_back(up(draw(rng, size_t(H) * F, a_h)));
      w_->w_down.push_back(up(draw(rng, size_t(F) * H, a_f)));
      continue;
    }
    w_->wq.push_back(up(draw(rng, size_t(H) * c.num_q_heads * D, 2.f * a_h)));
    w_->wk.push_back(up(draw(rng, size_t(H) * c.num_kv_heads * D, 2.f * a_h)));
    w_->wv.push_back(up(draw(rng, size_t(H) * c.num_kv_heads * D, a_h)));
    w_->wo.push_back(up(draw(rng, size_t(c.num_q_heads) * D * H, 2.f * a_h)));
    w_->mlp_norm.push_back(up(draw(rng, size_t(H), 0.1f, 1.f)));
    w_->w_up.push_back(up(draw(rng, size_t(H) * F, a_h)));
    w_->w_down.push_back(up(draw(rng, size_t(F) * H, a_f)));
  }
  w_->final_norm = up(draw(rng, size_t(H), 0.1f, 1.f));
  w_->lm_head = up(draw(rng, size_t(H) * c.vocab_size, 2.f * a_h));
  // Drawn last: a model without DSA keeps every weight it had.
  if (c.dsa)
    for (int l = 0; l < c.num_layers; ++l) w_->w_ik.push_back(up(draw(rng, size_t(H) * kIndexHeadDim, a_h)));
}

TinyModel::~TinyModel() = default;

bool ModelConfig::hybrid() const {
  return !sinks.empty() || std::any_of(windows.begin(), windows.end(), [](int w) { return w > 0; });
}

int ModelConfig::layers_per_group() const {
  std::map<int, int> count;  // window -> layers
  for (int l = 0; l < num_layers; ++l) ++count[window_of(l)];
  int k = 0;
  for (const auto& [w, c] : count) k = std::gcd(k, c);
  return k;
}

namespace {
// Each layer's (group, slot): a layer joins the newest group of its window while it has
// fewer than k layers, else opens the next group.
std::vector<std::pair<int, int>> layer_places(const ModelConfig& c, std::vector<int>* windows) {
  const int k = c.layers_per_group();
  std::map<int, std::pair<int, int>> open;  // window -> (group, layers in it)
  std::vector<std::pair<int, int>> out;
  int groups = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    const int w = c.window_of(l);
    auto it = open.find(w);
    if (it == open.end() || it->second.second == k) {
      it = open.insert_or_assign(w, std::make_pair(groups++, 0)).first;
      if (windows) windows->push_back(w);
    }
    out.push_back({it->second.first, it->second.second++});
  }
  return out;
}
}  // namespace

std::vector<int> ModelConfig::group_windows() const {
  std::vector<int> out;
  layer_places(*this, &out);
  return out;
}
int ModelConfig::layer_group(int layer) const { return layer_places(*this, nullptr)[size_t(layer)].first; }
int ModelConfig::layer_slot(int layer) const { return layer_places(*this, nullptr)[size_t(layer)].second; }

std::vector<int> ModelConfig::layer_pattern(int num_layers, int num_sliding, int num_full, int window) {
  PA_REQUIRE(num_layers > 0 && num_sliding >= 0 && num_full >= 0 && num_sliding + num_full > 0 && window > 0,
             "layer_pattern: bad arguments");
  std::vector<int> out;
  for (int l = 0; l < num_layers; ++l) out.push_back(l % (num_sliding + num_full) < num_sliding ? window : 0);
  return out;
}

float ModelConfig::attention_scale() const {
  return 1.f / std::sqrt(float(mla() ? head_size + rope_dim : head_size));
}

PagedKV::PagedKV(const ModelConfig& c, int num_blocks, int block_size)
    : shape{num_blocks, block_size, c.num_kv_heads, c.head_size}, dtype(c.kv_dtype), latent(c.mla()) {
  check_dsa(c);
  if (c.dsa) {
    PA_REQUIRE(num_blocks > 0, "PagedKV: num_blocks must be positive, got " << num_blocks);
    PA_REQUIRE(block_size > 0 && block_size % 4 == 0,
               "PagedKV: the indexer pool (DSA) needs a block size that is a multiple of 4 (so every row stays "
               "16-byte aligned), got "
                   << block_size);
    for (int l = 0; l < c.num_layers; ++l) {
      indexer_pools.emplace_back(size_t(num_blocks) * size_t(indexer_block_bytes(block_size)));
      PA_CUDA_CHECK(cudaMemset(indexer_pools.back().get(), 0xFF, indexer_pools.back().bytes()));  // NaN
    }
  }
  if (latent) {
    PA_REQUIRE(num_blocks > 0 && block_size > 0, "PagedKV: num_blocks and block_size must be positive");
    shape = {num_blocks, block_size, 1, c.latent_dim + c.rope_dim};
    for (int l = 0; l < c.num_layers; ++l) {
      latent_pools.emplace_back(size_t(num_blocks) * size_t(block_bytes()));
      PA_CUDA_CHECK(cudaMemset(latent_pools.back().get(), 0xFF, latent_pools.back().bytes()));  // NaN
    }
    return;
  }
  with_kv_type(dtype, [&](auto t) {
    for (int l = 0; l < c.layers_per_group(); ++l) layers<decltype(t)>().emplace_back(shape);
  });
}
std::vector<void*> PagedKV::k_pools() {
  std::vector<void*> out;
  for (auto& p : latent_pools) out.push_back(p.get());
  with_kv_type(dtype, [&](auto t) {
    for (auto& p : layers<decltype(t)>()) out.push_back(p.k.get());
  });
  return out;
}
std::vector<void*> PagedKV::index_pools() {
  std::vector<void*> out;
  for (auto& p : indexer_pools) out.push_back(p.get());
  return out;
}
std::vector<void*> PagedKV::v_pools() {
  std::vector<void*> out;
  with_kv_type(dtype, [&](auto t) {
    for (auto& p : layers<decltype(t)>()) out.push_back(p.v.get());
  });
  return out;
}

// One layer's attention input: h = rmsnorm(x); q, k, v = h W; rotary positions.
void TinyModel::qkv(Scratch& s, int l, int n, const int* positions, cudaStream_t stream) {
  const int H = cfg_.hidden(), D = cfg_.head_size, Hq = cfg_.num_q_heads, Hkv = cfg_.num_kv_heads;
  launch(rmsnorm_kernel, dim3(n), dim3(kThreads), 0, stream, s.h.get(), s.x.get(),
         w_->attn_norm[size_t(l)].get(), H);
  matmul(s.q.get(), s.h.get(), w_->wq[size_t(l)].get(), n, H, Hq * D, false, stream);
  matmul(s.k.get(), s.h.get(), w_->wk[size_t(l)].get(), n, H, Hkv * D, false, stream);
  matmul(s.v.get(), s.h.get(), w_->wv[size_t(l)].get(), n, H, Hkv * D, false, stream);
  launch(rope_kernel, dim3(n), dim3(kThreads), 0, stream, s.q.get(), positions, Hq, D);
  launch(rope_kernel, dim3(n), dim3(kThreads), 0, stream, s.k.get(), positions, Hkv, D);
}

// MLA's attention input: h = rmsnorm(x); the latent c_kv = h W_DKV and the RoPE key
// k_rope = h W_KR (one 64-wide head, rotated), q_nope = h W_Q into s.q and q_rope (rotated).
void TinyModel::mla_qkv(Scratch& s, int l, int n, const int* positions, cudaStream_t stream) {
  const int H = cfg_.hidden(), D = cfg_.head_size, Hq = cfg_.num_q_heads, L = cfg_.latent_dim, R = cfg_.rope_dim;
  launch(rmsnorm_kernel, dim3(n), dim3(kThreads), 0, stream, s.h.get(), s.x.get(),
         w_->attn_norm[size_t(l)].get(), H);
  matmul(s.ckv.get(), s.h.get(), w_->w_dkv[size_t(l)].get(), n, H, L, false, stream);
  matmul(s.krope.get(), s.h.get(), w_->w_kr[size_t(l)].get(), n, H, R, false, stream);
  matmul(s.q.get(), s.h.get(), w_->wq[size_t(l)].get(), n, H, Hq * D, false, stream);
  matmul(s.qrope.get(), s.h.get(), w_->wq_rope[size_t(l)].get(), n, H, Hq * R, false, stream);
  launch(rope_kernel, dim3(n), dim3(kThreads), 0, stream, s.krope.get(), positions, 1, R);
  launch(rope_kernel, dim3(n), dim3(kThreads), 0, stream, s.qrope.get(), positions, Hq, R);
}

// MLA the naive way (the dense reference): every head's K = [c_kv W_UK[h] | k_rope] and
// V = [c_kv W_UV[h] | 0] and its query [q_nope | q_rope], all D + R wide, in s.kfull,
// s.vfull and s.qfull: plain multi-head attention of Hq heads.
void TinyModel::mla_decompress(Scratch& s, int l, int n, cudaStream_t stream) {
  const int D = cfg_.head_size, Hq = cfg_.num_q_heads, L = cfg_.latent_dim, R = cfg_.rope_dim, W = D + R;
  for (int h = 0; h < Hq; ++h) {
    const int64_t w = int64_t(h) * L * D;
    matmul(s.kfull.get() + h * W, s.ckv.get(), w_->w_uk[size_t(l)].get() + w, n, L, D, false, stream, L,
           int64_t(Hq) * W);
    matmul(s.vfull.get() + h * W, s.ckv.get(), w_->w_uv[size_t(l)].get() + w, n, L, D, false, stream, L,
           int64_t(Hq) * W);
    copy_cols(s.kfull.get() + h * W + D, int64_t(Hq) * W, s.krope.get(), R, n, R, stream);
  }
  copy_cols(s.vfull.get() + D, W, nullptr, 0, n * Hq, R, stream);
  copy_cols(s.qfull.get(), W, s.q.get(), D, n * Hq, D, stream);
  copy_cols(s.qfull.get() + D, W, s.qrope.get(), R, n * Hq, R, stream);
}

// MLA's output: attn[:, h] = o_lat[:, h] W_UV[h] (the latent output back to head space).
void TinyModel::mla_out(Scratch& s, int l, int n, cudaStream_t stream) {
  const int D = cfg_.head_size, Hq = cfg_.num_q_heads, L = cfg_.latent_dim;
  for (int h = 0; h < Hq; ++h)
    matmul(s.attn.get() + h * D, s.olat.get() + int64_t(h) * L, w_->w_uv[size_t(l)].get() + int64_t(h) * L * D,
           n, L, D, false, stream, int64_t(Hq) * L, int64_t(Hq) * D);
}

// The rest of layer l: x += attn Wo, then the MLP block.
void TinyModel::out_and_mlp(Scratch& s, int l, int n, cudaStream_t stream) {
  const int H = cfg_.hidden(), F = cfg_.ffn_size;
  matmul(s.x.get(), s.attn.get(), w_->wo[size_t(l)].get(), n, cfg_.num_q_heads * cfg_.head_size, H, true, stream);
  launch(rmsnorm_kernel, dim3(n), dim3(kThreads), 0, stream, s.h.get(), s.x.get(),
         w_->mlp_norm[size_t(l)].get(), H);
  matmul(s.up.get(), s.h.get(), w_->w_up[size_t(l)].get(), n, H, F, false, stream);
  const int64_t count = int64_t(n) * F;
  launch(silu_kernel, dim3(unsigned((count + 255) / 256)), dim3(256), 0, stream, s.up.get(), count);
  matmul(s.x.get(), s.up.get(), w_->w_down[size_t(l)].get(), n, F, H, true, stream);
}

// Embedding, every layer (attend(l) fills s.attn from s.q, s.k, s.v), the final norm and
// the logits of every row into s.logits: the whole forward pass on the device.
void TinyModel::run(Scratch& s, int n, const int* tokens, const int* positions, cudaStream_t stream,
                    const std::function<void(int)>& attend) {
  const int H = cfg_.hidden();
  launch(embed_kernel, dim3(unsigned(n)), dim3(kThreads), 0, stream, s.x.get(), w_->embed.get(), tokens, H);
  for (int l = 0; l < cfg_.num_layers; ++l) {
    if (cfg_.mla()) mla_qkv(s, l, n, positions, stream);
    else qkv(s, l, n, positions, stream);
    attend(l);
    out_and_mlp(s, l, n, stream);
  }
  launch(rmsnorm_kernel, dim3(n), dim3(kThreads), 0, stream, s.h.get(), s.x.get(), w_->final_norm.get(), H);
  matmul(s.logits.get(), s.h.get(), w_->lm_head.get(), n, H, cfg_.vocab_size, false, stream);
}

// The logits of `rows`, copied to the host.
std::vector<float> TinyModel::logits_of(Scratch& s, int n, const std::vector<int>& rows, cudaStream_t stream) {
  const int V = cfg_.vocab_size;
  std::vector<float> all(size_t(n) * V), out;
  PA_CUDA_CHECK(cudaMemcpyAsync(all.data(), s.logits.get(), all.size() * sizeof(float),
                                cudaMemcpyDeviceToHost, stream));
  PA_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (int r : rows) out.insert(out.end(), all.begin() + int64_t(r) * V, all.begin() + int64_t(r + 1) * V);
  return out;
}

// ---- StepAttention: the one-group calls and what a K/V-only or latent-only one refuses ----

void StepAttention::plan(const ch03::BatchMetadata& batch, const ch02::PoolShape& pool, int num_q_heads,
                         DType dtype) {
  StepCache cache;
  cache.pool = pool;
  cache.num_q_heads = num_q_heads;
  cache.dtype = dtype;
  plan(std::vector<ch03::BatchMetadata>{batch}, cache);
}
void StepAttention::run(int, void*, const void*, const void*, const void*, float, cudaStream_t) {
  throw Error("this step attention reads a latent cache (MLA), not K/V pools");
}
void StepAttention::write_latent(int, void*, const void*, const void*, cudaStream_t) {
  throw Error("this step attention reads K/V pools, not a latent cache (MLA)");
}
void StepAttention::run_latent(int, void*, const void*, const void*, float, cudaStream_t) {
  throw Error("this step attention reads K/V pools, not a latent cache (MLA)");
}

int StepInput::num_decode() const {
  int d = 0;
  while (d < batch.num_seqs && batch.query_start_loc[size_t(d) + 1] - batch.query_start_loc[size_t(d)] == 1) ++d;
  return d;
}

// What every paged step must hold before anything reaches the device.
void TinyModel::check_step(const StepInput& in, const PagedKV& kv, const char* who) const {
  const int n = int(in.tokens.size());
  const ch03::BatchMetadata& md = in.batch;
  PA_REQUIRE(kv.dtype == cfg_.kv_dtype, who << ": a " << dtype_name(kv.dtype) << " cache for a model of "
                                            << dtype_name(cfg_.kv_dtype) << " KV");
  PA_REQUIRE(kv.latent == cfg_.mla(), who << ": a " << (kv.latent ? "latent (MLA)" : "K/V") << " cache for "
                                          << (cfg_.mla() ? "an MLA" : "a GQA") << " model");
  PA_REQUIRE(kv.indexer_pools.size() == (cfg_.dsa ? size_t(cfg_.num_layers) : 0),
             who << ": " << (cfg_.dsa ? "a DSA model needs an indexer pool per layer; the cache has "
                                      : "a model without DSA, a cache with ")
                 << kv.indexer_pools.size() << " indexer pools");
  PA_REQUIRE(n > 0, who << ": a step needs at least one token");
  PA_REQUIRE(in.positions.size() == size_t(n) && md.slot_mapping.size() == size_t(n),
             who << ": tokens, positions and slot_mapping differ in length");
  PA_REQUIRE(md.num_seqs > 0 && md.query_start_loc.size() == size_t(md.num_seqs) + 1 &&
                 md.query_start_loc.back() == n,
             who << ": query_start_loc must have num_seqs + 1 entries and end at the " << n << " tokens");
  for (int t : in.tokens)
    PA_REQUIRE(t >= 0 && t < cfg_.vocab_size, "token " << t << " is outside the vocabulary of " << cfg_.vocab_size);
  for (int r : in.logit_rows) PA_REQUIRE(r >= 0 && r < n, "logit row " << r << " is not a row of the step");
  for (int64_t slot : md.slot_mapping)
    PA_REQUIRE(slot >= 0 && slot < int64_t(kv.shape.num_blocks) * kv.shape.block_size,
               "slot " << slot << " is outside the pool");
}

void reshape_and_cache_indexer(const float* k, int num_tokens, uint8_t* indexer_pool, int block_size,
                               const int64_t* slot_mapping, cudaStream_t stream) {
  PA_REQUIRE(num_tokens >= 0 && block_size > 0 && block_size % 4 == 0,
             "reshape_and_cache_indexer: " << num_tokens << " tokens, block_size " << block_size
                                           << " (a positive multiple of 4)");
  if (num_tokens > 0)
    launch(indexer_write_kernel, dim3(unsigned(num_tokens)), dim3(kIndexHeadDim), 0, stream, k, indexer_pool,
           block_size, slot_mapping);
}

// DSA: the layer's indexer key of each new row, h W_IK rotated by its position (one head of
// 128), quantized into the layer's indexer pool. (DeepSeek-V3.2 also normalizes it and
// applies a Hadamard rotation; a tiny model leaves both out.)
void TinyModel::write_index_keys(Scratch& s, int l, int n, PagedKV& kv, const int64_t* slots, cudaStream_t stream) {
  matmul(s.ik.get(), s.h.get(), w_->w_ik[size_t(l)].get(), n, cfg_.hidden(), kIndexHeadDim, false, stream);
  launch(rope_kernel, dim3(n), dim3(kThreads), 0, stream, s.ik.get(), s.positions.get(), 1, kIndexHeadDim);
  reshape_and_cache_indexer(s.ik.get(), n, kv.indexer_pools[size_t(l)].get(), kv.shape.block_size, slots, stream);
}

std::vector<float> TinyModel::forward_paged(const StepInput& in, PagedKV& kv) {
  check_step(in, kv, "forward_paged");
  std::vector<float> logits;
  if (cfg_.mla()) {
    PA_REQUIRE(step_attention_, "forward_paged: an MLA model's paged path needs a step attention that reads the "
                                "latent cache (ch11::MlaStepAttention); none is set");
    PA_REQUIRE(kv.dtype != DType::fp32, "forward_paged: the step attention needs a 16-bit cache (kv_dtype fp16 or bf16)");
    with_kv_type(kv.dtype, [&](auto t) {
      if constexpr (!std::is_same_v<decltype(t), float>) logits = forward_latent_as<decltype(t)>(in, kv);
    });
    return logits;
  }
  PA_REQUIRE(!cfg_.hybrid() || step_attention_,
             "forward_paged: a hybrid model's paged path (windows or sinks) needs a step attention that takes "
             "them (ch12::HybridStepAttention); none is set");
  with_kv_type(kv.dtype, [&](auto t) { logits = forward_paged_as<decltype(t)>(in, kv); });
  return logits;
}

// ANCHOR: forward_latent
// The paged path of an MLA model, absorbed: per layer, c_kv and k_rope are rounded to the
// cache's type C and written to the layer's latent pool, the query becomes q_abs =
// [q_nope W_UK[h]^T | q_rope] (L + R wide), the step attention returns the latent output
// o_lat [n, Hq, L], and o_lat W_UV[h] is head h's attention output.
template <typename C>
std::vector<float> TinyModel::forward_latent_as(const StepInput& in, PagedKV& kv) {
  const int n = int(in.tokens.size());
  const int D = cfg_.head_size, Hq = cfg_.num_q_heads, L = cfg_.latent_dim, R = cfg_.rope_dim;
  const ch03::BatchMetadata& md = in.batch;
  Scratch& s = *s_;
  s.reserve(n, cfg_);
  s.tokens = DeviceBuffer<int>(in.tokens);
  s.positions = DeviceBuffer<int>(in.positions);
  md.validate(kv.shape.num_blocks, kv.shape.block_size);
  StepCache cache;
  cache.pool = kv.shape;
  cache.num_q_heads = Hq;
  cache.dtype = kv.dtype;
  cache.latent = true;
  cache.latent_dim = L;
  cache.rope_dim = R;
  step_attention_->plan(std::vector<ch03::BatchMetadata>{md}, cache);
  if (cfg_.dsa) s.slots = DeviceBuffer<int64_t>(md.slot_mapping);
  C* ckv = reinterpret_cast<C*>(s.ckv_c.get());
  C* krope = reinterpret_cast<C*>(s.krope_c.get());
  C* qabs = reinterpret_cast<C*>(s.qabs_c.get());
  C* olat = reinterpret_cast<C*>(s.olat_c.get());
  run(s, n, s.tokens.get(), s.positions.get(), nullptr, [&](int l) {
    void* pool = kv.latent_pools[size_t(l)].get();
    if (cfg_.dsa) write_index_keys(s, l, n, kv, s.slots.get(), nullptr);
    for (int h = 0; h < Hq; ++h)  // q_nope[:, h] W_UK[h]^T: the first L columns of q_abs[:, h]
      matmul(s.qabs.get() + int64_t(h) * (L + R), s.q.get() + h * D,
             w_->w_uk_t[size_t(l)].get() + int64_t(h) * D * L, n, D, L, false, nullptr, int64_t(Hq) * D,
             int64_t(Hq) * (L + R));
    copy_cols(s.qabs.get() + L, L + R, s.qrope.get(), R, n * Hq, R, nullptr);
    convert(ckv, s.ckv.get(), int64_t(n) * L, nullptr);
    convert(krope, s.krope.get(), int64_t(n) * R, nullptr);
    convert(qabs, s.qabs.get(), int64_t(n) * Hq * (L + R), nullptr);
    step_attention_->write_latent(0, pool, ckv, krope, nullptr);  // write first: a token sees itself
    step_attention_->run_latent(0, olat, qabs, pool, cfg_.attention_scale(), nullptr);
    convert(s.olat.get(), olat, int64_t(n) * Hq * L, nullptr);
    mla_out(s, l, n, nullptr);
  });
  return logits_of(s, n, in.logit_rows, nullptr);
}
// ANCHOR_END: forward_latent

// ANCHOR: plan_groups
// Chapter 12: a hybrid model's step. Each layer group's metadata (in.groups, or in.batch
// for a model of one group) is checked against the step's, its slot_mapping goes to the
// device, and the step attention plans every group with its window and the sinks.
void TinyModel::plan_groups(const StepInput& in, const PagedKV& kv) {
  const std::vector<int> windows = cfg_.group_windows();
  const int G = int(windows.size()), n = int(in.tokens.size());
  PA_REQUIRE(!in.groups.empty() || G == 1, "forward_paged: the model has " << G
                                               << " layer groups (ModelConfig::group_windows); the step gives "
                                                  "no per-group metadata (StepInput::groups)");
  const std::vector<ch03::BatchMetadata> groups = in.groups.empty() ? std::vector<ch03::BatchMetadata>{in.batch} : in.groups;
  PA_REQUIRE(int(groups.size()) == G,
             "forward_paged: the model has " << G << " layer groups, the step gives metadata for " << groups.size());
  Scratch& s = *s_;
  if (s.group_slots.size() < size_t(G)) s.group_slots.resize(size_t(G));
  for (int g = 0; g < G; ++g) {
    const ch03::BatchMetadata& b = groups[size_t(g)];
    PA_REQUIRE(b.num_seqs == in.batch.num_seqs && b.context_lens == in.batch.context_lens &&
                   b.query_start_loc == in.batch.query_start_loc && b.slot_mapping.size() == size_t(n),
               "forward_paged: layer group " << g << "'s metadata is not the step's (sequences, context_lens, "
                                                 "query_start_loc and one slot per token must match StepInput::batch)");
    b.validate(kv.shape.num_blocks, kv.shape.block_size);
    s.group_slots[size_t(g)] = DeviceBuffer<int64_t>(b.slot_mapping);
  }
  StepCache cache;
  cache.pool = kv.shape;
  cache.num_q_heads = cfg_.num_q_heads;
  cache.dtype = kv.dtype;
  cache.windows = windows;
  cache.sinks = cfg_.sinks;
  step_attention_->plan(groups, cache);
}
// ANCHOR_END: plan_groups

// ANCHOR: forward_paged
// The paged path on a cache of type C. With a 16-bit cache, q, k and v are rounded to C
// before the K/V write and the attention, and the attention's output comes back to fp32.
template <typename C>
std::vector<float> TinyModel::forward_paged_as(const StepInput& in, PagedKV& kv) {
  const int n = int(in.tokens.size());
  const int D = cfg_.head_size, Hq = cfg_.num_q_heads, Hkv = cfg_.num_kv_heads;
  const ch03::BatchMetadata& md = in.batch;
  const int M = md.max_blocks_per_seq;
  Scratch& s = *s_;
  s.reserve(n, cfg_);
  s.tokens = DeviceBuffer<int>(in.tokens);
  s.positions = DeviceBuffer<int>(in.positions);
  s.slots = DeviceBuffer<int64_t>(md.slot_mapping);
  const float scale = 1.f / std::sqrt(float(D));
  const int64_t q_row = int64_t(Hq) * D;
  // Decode rows (one new token) go to chapter 5, or to cascade attention where they share
  // a prefix; the prefill chunks to this chapter's kernel. Or the whole step to the step
  // attention, when one is set (chapter 10's varlen kernel).
  const bool grouped = cfg_.hybrid() || !in.groups.empty();  // chapter 12: a batch per layer group
  PA_REQUIRE(!grouped || step_attention_, "forward_paged: layer groups need a step attention; none is set");
  const int num_decode = step_attention_ ? 0 : in.num_decode();
  const int num_prefill = step_attention_ ? 0 : md.num_seqs - num_decode;
  const bool cascade = in.cascade && num_decode > 1;
  const PrefillShape ps{std::max(num_prefill, 1), n - num_decode, Hq, Hkv, D, kv.shape.block_size,
                        kv.shape.num_blocks, M};
  std::unique_ptr<ch04::DeviceBatch> decode;
  if (step_attention_) {
    PA_REQUIRE((!std::is_same_v<C, float>),
               "forward_paged: the step attention needs a 16-bit cache (kv_dtype fp16 or bf16)");
    md.validate(kv.shape.num_blocks, kv.shape.block_size);
    if (grouped) plan_groups(in, kv);
    else step_attention_->plan(md, kv.shape, Hq, kv.dtype);
  } else {
    std::vector<int> prefill_qsl;
    for (int b = num_decode; b <= md.num_seqs; ++b) prefill_qsl.push_back(md.query_start_loc[size_t(b)] - num_decode);
    const std::vector<int> prefill_table(md.block_table.begin() + int64_t(num_decode) * M, md.block_table.end());
    const std::vector<int> prefill_lens(md.context_lens.begin() + num_decode, md.context_lens.end());
    if (num_prefill > 0) check_metadata(ps, prefill_table, prefill_lens, prefill_qsl);
    ch03::BatchMetadata decode_md;  // the decode part goes through chapter 4's checked upload
    decode_md.num_seqs = num_decode;
    decode_md.max_blocks_per_seq = M;
    decode_md.block_table.assign(md.block_table.begin(), md.block_table.begin() + int64_t(num_decode) * M);
    decode_md.context_lens.assign(md.context_lens.begin(), md.context_lens.begin() + num_decode);
    if (num_decode > 0) decode.reset(new ch04::DeviceBatch(decode_md, kv.shape.num_blocks, kv.shape.block_size));
    if (cascade) {
      if (!cascade_plan_) cascade_plan_.reset(new CascadeDevicePlan);
      cascade_plan_->upload(plan_cascade(decode_md.block_table, decode_md.context_lens, num_decode, M,
                                         kv.shape.block_size));
    }
    if (num_prefill > 0) {
      s.prefill_table = DeviceBuffer<int>(prefill_table);
      s.prefill_lens = DeviceBuffer<int>(prefill_lens);
      s.qsl = DeviceBuffer<int>(prefill_qsl);
    }
  }
  int group = 0;  // the layer's group (chapter 12)
  auto attend = [&](ch02::KVPool<C>& pool, C* attn, const C* q) {
    if (step_attention_) return step_attention_->run(group, attn, q, pool.k.get(), pool.v.get(), scale, nullptr);
    const ch04::PagedAttentionShape ds{num_decode, Hq, Hkv, D, kv.shape.block_size, kv.shape.num_blocks, M};
    if (cascade)
      cascade_attention<C>(ds, attn, q, pool.k.get(), pool.v.get(), decode->block_table.get(),
                           decode->context_lens.get(), decode->max_context_len, *cascade_plan_, scale, ws_);
    else if (decode)
      ch05::paged_attention<C>(ds, attn, q, pool.k.get(), pool.v.get(), decode->block_table.get(),
                               decode->context_lens.get(), decode->max_context_len, scale, ws_);
    if (num_prefill > 0)
      prefill_attention<C>(ps, attn + num_decode * q_row, q + num_decode * q_row, pool.k.get(), pool.v.get(),
                           s.prefill_table.get(), s.prefill_lens.get(), s.qsl.get(), scale);
  };
  run(s, n, s.tokens.get(), s.positions.get(), nullptr, [&](int l) {
    ch02::KVPool<C>& pool = kv.layers<C>()[size_t(cfg_.layer_slot(l))];  // l, unless hybrid
    group = grouped ? cfg_.layer_group(l) : 0;
    const int64_t* slots = grouped && !in.groups.empty() ? s.group_slots[size_t(group)].get() : s.slots.get();
    if (cfg_.dsa) write_index_keys(s, l, n, kv, slots, nullptr);
    s.cache_attention<C>(n, cfg_, kv.shape, pool, slots, nullptr,
                         [&](C* attn, const C* q) { attend(pool, attn, q); });
  });
  return logits_of(s, n, in.logit_rows, nullptr);
}
// ANCHOR_END: forward_paged

// ANCHOR: decode_graph
// Fixed buffers for graph replays: a graph replays the addresses it captured.
struct TinyModel::Graphs {
  std::vector<void*> k_pools, v_pools;  // the pools the graphs write and read
  int max_batch = 0, max_blocks = 0, max_context = 0;
  Scratch s;
  DeviceBuffer<int> tokens, positions, table, lens;
  DeviceBuffer<int64_t> slots;
  ch05::Workspace ws;
  cudaStream_t stream = nullptr;
#if !defined(PA_BACKEND_CPU)
  std::map<int, cudaGraphExec_t> execs;  // by batch-size bucket
  ~Graphs() {
    for (auto& e : execs) cudaGraphExecDestroy(e.second);
    if (stream) cudaStreamDestroy(stream);
  }
#endif
};

bool TinyModel::graphs_supported() {
#if defined(PA_BACKEND_CPU)
  return false;
#else
  return true;
#endif
}

int TinyModel::graphs_captured() const {
#if defined(PA_BACKEND_CPU)
  return 0;
#else
  return graphs_ ? int(graphs_->execs.size()) : 0;
#endif
}

std::vector<float> TinyModel::forward_decode_graph(const StepInput& in, PagedKV& kv, int max_batch,
                                                   int max_blocks_per_seq, int max_context_len) {
  PA_REQUIRE(graphs_supported(), "forward_decode_graph: CUDA graphs need the cuda backend");
  PA_REQUIRE(!step_attention_, "forward_decode_graph: graphs replay chapter 5's decode, not a step attention");
  PA_REQUIRE(!cfg_.mla(), "forward_decode_graph: an MLA model runs through its step attention, not chapter 5's graphs");
  PA_REQUIRE(!cfg_.hybrid(), "forward_decode_graph: a hybrid model (windows or sinks) runs through its step attention");
  PA_REQUIRE(!cfg_.dsa, "forward_decode_graph: the graphs do not write a DSA model's indexer keys; use forward_paged");
  check_step(in, kv, "forward_decode_graph");
  const ch03::BatchMetadata& md = in.batch;
  const int B = md.num_seqs, M = max_blocks_per_seq, bs = kv.shape.block_size;
  PA_REQUIRE(in.num_decode() == B,
             "forward_decode_graph: every sequence of the step must have exactly one new token");
  PA_REQUIRE(B <= max_batch, "forward_decode_graph: " << B << " sequences, the graphs hold " << max_batch);
  PA_REQUIRE(md.max_blocks_per_seq <= M && int64_t(M) * bs >= max_context_len,
             "forward_decode_graph: the table is " << md.max_blocks_per_seq << " blocks wide, the graphs hold " << M
                                                   << " blocks (" << max_context_len << " tokens)");
  md.validate(kv.shape.num_blocks, bs);
  for (int b = 0; b < B; ++b)
    PA_REQUIRE(md.context_lens[size_t(b)] <= max_context_len,
               "forward_decode_graph: context_len " << md.context_lens[size_t(b)] << " of sequence " << b
                                                    << " is beyond max_context_len " << max_context_len);
  std::vector<float> logits;
  with_kv_type(kv.dtype, [&](auto t) {
    logits = forward_graph_as<decltype(t)>(in, kv, max_batch, M, max_context_len);
  });
  return logits;
}

template <typename C>
std::vector<float> TinyModel::forward_graph_as(const StepInput& in, PagedKV& kv, int max_batch, int M,
                                               int max_context_len) {
#if defined(PA_BACKEND_CPU)
  (void)in, (void)kv, (void)max_batch, (void)M, (void)max_context_len;
  return {};
#else
  const ch03::BatchMetadata& md = in.batch;
  const int B = md.num_seqs, bs = kv.shape.block_size;
  const int Hq = cfg_.num_q_heads, Hkv = cfg_.num_kv_heads, D = cfg_.head_size;
  if (!graphs_ || graphs_->k_pools != kv.k_pools() || graphs_->v_pools != kv.v_pools() ||
      graphs_->max_batch != max_batch || graphs_->max_blocks != M || graphs_->max_context != max_context_len) {
    graphs_.reset(new Graphs);  // new pools or sizes: the old graphs are stale
    Graphs& g = *graphs_;
    g.k_pools = kv.k_pools();
    g.v_pools = kv.v_pools();
    g.max_batch = max_batch;
    g.max_blocks = M;
    g.max_context = max_context_len;
    g.s.reserve(max_batch, cfg_);
    g.tokens = DeviceBuffer<int>(size_t(max_batch));
    g.positions = DeviceBuffer<int>(size_t(max_batch));
    g.lens = DeviceBuffer<int>(size_t(max_batch));
    g.table = DeviceBuffer<int>(size_t(max_batch) * M);
    g.slots = DeviceBuffer<int64_t>(size_t(max_batch));
    g.ws.reserve(max_batch, Hq, ch05::num_partitions(max_context_len), D);
    PA_CUDA_CHECK(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
  }
  Graphs& g = *graphs_;
  int bucket = 1;
  while (bucket < B) bucket *= 2;
  bucket = std::min(bucket, max_batch);
  // The step's metadata, padded to the bucket: a padding row reads block 0 (one token)
  // and writes nowhere (slot -1); its logits are never read.
  std::vector<int> tokens(size_t(bucket), 0), positions(size_t(bucket), 0), lens(size_t(bucket), 1);
  std::vector<int> table(size_t(bucket) * M, ch03::kPaddingBlock);
  std::vector<int64_t> slots(size_t(bucket), -1);
  for (int b = 0; b < bucket; ++b) {
    if (b >= B) {
      table[size_t(b) * M] = 0;
      continue;
    }
    tokens[size_t(b)] = in.tokens[size_t(b)];
    positions[size_t(b)] = in.positions[size_t(b)];
    lens[size_t(b)] = md.context_lens[size_t(b)];
    slots[size_t(b)] = md.slot_mapping[size_t(b)];
    std::copy(md.block_table.begin() + int64_t(b) * md.max_blocks_per_seq,
              md.block_table.begin() + int64_t(b + 1) * md.max_blocks_per_seq, table.begin() + int64_t(b) * M);
  }
  auto upload = [&](auto* dst, const auto& src) {
    PA_CUDA_CHECK(cudaMemcpyAsync(dst, src.data(), src.size() * sizeof(src[0]), cudaMemcpyHostToDevice, g.stream));
  };
  upload(g.tokens.get(), tokens);
  upload(g.positions.get(), positions);
  upload(g.lens.get(), lens);
  upload(g.table.get(), table);
  upload(g.slots.get(), slots);
  const float scale = 1.f / std::sqrt(float(D));
  const ch04::PagedAttentionShape ds{bucket, Hq, Hkv, D, bs, kv.shape.num_blocks, M};
  Scratch& s = g.s;
  auto forward = [&] {
    run(s, bucket, g.tokens.get(), g.positions.get(), g.stream, [&](int l) {
      ch02::KVPool<C>& pool = kv.layers<C>()[size_t(l)];
      s.cache_attention<C>(bucket, cfg_, kv.shape, pool, g.slots.get(), g.stream, [&](C* attn, const C* q) {
        ch05::paged_attention<C>(ds, attn, q, pool.k.get(), pool.v.get(), g.table.get(), g.lens.get(),
                                 max_context_len, scale, g.ws, g.stream);
      });
    });
  };
  auto it = g.execs.find(bucket);
  if (it == g.execs.end()) {
    forward();  // once outside the capture: loads the kernels; writes what the replay writes
    cudaGraph_t graph;
    PA_CUDA_CHECK(cudaStreamBeginCapture(g.stream, cudaStreamCaptureModeThreadLocal));
    forward();
    PA_CUDA_CHECK(cudaStreamEndCapture(g.stream, &graph));
    cudaGraphExec_t exec;
    PA_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    PA_CUDA_CHECK(cudaGraphDestroy(graph));
    it = g.execs.emplace(bucket, exec).first;
  }
  PA_CUDA_CHECK(cudaGraphLaunch(it->second, g.stream));
  return logits_of(s, bucket, in.logit_rows, g.stream);
#endif
}
// ANCHOR_END: decode_graph

std::vector<float> TinyModel::forward_dense(const std::vector<int>& tokens,
                                            const std::vector<bool>& active,
                                            std::vector<ch01::DenseKVCache<float>>& caches) {
  const int n = int(tokens.size());
  PA_REQUIRE(caches.size() == size_t(cfg_.num_layers), "forward_dense: one cache per layer");
  PA_REQUIRE(caches[0].shape().num_seqs == n, "forward_dense: one token per cache row");
  const ch01::DenseShape want = cfg_.dense_shape(n, 1);
  PA_REQUIRE(caches[0].shape().num_q_heads == want.num_q_heads && caches[0].shape().num_kv_heads == want.num_kv_heads &&
                 caches[0].shape().head_size == want.head_size,
             "forward_dense: the caches' heads are not the model's (ModelConfig::dense_shape)");
  for (int t : tokens)
    PA_REQUIRE(t >= 0 && t < cfg_.vocab_size, "token " << t << " is outside the vocabulary");
  Scratch& s = *s_;
  s.reserve(n, cfg_);
  s.tokens = DeviceBuffer<int>(tokens);
  s.positions = DeviceBuffer<int>(caches[0].lengths());  // the new token's position
  run(s, n, s.tokens.get(), s.positions.get(), nullptr, [&](int l) {
    if (cfg_.mla()) {  // decompressed: plain attention of Hq heads, D + R wide
      const int D = cfg_.head_size, W = D + cfg_.rope_dim;
      mla_decompress(s, l, n, nullptr);
      caches[size_t(l)].append(s.kfull.get(), s.vfull.get(), active);
      caches[size_t(l)].decode(s.attnfull.get(), s.qfull.get(), cfg_.attention_scale());
      copy_cols(s.attn.get(), D, s.attnfull.get(), W, n * cfg_.num_q_heads, D, nullptr);
      return;
    }
    caches[size_t(l)].append(s.k.get(), s.v.get(), active);
    if (!cfg_.hybrid()) return caches[size_t(l)].decode(s.attn.get(), s.q.get(), cfg_.attention_scale());
    // Chapter 12: the layer's window and the sinks, in the reference kernel above.
    const ch01::DenseShape& ds = caches[size_t(l)].shape();
    s.dense_lens = DeviceBuffer<int>(caches[size_t(l)].lengths());
    launch(dense_window_kernel, dim3(unsigned(n)), dim3(unsigned(cfg_.num_q_heads)), 0, nullptr, s.attn.get(),
           s.q.get(), caches[size_t(l)].k_cache(), caches[size_t(l)].v_cache(), s.dense_lens.get(), ds.max_seq_len,
           cfg_.num_q_heads, cfg_.num_kv_heads, cfg_.head_size, cfg_.window_of(l),
           cfg_.sinks.empty() ? nullptr : s.sinks.get(), cfg_.attention_scale());
  });
  std::vector<int> rows(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) rows[size_t(i)] = i;
  return logits_of(s, n, rows, nullptr);
}

int argmax(const float* logits, int n) {
  return int(std::max_element(logits, logits + n) - logits);
}

std::vector<Generation> generate_dense(TinyModel& model,
                                       const std::vector<std::vector<int>>& prompts,
                                       const std::vector<int>& max_new_tokens) {
  const ModelConfig& c = model.config();
  const int B = int(prompts.size());
  PA_REQUIRE(B > 0 && max_new_tokens.size() == prompts.size(),
             "generate_dense: one max_new_tokens per prompt");
  int longest = 1;
  for (int b = 0; b < B; ++b) {
    PA_REQUIRE(!prompts[size_t(b)].empty(), "generate_dense: prompt " << b << " is empty");
    longest = std::max(longest, int(prompts[size_t(b)].size()) + max_new_tokens[size_t(b)]);
  }
  std::vector<ch01::DenseKVCache<float>> caches;
  for (int l = 0; l < c.num_layers; ++l) caches.emplace_back(c.dense_shape(B, longest));
  std::vector<Generation> out(static_cast<size_t>(B));
  std::vector<std::vector<int>> seqs = prompts;
  for (int t = 0; t + 1 < longest; ++t) {
    // Step t feeds token t of every sequence that still has a token to feed.
    std::vector<int> tokens(size_t(B), 0);
    std::vector<bool> active(size_t(B), false);
    for (int b = 0; b < B; ++b) {
      const auto& sq = seqs[size_t(b)];
      if (t < int(sq.size()) && int(out[size_t(b)].tokens.size()) < max_new_tokens[size_t(b)]) {
        tokens[size_t(b)] = sq[size_t(t)];
        active[size_t(b)] = true;
      }
    }
    bool any = false;
    for (bool a : active) any = any || a;
    if (!any) break;
    const std::vector<float> logits = model.forward_dense(tokens, active, caches);
    for (int b = 0; b < B; ++b) {
      if (!active[size_t(b)] || t + 1 != int(seqs[size_t(b)].size())) continue;  // still in the prompt
      const float* row = logits.data() + int64_t(b) * c.vocab_size;
      const int next = argmax(row, c.vocab_size);
      out[size_t(b)].tokens.push_back(next);
      out[size_t(b)].logits.emplace_back(row, row + c.vocab_size);
      seqs[size_t(b)].push_back(next);
    }
  }
  return out;
}

}  // namespace pa::ch08
