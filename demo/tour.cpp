// The course tour (make demo): runs each finished chapter's solution on a built-in
// workload and prints what that chapter shows.   usage: tour [--chapter N]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "pa/ch01_dense.h"
#include "pa/ch02_paged.h"
#include "pa/ch03_block_table.h"
#include "pa/ch05_paged_attention_v2.h"
#include "pa/ch06_fp8.h"
#include "pa/ch07_cow.h"
#include "pa/ch08_prefill.h"
#include "pa/ch10_varlen.h"
#include "pa/dtype.h"

namespace {

void banner(int chapter, const char* title) {
  std::printf("\n== Chapter %d: %s\n", chapter, title);
}

double gib(int64_t bytes) { return double(bytes) / double(1ll << 30); }

// Chapter 1, part 1: the dense cache's memory bill for the built-in trace.
void chapter1_memory() {
  const auto trace = pa::synthetic_trace();
  const pa::KVConfig cfg;
  const int64_t budget = 16ll << 30;
  const auto rep = pa::ch01::dense_memory_report(trace, cfg, budget);
  int64_t longest = 0, tokens = 0;
  for (const auto& r : trace) {
    longest = std::max(longest, r.total());
    tokens += r.total();
  }
  std::printf("Built-in trace: %zu requests, prompt 32-1024 + output 16-512 tokens "
              "(mean %.0f, longest %lld)\n",
              trace.size(), double(tokens) / double(trace.size()), (long long)longest);
  std::printf("Model KV shape: %d layers x %d KV heads x %d dims x %d bytes, K and V = "
              "%lld KiB per token; max_seq_len %d\n\n",
              cfg.num_layers, cfg.num_kv_heads, cfg.head_size, cfg.dtype_bytes,
              (long long)(cfg.bytes_per_token() / 1024), cfg.max_seq_len);
  std::printf("| dense KV cache, whole trace           | value        |\n");
  std::printf("|---------------------------------------|--------------|\n");
  std::printf("| reserved (max_seq_len per request)    | %8.1f GiB |\n", gib(rep.reserved_bytes));
  std::printf("| used (prompt + output tokens)         | %8.1f GiB |\n", gib(rep.used_bytes));
  std::printf("| wasted                                | %10.1f %% |\n", 100 * rep.waste_fraction);
  std::printf("| sequences in a %2lld GiB budget, dense   | %12lld |\n", (long long)(budget >> 30),
              (long long)rep.dense_seqs_in_budget);
  std::printf("| sequences if only used slots counted  | %12lld |\n",
              (long long)rep.ideal_seqs_in_budget);
  std::printf("\nA dense cache sizes every slab for the longest sequence the model allows, so\n"
              "%.0f%% of what it reserves is never written. Paging (chapters 2-3) reserves\n"
              "only the blocks a sequence has filled.\n",
              100 * rep.waste_fraction);
}

// |out - reference| over every output, the reference computed in float64 on the host from
// each sequence's history of K and V rows ([t][kv_head][d], as appended).
double max_error_vs_float64(const pa::ch01::DenseShape& s, const std::vector<pa::half>& q,
                            const std::vector<std::vector<float>>& k_hist,
                            const std::vector<std::vector<float>>& v_hist,
                            const std::vector<int>& lengths, const std::vector<pa::half>& out) {
  const int group = s.num_q_heads / s.num_kv_heads, D = s.head_size;
  const size_t kv_row = size_t(s.num_kv_heads) * D, q_row = size_t(s.num_q_heads) * D;
  const double scale = 1.0 / std::sqrt(double(D));
  double max_err = 0;
  for (int b = 0; b < s.num_seqs; ++b)
    for (int h = 0; h < s.num_q_heads; ++h) {
      const int g = h / group, len = lengths[b];
      std::vector<double> score(len);
      double mx = -1e300, sum = 0;
      for (int t = 0; t < len; ++t) {
        double dot = 0;
        for (int d = 0; d < D; ++d)
          dot += double(pa::to_float(q[b * q_row + h * D + d])) * k_hist[b][t * kv_row + g * D + d];
        score[t] = dot * scale;
        mx = std::max(mx, score[t]);
      }
      for (double& x : score) sum += (x = std::exp(x - mx));
      for (int d = 0; d < D; ++d) {
        double o = 0;
        for (int t = 0; t < len; ++t) o += score[t] * v_hist[b][t * kv_row + g * D + d];
        const double want = len ? o / sum : 0.0;
        max_err = std::max(max_err, std::fabs(want - pa::to_float(out[b * q_row + h * D + d])));
      }
    }
  return max_err;
}

// Chapter 1, part 2: decode a few steps through the dense cache and check the last
// step against a float64 computation on the host.
void chapter1_decode(bool on_gpu) {
  const pa::ch01::DenseShape s = on_gpu ? pa::ch01::DenseShape{32, 1024, 32, 8, 128}
                                        : pa::ch01::DenseShape{4, 96, 8, 2, 128};
  const int prompt_max = s.max_seq_len - 8, steps = 8;
  const size_t kv_row = size_t(s.num_kv_heads) * s.head_size;
  const size_t q_row = size_t(s.num_q_heads) * s.head_size;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_int_distribution<int> len_dist(1, prompt_max);
  std::vector<int> target(s.num_seqs);
  for (int& t : target) t = len_dist(rng) + steps;

  pa::ch01::DenseKVCache<pa::half> cache(s);
  // Host copies of everything appended (as fp16 values) for the check.
  std::vector<std::vector<float>> k_hist(s.num_seqs), v_hist(s.num_seqs);
  pa::DeviceBuffer<pa::half> k_new(s.num_seqs * kv_row), v_new(s.num_seqs * kv_row);
  pa::DeviceBuffer<pa::half> q(s.num_seqs * q_row), out(s.num_seqs * q_row);
  std::vector<float> q_host;
  const auto start = std::chrono::steady_clock::now();
  int longest = 0;
  for (int t : target) longest = std::max(longest, t);
  for (int step = 0; step < longest; ++step) {
    std::vector<bool> active(s.num_seqs);
    std::vector<pa::half> k(s.num_seqs * kv_row), v(s.num_seqs * kv_row);
    for (int b = 0; b < s.num_seqs; ++b) {
      active[b] = step < target[b];
      for (size_t e = 0; e < kv_row; ++e) {
        k[b * kv_row + e] = pa::from_float<pa::half>(normal(rng));
        v[b * kv_row + e] = pa::from_float<pa::half>(normal(rng));
        if (active[b]) {
          k_hist[b].push_back(pa::to_float(k[b * kv_row + e]));
          v_hist[b].push_back(pa::to_float(v[b * kv_row + e]));
        }
      }
    }
    k_new.upload(k);
    v_new.upload(v);
    cache.append(k_new.get(), v_new.get(), active);
  }
  std::vector<pa::half> qh(s.num_seqs * q_row);
  for (auto& x : qh) x = pa::from_float<pa::half>(normal(rng));
  q.upload(qh);
  cache.decode(out.get(), q.get());
  const std::vector<pa::half> got = out.download();
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const double max_err = max_error_vs_float64(s, qh, k_hist, v_hist, cache.lengths(), got);
  std::printf("\nDecode through the dense cache (fp16, %d sequences, %d query heads over %d KV "
              "heads, head size %d):\n",
              s.num_seqs, s.num_q_heads, s.num_kv_heads, s.head_size);
  std::printf("  appended %d steps token by token, then one decode step; lengths %d..%d\n",
              longest, *std::min_element(target.begin(), target.end()), longest);
  std::printf("  max |error| vs float64 on the host: %.2e (%s); %.2f s on the %s\n", max_err,
              max_err < 5e-3 ? "ok" : "TOO LARGE", secs, on_gpu ? "GPU" : "CPU emulator");
  if (max_err >= 5e-3) std::exit(1);
}

// Chapters 2-3, part 1: the same trace, paged. Only the tail of each request's last
// block is wasted.
void chapter23_memory() {
  const auto trace = pa::synthetic_trace();
  const pa::KVConfig cfg;
  const int64_t budget = 16ll << 30;
  const auto dense = pa::ch01::dense_memory_report(trace, cfg, budget);
  std::printf("The chapter-1 trace (%zu requests, max_seq_len %d) in a %lld GiB KV budget:\n\n",
              trace.size(), cfg.max_seq_len, (long long)(budget >> 30));
  std::printf("| layout          | reserved GiB | wasted  | sequences that fit |\n");
  std::printf("|-----------------|-------------:|--------:|-------------------:|\n");
  std::printf("| dense           | %12.1f | %6.1f%% | %18lld |\n", gib(dense.reserved_bytes),
              100 * dense.waste_fraction, (long long)dense.dense_seqs_in_budget);
  for (int bs : {8, 16, 32}) {
    const auto paged = pa::ch03::paged_memory_report(trace, cfg, bs, budget);
    std::printf("| paged, block %2d | %12.1f | %6.1f%% | %18lld |\n", bs, gib(paged.reserved_bytes),
                100 * paged.waste_fraction, (long long)paged.paged_seqs_in_budget);
  }
  const auto p16 = pa::ch03::paged_memory_report(trace, cfg, 16, budget);
  std::printf("\nWith blocks of 16, %.1fx as many sequences fit as with the dense layout. A paged\n"
              "request wastes only the unused tail of its last block, about block_size / 2\n"
              "tokens against a mean of %.0f, where a dense one wastes max_seq_len minus its length.\n",
              double(p16.paged_seqs_in_budget) / double(dense.dense_seqs_in_budget),
              double(dense.used_bytes / cfg.bytes_per_token()) / double(trace.size()));
}

bool shows(int only, std::initializer_list<int> chapters) {
  if (only == 0) return true;
  for (int c : chapters)
    if (c == only) return true;
  return false;
}

// Chapters 2-6 on one small workload: three sequences through the block manager (their
// block table), then decode on paged storage: gathered to dense for chapter 1's kernel
// (chapters 2-3), read in place by v1 and v2 (chapters 4-5), from an fp8 copy (chapter 6).
void paged_decode_demo(int only) {
  const int bs = 16, Hq = 8, Hkv = 2, D = 64;
  const std::vector<int> prompts = {15, 31, 16};  // each crosses a block boundary while decoding
  const int B = int(prompts.size()), steps = 3;
  const size_t row = size_t(Hkv) * D;
  const pa::ch02::PoolShape ps{32, bs, Hkv, D};
  pa::ch02::KVPool<pa::half> pool(ps);
  pa::ch03::BlockManager manager(ps.num_blocks, bs);
  std::vector<int> ids = {100, 101, 102};
  for (int id : ids) manager.add_sequence(id);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<std::vector<float>> k_hist(B), v_hist(B);
  pa::ch03::BatchMetadata md;
  for (int step = 0; step <= steps; ++step) {
    md = pa::ch03::build_batch(manager, ids, step == 0 ? prompts : std::vector<int>(B, 1));
    md.validate(ps.num_blocks, bs);
    const int tokens = int(md.slot_mapping.size());
    std::vector<pa::half> k(tokens * row), v(tokens * row);
    int t = 0;
    for (int b = 0; b < B; ++b)
      for (int i = 0; i < (step == 0 ? prompts[b] : 1); ++i, ++t)
        for (size_t e = 0; e < row; ++e) {
          k[t * row + e] = pa::from_float<pa::half>(normal(rng));
          v[t * row + e] = pa::from_float<pa::half>(normal(rng));
          k_hist[b].push_back(pa::to_float(k[t * row + e]));
          v_hist[b].push_back(pa::to_float(v[t * row + e]));
        }
    pa::DeviceBuffer<pa::half> dk(k), dv(v);
    pa::DeviceBuffer<int64_t> slots(md.slot_mapping);
    pa::ch02::reshape_and_cache<pa::half>(ps, dk.get(), dv.get(), tokens, pool.k.get(), pool.v.get(),
                                          slots.get());
    if (step == steps && shows(only, {2, 3})) {
      std::printf("\nBlock manager, block_size %d: sequences of %d, %d and %d prompt tokens, then %d\n"
                  "decode steps. The last step's metadata (padding = %d):\n",
                  bs, prompts[0], prompts[1], prompts[2], steps, pa::ch03::kPaddingBlock);
      for (int b = 0; b < B; ++b) {
        std::printf("  sequence %d: context_len %2d, block_table [", ids[b], md.context_lens[b]);
        for (int j = 0; j < md.max_blocks_per_seq; ++j)
          std::printf("%s%2d", j ? ", " : "", md.block_table[b * md.max_blocks_per_seq + j]);
        std::printf("], new token's slot %lld\n", (long long)md.slot_mapping[b]);
      }
    }
  }
  const int M = md.max_blocks_per_seq, L = M * bs;
  const pa::ch01::DenseShape s{B, L, Hq, Hkv, D};
  pa::DeviceBuffer<int> table(std::vector<int>(md.block_table.begin(), md.block_table.end()));
  pa::DeviceBuffer<int> lens(std::vector<int>(md.context_lens.begin(), md.context_lens.end()));
  pa::DeviceBuffer<pa::half> kd(size_t(B) * L * row), vd(size_t(B) * L * row);
  pa::ch02::gather_kv<pa::half>(ps, pool.k.get(), pool.v.get(), table.get(), M, lens.get(), B, L,
                                kd.get(), vd.get());
  std::vector<pa::half> qh(size_t(B) * Hq * D);
  for (auto& x : qh) x = pa::from_float<pa::half>(normal(rng));
  pa::DeviceBuffer<pa::half> q(qh), out(qh.size());
  pa::ch01::decode_attention<pa::half>(s, out.get(), q.get(), kd.get(), vd.get(), lens.get(),
                                       1.f / std::sqrt(float(D)));
  const std::vector<int> lens_host(md.context_lens.begin(), md.context_lens.end());
  const double err = max_error_vs_float64(s, qh, k_hist, v_hist, lens_host, out.download());
  if (shows(only, {2, 3}))
    std::printf("Decode on paged storage (gather to dense, then chapter 1's kernel): max |error| vs\n"
                "float64 %.2e (%s). %d of %d blocks in use, high-water mark %d.\n",
                err, err < 5e-3 ? "ok" : "TOO LARGE", manager.allocator().num_used(), ps.num_blocks,
                manager.allocator().high_water());
  bool ok = err < 5e-3;

  const pa::ch04::PagedAttentionShape as{B, Hq, Hkv, D, bs, ps.num_blocks, M};
  const float scale = 1.f / std::sqrt(float(D));
  const int max_len = *std::max_element(lens_host.begin(), lens_host.end());
  if (shows(only, {4, 5})) {
    banner(4, "paged attention v1, and 5: v2 (partitioned)");
    pa::ch04::paged_attention_v1<pa::half>(as, out.get(), q.get(), pool.k.get(), pool.v.get(),
                                           table.get(), lens.get(), scale);
    const double e1 = max_error_vs_float64(s, qh, k_hist, v_hist, lens_host, out.download());
    pa::ch05::Workspace ws;
    pa::ch05::paged_attention_v2<pa::half>(as, out.get(), q.get(), pool.k.get(), pool.v.get(),
                                           table.get(), lens.get(), max_len, scale, ws);
    const double e2 = max_error_vs_float64(s, qh, k_hist, v_hist, lens_host, out.download());
    std::printf("The same three sequences, read in place from the pool (no gather):\n"
                "  v1: max |error| vs float64 %.2e; v2 (%d partition of %d tokens): %.2e\n",
                e1, pa::ch05::num_partitions(max_len), pa::ch05::kPartitionSize, e2);
    ok = ok && e1 < 5e-3 && e2 < 5e-3;
  }
  if (shows(only, {6})) {
    banner(6, "the FP8 (e4m3) KV cache");
    // Quantize the same K and V (one scale each) into an fp8 pool at the same slots.
    const float k_scale = 0.05f, v_scale = 0.03f;
    pa::ch06::Fp8Pool fp8(ps, k_scale, v_scale);
    for (int b = 0; b < B; ++b) {
      const int len = lens_host[b];
      std::vector<pa::half> k(len * row), v(len * row);
      std::vector<int64_t> slots(len);
      for (int t = 0; t < len; ++t) {
        slots[t] = int64_t(manager.block_list(ids[b])[t / bs]) * bs + t % bs;
        for (size_t e = 0; e < row; ++e) {
          k[t * row + e] = pa::from_float<pa::half>(k_hist[b][t * row + e]);
          v[t * row + e] = pa::from_float<pa::half>(v_hist[b][t * row + e]);
        }
      }
      pa::DeviceBuffer<pa::half> dk(k), dv(v);
      pa::DeviceBuffer<int64_t> dslots(slots);
      pa::ch06::reshape_and_cache_fp8<pa::half>(ps, dk.get(), dv.get(), len, fp8.k.get(), fp8.v.get(),
                                                dslots.get(), fp8.k_scale.get(), fp8.v_scale.get());
    }
    pa::ch06::paged_attention_v1_fp8<pa::half>(as, out.get(), q.get(), fp8.k.get(), fp8.v.get(),
                                               table.get(), lens.get(), fp8.k_scale.get(),
                                               fp8.v_scale.get(), scale);
    const double e8 = max_error_vs_float64(s, qh, k_hist, v_hist, lens_host, out.download());
    std::printf("The same sequences from an fp8 copy of the cache (k_scale %.2f, v_scale %.2f, one\n"
                "byte per element, half the bytes of fp16): max |error| vs the unquantized float64\n"
                "answer %.2e, against %.2e for the fp16 cache. e4m3 keeps 3 mantissa bits.\n",
                k_scale, v_scale, e8, err);
    ok = ok && e8 < 0.1;
  }
  for (int id : ids) manager.release(id);
  if (!ok || manager.allocator().num_free() != ps.num_blocks) std::exit(1);
}

// Chapter 7: three ways of sharing, counted with the reference-counted block manager:
// blocks in use at the peak with sharing, against every sequence holding its own copy.
struct SharingRun {
  pa::ch07::SharedBlockManager m{4096, 16};
  std::map<int, int> lens;  // live sequences -> length, for the unshared count
  int peak_unshared = 0;
  void note() {
    int blocks = 0;
    for (const auto& [id, len] : lens) blocks += (len + 15) / 16;
    peak_unshared = std::max(peak_unshared, blocks);
  }
  void add(int id) { m.add_sequence(id); lens[id] = 0; note(); }
  void fork(int parent, int child) { m.fork(parent, child); lens[child] = lens[parent]; note(); }
  void append(int id, int n) { m.append_slots(id, n); m.take_copies(); lens[id] += n; note(); }
  void release(int id) { m.release(id); lens.erase(id); }
  void report(const char* name) {
    const int shared = m.allocator().high_water();
    std::printf("| %-40s | %6d | %8d | %5.1f%% |\n", name, shared, peak_unshared,
                100.0 * (1.0 - double(shared) / double(peak_unshared)));
  }
};

void chapter7_sharing() {
  banner(7, "copy-on-write and sharing");
  std::printf("Peak KV blocks in use (block_size 16), shared vs every sequence owning a copy:\n\n");
  std::printf("| scenario                                 | shared | unshared | saved  |\n");
  std::printf("|------------------------------------------|-------:|---------:|-------:|\n");
  {  // parallel sampling: one 500-token prompt, 8 samples of 100 tokens each
    SharingRun r;
    r.add(0);
    r.append(0, 500);
    for (int c = 1; c <= 8; ++c) r.fork(0, c);
    r.release(0);
    for (int step = 0; step < 100; ++step)
      for (int c = 1; c <= 8; ++c) r.append(c, 1);
    r.report("parallel sampling: 500 + 8 x 100 tokens");
  }
  {  // beam search: 4 beams over 60 steps; every 5 steps the best 2 replace the worst 2
    SharingRun r;
    r.add(0);
    r.append(0, 300);
    for (int b = 1; b < 4; ++b) r.fork(0, b);
    int next = 4;
    std::vector<int> beams = {0, 1, 2, 3};
    for (int step = 1; step <= 60; ++step) {
      for (int b : beams) r.append(b, 1);
      if (step % 5 == 0) {
        r.release(beams[2]);
        r.release(beams[3]);
        beams[2] = next++;
        beams[3] = next++;
        r.fork(beams[0], beams[2]);
        r.fork(beams[1], beams[3]);
      }
    }
    r.report("beam search: 300-token prompt, 4 beams");
  }
  {  // prefix sharing: a 1000-token system prompt under 16 requests of 50-200 tokens
    SharingRun r;
    r.add(0);
    r.append(0, 1000);
    for (int c = 1; c <= 16; ++c) {
      r.fork(0, c);
      r.append(c, 50 + (c * 37) % 151);
    }
    r.report("prefix sharing: 1000-token system prompt");
  }
  std::printf("\nA fork copies no data; the first write into a shared, partly filled tail block\n"
              "copies that one block (copy_blocks) and writes into the copy.\n");
}

// A chapter 10 plan: its size, and (items) which thread block runs which work item.
void print_plan(const pa::ch10::Plan& plan, int group, const std::vector<int>& qsl, bool items) {
  char chunks[64];
  if (plan.chunk_tokens > 0)
    std::snprintf(chunks, sizeof chunks, "chunks of %d KV tokens", plan.chunk_tokens);
  else
    std::snprintf(chunks, sizeof chunks, "a fair share of %.0f cost units each", plan.target_cost);
  std::printf("  grid %d thread blocks, %s: %zu items, %d split tile%s, %lld partial rows\n",
              plan.grid, chunks, plan.items.size(), plan.num_counters,
              plan.num_counters == 1 ? "" : "s", (long long)plan.partial_rows);
  if (!items) return;
  std::printf("  | thread block | seq | kv head | new tokens | KV positions | split  | run by |\n");
  std::printf("  |-------------:|----:|--------:|------------|--------------|-------:|--------|\n");
  for (int c = 0; c < plan.grid; ++c)
    for (int i = plan.cta_start[c]; i < plan.cta_start[c + 1]; ++i) {
      const pa::ch10::WorkItem& w = plan.items[i];
      const int rows = pa::ch10::tile_rows(qsl[w.seq + 1] - qsl[w.seq], group, w.row0);
      char tokens[32], kv[32], split[16];
      std::snprintf(tokens, sizeof tokens, "%d..%d", w.row0 / group, (w.row0 + rows - 1) / group);
      std::snprintf(kv, sizeof kv, "%d..%d", w.kv_begin, w.kv_end - 1);
      std::snprintf(split, sizeof split, "%d of %d", w.split + 1, w.num_splits);
      std::printf("  | %12d | %3d | %7d | %-10s | %-12s | %6s | %-6s |\n", c, w.seq, w.kv_head, tokens,
                  kv, split, w.by_warp ? "a warp" : "block");
    }
  std::printf("  (a warp: a decode of at most %d tokens, run whole by one of the block's four warps)\n",
              pa::ch10::kWarpItemTokens);
}

// Chapter 10: one launch for a mixed batch. Three decodes, a speculative-decoding
// verification of 3 tokens and a prefill chunk over a cached prefix, planned on the host
// and run by the varlen kernel; checked against chapter 8's prefill kernel, which
// computes the same thing one (token, query head) per thread block. Then the planner
// alone on the book's worked example.
void chapter10_varlen(bool on_gpu) {
  banner(10, "varlen attention: one launch for the whole batch");
  const int bs = 16, Hq = 8, Hkv = 2, D = 64, G = Hq / Hkv;
  struct Seq { const char* what; int cached, fresh; };
  const std::vector<Seq> batch = {{"decode", 36, 1},
                                  {"decode", 15, 1},
                                  {"decode", 69, 1},
                                  {"speculative verification", 40, 3},
                                  {"prefill chunk over a cached prefix", 32, 24}};
  const int B = int(batch.size());
  std::vector<int> seq_lens(B), qsl(B + 1, 0);
  for (int b = 0; b < B; ++b) {
    seq_lens[b] = batch[b].cached + batch[b].fresh;
    qsl[b + 1] = qsl[b] + batch[b].fresh;
  }
  const int T = qsl[B];
  int M = 0;
  for (int len : seq_lens) M = std::max(M, (len + bs - 1) / bs);
  const pa::ch02::PoolShape ps{48, bs, Hkv, D};
  // Every block of every sequence, from a shuffled pool; the table's padding stays -1.
  std::mt19937 rng(10);
  std::vector<int> free_ids(ps.num_blocks);
  for (int i = 0; i < ps.num_blocks; ++i) free_ids[i] = i;
  std::shuffle(free_ids.begin(), free_ids.end(), rng);
  std::vector<int> table(size_t(B) * M, -1);
  std::vector<int64_t> slots;
  int next = 0;
  for (int b = 0; b < B; ++b) {
    for (int j = 0; j < (seq_lens[b] + bs - 1) / bs; ++j) table[b * M + j] = free_ids[next++];
    for (int t = 0; t < seq_lens[b]; ++t)
      slots.push_back(int64_t(table[b * M + t / bs]) * bs + t % bs);
  }
  // K and V of every token (cached prefix and this step's tokens alike: the step's were
  // written by reshape_and_cache before attention, as in chapter 8), and the new queries.
  std::normal_distribution<float> normal(0.f, 1.f);
  const size_t row = size_t(Hkv) * D;
  std::vector<pa::half> k(slots.size() * row), v(slots.size() * row), qh(size_t(T) * Hq * D);
  for (auto* x : {&k, &v, &qh})
    for (auto& e : *x) e = pa::from_float<pa::half>(normal(rng));
  pa::ch02::KVPool<pa::half> pool(ps);
  pa::DeviceBuffer<pa::half> dk(k), dv(v), q(qh), out(qh.size()), ref(qh.size());
  pa::DeviceBuffer<int64_t> dslots(slots);
  pa::ch02::reshape_and_cache<pa::half>(ps, dk.get(), dv.get(), int(slots.size()), pool.k.get(),
                                        pool.v.get(), dslots.get());
  pa::DeviceBuffer<int> dtable(table), dlens(seq_lens), dqsl(qsl);
  const float scale = 1.f / std::sqrt(float(D));

  std::printf("A batch of %d sequences, %d new tokens in all (%d query heads over %d KV heads, "
              "head size %d):\n",
              B, T, Hq, Hkv, D);
  for (int b = 0; b < B; ++b)
    std::printf("  sequence %d: %-35s %2d new token%s over %2d cached (seq_len %d)\n", b,
                batch[b].what, batch[b].fresh, batch[b].fresh == 1 ? " " : "s", batch[b].cached,
                seq_lens[b]);

  // Chapter 8's kernel: the answer to compare with.
  const pa::ch08::PrefillShape p8{B, T, Hq, Hkv, D, bs, ps.num_blocks, M};
  pa::ch08::prefill_attention<pa::half>(p8, ref.get(), q.get(), pool.k.get(), pool.v.get(),
                                        dtable.get(), dlens.get(), dqsl.get(), scale);
  const std::vector<pa::half> want = ref.download();
  auto max_diff = [&](const std::vector<pa::half>& got) {
    double m = 0;
    for (size_t i = 0; i < got.size(); ++i)
      m = std::max(m, double(std::fabs(pa::to_float(got[i]) - pa::to_float(want[i]))));
    return m;
  };

  const pa::ch10::VarlenShape vs{B, T, Hq, Hkv, D, bs, ps.num_blocks, M};
  pa::ch10::VarlenAttention attn;
  bool ok = true;
  for (int chunk : {0, 32}) {
    attn.plan(vs, pa::DType::fp16, pa::ch10::CacheType::model_dtype, seq_lens, qsl, chunk);
    attn.run<pa::half>(out.get(), q.get(), pool.k.get(), pool.v.get(), dtable.get(), dlens.get(),
                       dqsl.get(), scale);
    const double e = max_diff(out.download());
    if (chunk == 0)
      std::printf("\nThe plan for one wave of this %s (one launch per layer runs it):\n",
                  on_gpu ? "GPU" : "emulator");
    else
      std::printf("\nThe same batch with the KV cut into chunks of 32 tokens (forced), so that "
                  "some tiles\nare split and the last item of each merges the partial results:\n");
    print_plan(attn.host_plan(), G, qsl, chunk == 0);
    std::printf("  max |difference| vs chapter 8's prefill kernel: %.2e (%s)\n", e,
                e < 5e-3 ? "ok" : "TOO LARGE");
    ok = ok && e < 5e-3;
  }

  // The same kernel on chapter 6's e4m3 copy of the cache.
  const float k_scale = 0.05f, v_scale = 0.03f;
  pa::ch06::Fp8Pool fp8(ps, k_scale, v_scale);
  pa::ch06::reshape_and_cache_fp8<pa::half>(ps, dk.get(), dv.get(), int(slots.size()), fp8.k.get(),
                                            fp8.v.get(), dslots.get(), fp8.k_scale.get(),
                                            fp8.v_scale.get());
  attn.plan(vs, pa::DType::fp16, pa::ch10::CacheType::fp8_e4m3, seq_lens, qsl);
  attn.run_fp8<pa::half>(out.get(), q.get(), fp8.k.get(), fp8.v.get(), dtable.get(), dlens.get(),
                         dqsl.get(), fp8.k_scale.get(), fp8.v_scale.get(), scale);
  const double e8 = max_diff(out.download());
  std::printf("\nThe same batch on an fp8 (e4m3) copy of the cache, same kernel: max |difference|\n"
              "vs chapter 8 on the fp16 cache %.2e (e4m3 keeps 3 mantissa bits).\n",
              e8);
  ok = ok && e8 < 0.1;

  // The planner alone (a host function): the book's worked example, one long decode among
  // short ones, on this GPU's wave or (on the emulator) on an H100's: 132 SMs x
  // kH100BlocksPerSm resident thread blocks of the fp16, D = 128 kernel (measured: the
  // benchmark's plans show 264 thread blocks).
  {
    constexpr int kH100BlocksPerSm = 2;
    const int grid = on_gpu ? pa::ch10::wave_size(pa::DType::fp16,
                                                  pa::ch10::CacheType::model_dtype, 128)
                            : 132 * kH100BlocksPerSm;
    const int nseq = 64, group = 32 / 8;
    std::vector<int> lens(nseq, 1024), starts(nseq + 1);
    lens[0] = 32768;
    for (int b = 0; b <= nseq; ++b) starts[b] = b;  // one new token each
    const pa::ch10::VarlenShape big{nseq, nseq, 32, 8, 128, 16, 1 << 20, 32768 / 16};
    const pa::ch10::Plan plan = pa::ch10::make_plan(big, lens, starts, grid);
    std::vector<double> load(grid, 0.0);
    double total = 0;
    int long_items = 0, long_chunk = 0;
    for (int c = 0; c < grid; ++c)
      for (int i = plan.cta_start[c]; i < plan.cta_start[c + 1]; ++i) {
        const pa::ch10::WorkItem& w = plan.items[i];
        const double cost = pa::ch10::item_cost(w.kv_end - w.kv_begin, group, w.by_warp);
        load[c] += cost;
        total += cost;
        if (w.seq == 0) ++long_items;
        if (w.seq == 0 && w.split == 0) long_chunk = w.kv_end - w.kv_begin;
      }
    const double busiest = *std::max_element(load.begin(), load.end());
    const double unsplit = pa::ch10::item_cost(32768, group);
    char where[64] = "";
    if (!on_gpu) std::snprintf(where, sizeof where, " (an H100's: 132 x %d)", kH100BlocksPerSm);
    std::printf("\nThe planner alone: one decode at 32,768 tokens and %d at 1,024 (32/8 heads, head\n"
                "size 128, block size 16) on a wave of %d thread blocks%s:\n"
                "  %zu items: each of the %d long tiles (one per KV head) cut into chunks of %d\n"
                "  tokens, %d items in all; the short tiles whole\n"
                "  the busiest thread block's load is %.2fx the average; without splitting, one\n"
                "  thread block would carry %.1fx the average (a KV head of the long sequence)\n",
                nseq - 1, grid, where, plan.items.size(), plan.num_counters, long_chunk, long_items,
                busiest / (total / grid), unsplit / (total / grid));
  }
  if (!ok) std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  int only = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--chapter") == 0 && i + 1 < argc) only = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: tour [--chapter N]\n");
      return 2;
    }
  }
  try {
    cudaDeviceProp prop;
    PA_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const bool on_gpu = std::strcmp(PA_BACKEND_NAME, "cuda") == 0;
    if (!only) {
      std::printf("Paged attention from scratch: the tour\n");
      std::printf("Backend: %s (%s)\n", PA_BACKEND_NAME, prop.name);
    }
    if (!only || only == 1) {
      banner(1, "the dense KV cache");
      chapter1_memory();
      chapter1_decode(on_gpu);
    }
    if (shows(only, {2, 3})) {
      banner(2, "paged KV storage, and 3: block tables and context lengths");
      chapter23_memory();
    }
    if (shows(only, {2, 3, 4, 5, 6})) paged_decode_demo(only);
    if (shows(only, {7})) chapter7_sharing();
    if (!only)
      std::printf("\n== Chapters 8 and 9: the serving loop runs in make demo; the performance\n"
                  "   ladder is measured on a GPU (bench/bench_ch09, tools/gpu_check.sh).\n");
    if (shows(only, {10})) chapter10_varlen(on_gpu);
    if (!only) {
      std::printf("\nNext: make test-chapter-1 (your code; red until the TODOs are done).\n");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tour failed: %s\n", e.what());
    return 1;
  }
  return 0;
}
