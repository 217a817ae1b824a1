// GPU benchmark of chapter 10: varlen paged attention (one launch over a ragged batch of
// decodes, speculative-decoding verifications and prefill chunks), against the read
// ceiling measured in the same run. fp16 activations, block_size 16, physical blocks
// randomly permuted, pools rotated so that the working set is at least 10x the L2 cache,
// random data; every call timed on the GPU alone, queued behind a spin (median_ms_queued);
// all-decode cases also print chapter 10's time per call over 20 launches back to back.
//
// Cases (bench/bench_flashinfer.py runs FlashInfer and PyTorch on the same ones, by the
// same names; keep the two lists in step):
//   decode   the five standard shapes, group 8 (64/8) and MQA (32/1) at B 32 / L 4096,
//            D 64 and D 256 at 32/8/32/4096, three ragged batches, and the e4m3 cache on
//            the standard shapes and the ragged ones. Chapter 9's tensor_core decode
//            (decode_fp8 on e4m3) runs beside chapter 10 on each, in the same run.
//   spec     speculative-decoding verification: B 64, L 4096, 4 and 8 new tokens each.
//   prefill  chunks of 512..4096 new tokens over cached contexts of 0..32768, one sequence.
//   mixed    prefill chunks and decodes in one batch.
// Decode-like rows (decode, spec, mixed): time, bytes that must move (K and V of every
// sequence's whole context once per KV head, plus q and out) / time, % of the read ceiling.
// Prefill and mixed rows also as TFLOP/s, the causal FLOPs counted exactly: 4 * D * Hq *
// (keys each query row attends, summed over rows). plan() is timed on the host apart (it
// runs once per engine step, not once per layer).
//
// A short step (under 64 MB) also prints the streaming read kernel's time over the same
// bytes, alone in a launch: the floor a kernel that reads that little can reach.
//
// Before timing, each chapter-10 result is checked: on decode cases against chapter 9's
// output, on the others against a float reference on the host for sample rows (first,
// middle and last new token of the first, the last and the longest sequence). A mismatch
// is printed as MISMATCH and makes the exit status 1 (after the tables are written).
//   usage: bench_ch10 [--csv FILE] [--md FILE] [--only TEXT[,TEXT...]]
//          (also FILE-flops.csv beside the csv; --only runs the cases whose names contain
//          one of the texts, e.g. --only ragged,mixed)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "bench_common.h"
#include "pa/ch09_fast_decode.h"
#include "pa/ch10_varlen.h"
#include "pa/ch13_hopper.h"
#include "pa/dtype.h"
#include "pa/launch.h"

namespace {

using pa::half;
constexpr int kBlock = 16;

enum class Kind { decode, spec, prefill, mixed };

// One batch: per sequence its cache length (new tokens included) and its new tokens.
struct Case {
  std::string name;
  int hq, hkv, d;
  std::vector<int> seq_lens, q_lens;
  Kind kind;
  bool fp8 = false;

  int b() const { return int(seq_lens.size()); }
  int num_tokens() const {
    int n = 0;
    for (int x : q_lens) n += x;
    return n;
  }
  std::vector<int> qsl() const {
    std::vector<int> out{0};
    for (int x : q_lens) out.push_back(out.back() + x);
    return out;
  }
  long long cached_tokens() const {
    long long n = 0;
    for (int x : seq_lens) n += x;
    return n;
  }
  // K and V of every context once per KV head (2 bytes an element, 1 for e4m3), q and out.
  double bytes() const {
    return (fp8 ? 1.0 : 2.0) * 2.0 * double(cached_tokens()) * hkv * d +
           2.0 * 2.0 * double(num_tokens()) * hq * d;
  }
  // New token i of sequence b (n_b new) attends seq_len_b - n_b + i + 1 keys; each key costs
  // 2 D FLOPs for q.k and 2 D for p.v, per query head.
  double flops() const {
    double keys = 0;
    for (int b = 0; b < this->b(); ++b) {
      const double n = q_lens[b], l = seq_lens[b];
      keys += n * (l - n) + n * (n + 1) / 2;
    }
    return 4.0 * d * hq * keys;
  }
  bool all_decode() const {
    for (int x : q_lens)
      if (x != 1) return false;
    return true;
  }
};

// bench_flashinfer.py's hash32 (the fill kernel's mix): both make the same lengths.
uint32_t hash32(uint32_t i) {
  uint32_t h = (i + 1) * 0x9E3779B1u;
  h ^= h >> 15;
  h *= 0x2C1B3C6Du;
  h ^= h >> 12;
  h *= 0x297A2D39u;
  h ^= h >> 15;
  return h;
}

// n lengths log-uniform in [lo, hi]: lo * (hi / lo)^u, u = hash32(i) / 2^32.
std::vector<int> log_uniform_lengths(int n, int lo, int hi) {
  std::vector<int> out;
  for (int i = 0; i < n; ++i) {
    const double u = hash32(uint32_t(i)) / 4294967296.0;
    out.push_back(std::min(hi, std::max(lo, int(lo * std::pow(double(hi) / lo, u)))));
  }
  return out;
}

// n lengths evenly from lo to hi, integer steps.
std::vector<int> spread(int n, int lo, int hi) {
  std::vector<int> out;
  for (int j = 0; j < n; ++j) out.push_back(lo + (hi - lo) * j / std::max(1, n - 1));
  return out;
}

std::vector<int> repeat(int n, int x) { return std::vector<int>(size_t(n), x); }
std::vector<int> cat(std::vector<int> a, const std::vector<int>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Case uniform(int hq, int hkv, int b, int l, int d = 128, int n = 1,
             const std::string& suffix = "") {
  return Case{std::to_string(hq) + "/" + std::to_string(hkv) + "/" + std::to_string(b) + "/" +
                  std::to_string(l) + suffix,
              hq,
              hkv,
              d,
              repeat(b, l),
              repeat(b, n),
              n == 1 ? Kind::decode : Kind::spec};
}

std::vector<Case> ragged_cases() {
  return {
      Case{"32/8 ragged 1x32768+63x256", 32, 8, 128, cat({32768}, repeat(63, 256)), repeat(64, 1),
           Kind::decode},
      Case{"32/8 ragged 128 log-uniform 64..8192", 32, 8, 128, log_uniform_lengths(128, 64, 8192),
           repeat(128, 1), Kind::decode},
      Case{"32/8 ragged 16x16384+16x128", 32, 8, 128, cat(repeat(16, 16384), repeat(16, 128)),
           repeat(32, 1), Kind::decode},
  };
}

// MQA (32 query heads on one KV head), ragged: the shape of MLA decode, narrower (issue 28
// asks it to be at least FlashInfer's best decode wrapper).
std::vector<Case> mqa_ragged_cases() {
  return {
      Case{"32/1 ragged 1x32768+63x256", 32, 1, 128, cat({32768}, repeat(63, 256)), repeat(64, 1),
           Kind::decode},
      Case{"32/1 ragged 128 log-uniform 64..8192", 32, 1, 128, log_uniform_lengths(128, 64, 8192),
           repeat(128, 1), Kind::decode},
  };
}

Case with_fp8(Case c) {
  c.name += " e4m3";
  c.fp8 = true;
  return c;
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  std::vector<Case> standard;
  for (const pa::bench::Shape& sh : pa::bench::standard_shapes())
    standard.push_back(uniform(sh.hq, sh.hkv, sh.b, sh.l));
  cases = standard;
  cases.push_back(uniform(64, 8, 32, 4096));
  cases.push_back(uniform(32, 1, 32, 4096));
  cases.push_back(uniform(32, 8, 32, 4096, 64, 1, " D64"));
  cases.push_back(uniform(32, 8, 32, 4096, 256, 1, " D256"));
  for (const Case& c : ragged_cases()) cases.push_back(c);
  for (const Case& c : mqa_ragged_cases()) cases.push_back(c);
  for (const Case& c : standard) cases.push_back(with_fp8(c));
  for (const Case& c : ragged_cases()) cases.push_back(with_fp8(c));
  for (int n : {4, 8}) cases.push_back(uniform(32, 8, 64, 4096, 128, n, " n=" + std::to_string(n)));
  for (int p : {0, 4096, 16384, 32768})
    for (int c : {512, 1024, 2048, 4096})
      cases.push_back(Case{"32/8 chunk " + std::to_string(c) + " ctx " + std::to_string(p),
                           32,
                           8,
                           128,
                           {p + c},
                           {c},
                           Kind::prefill});
  cases.push_back(Case{"32/8 mixed 2x1024 ctx 8192 + 62 decodes 2048..8192", 32, 8, 128,
                       cat(repeat(2, 8192 + 1024), spread(62, 2048, 8192)),
                       cat(repeat(2, 1024), repeat(62, 1)), Kind::mixed});
  cases.push_back(Case{"32/8 mixed 1x4096 ctx 0 + 127 decodes 512..4096", 32, 8, 128,
                       cat({4096}, spread(127, 512, 4096)), cat({4096}, repeat(127, 1)),
                       Kind::mixed});
  return cases;
}

// A case on the device: the block table (sequence b takes the next ceil(L_b / 16) entries
// of a permutation of the pool's blocks; unused entries 0), lengths, q, out.
struct Setup {
  explicit Setup(const Case& c) : c(c) {
    int num_blocks = 0, width = 1;
    for (int l : c.seq_lens) {
      num_blocks += (l + kBlock - 1) / kBlock;
      width = std::max(width, (l + kBlock - 1) / kBlock);
    }
    shape =
        pa::ch10::VarlenShape{c.b(), c.num_tokens(), c.hq, c.hkv, c.d, kBlock, num_blocks, width};
    const std::vector<int> perm = pa::bench::permuted_blocks(num_blocks, 3);
    table_host.assign(size_t(c.b()) * width, 0);
    for (int b = 0, next = 0; b < c.b(); ++b)
      for (int j = 0; j < (c.seq_lens[b] + kBlock - 1) / kBlock; ++j)
        table_host[size_t(b) * width + j] = perm[next++];
    pool = size_t(num_blocks) * c.hkv * c.d * kBlock;
    qn = size_t(c.num_tokens()) * c.hq * c.d;
    table = pa::DeviceBuffer<int>(table_host);
    lens = pa::DeviceBuffer<int>(c.seq_lens);
    qsl_host = c.qsl();
    qsl = pa::DeviceBuffer<int>(qsl_host);
    q = pa::DeviceBuffer<half>(qn);
    out = pa::DeviceBuffer<half>(qn);
    pa::bench::fill_random_half(q.get(), qn, 2, false);
    scale = 1.f / std::sqrt(float(c.d));
  }
  pa::ch04::PagedAttentionShape ch09_shape() const {
    return {shape.num_seqs, shape.num_q_heads, shape.num_kv_heads,      shape.head_size,
            kBlock,         shape.num_blocks,  shape.max_blocks_per_seq};
  }
  int max_len() const { return *std::max_element(c.seq_lens.begin(), c.seq_lens.end()); }

  Case c;
  pa::ch10::VarlenShape shape;
  std::vector<int> table_host, qsl_host;
  size_t pool, qn;
  float scale;
  pa::DeviceBuffer<int> table, lens, qsl;
  pa::DeviceBuffer<half> q, out;
};

// max |a - b| / max |b| over all elements (infinite where a has a NaN).
double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i])) return INFINITY;
    num = std::max(num, double(std::fabs(a[i] - b[i])));
    den = std::max(den, double(std::fabs(b[i])));
  }
  return den > 0 ? num / den : num;
}

std::vector<float> to_floats(const std::vector<half>& h) {
  std::vector<float> f(h.size());
  for (size_t i = 0; i < h.size(); ++i) f[i] = pa::to_float(h[i]);
  return f;
}

// The float reference of sample rows on the host, from copy 0 of the pools (chapter 2's
// layouts: K [blocks, Hkv, D/x, BS, x], V [blocks, Hkv, D, BS], x = 8 halves). Returns the
// relative error of `out` (downloaded) on those rows.
double check_on_host(const Setup& s, const pa::DeviceBuffer<half>& kd,
                     const pa::DeviceBuffer<half>& vd) {
  const Case& c = s.c;
  const std::vector<float> k = to_floats(kd.download()), v = to_floats(vd.download());
  const std::vector<float> q = to_floats(s.q.download()), out = to_floats(s.out.download());
  const int x = 8, D = c.d, g = c.hq / c.hkv;
  int longest = 0;
  for (int b = 0; b < c.b(); ++b)
    if (c.seq_lens[b] > c.seq_lens[longest]) longest = b;
  std::vector<int> seqs{0, c.b() - 1, longest};
  std::sort(seqs.begin(), seqs.end());
  seqs.erase(std::unique(seqs.begin(), seqs.end()), seqs.end());
  std::vector<float> got, want;
  for (int b : seqs) {
    const int n = c.q_lens[b];
    std::vector<int> rows{0, n / 2, n - 1};
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    for (int i : rows) {
      const int pos = c.seq_lens[b] - n + i, row = s.qsl_host[b] + i;
      for (int h = 0; h < c.hq; ++h) {
        const int kvh = h / g;
        const float* qr = &q[(size_t(row) * c.hq + h) * D];
        std::vector<float> p(size_t(pos) + 1);
        float m = -INFINITY;
        for (int t = 0; t <= pos; ++t) {
          const size_t blk =
              size_t(s.table_host[size_t(b) * s.shape.max_blocks_per_seq + t / kBlock]);
          const size_t base = (blk * c.hkv + kvh) * size_t(D) * kBlock;
          float dot = 0;
          for (int e = 0; e < D; ++e)
            dot += qr[e] * k[base + (size_t(e / x) * kBlock + t % kBlock) * x + e % x];
          p[t] = dot * s.scale;
          m = std::max(m, p[t]);
        }
        double sum = 0;
        for (float& w : p) sum += (w = std::exp(w - m));
        std::vector<double> o(size_t(D), 0.0);
        for (int t = 0; t <= pos; ++t) {
          const size_t blk =
              size_t(s.table_host[size_t(b) * s.shape.max_blocks_per_seq + t / kBlock]);
          const size_t base = (blk * c.hkv + kvh) * size_t(D) * kBlock;
          for (int e = 0; e < D; ++e) o[e] += p[t] * v[base + size_t(e) * kBlock + t % kBlock];
        }
        for (int e = 0; e < D; ++e) {
          want.push_back(float(o[e] / sum));
          got.push_back(out[(size_t(row) * c.hq + h) * D + e]);
        }
      }
    }
  }
  return rel_err(got, want);
}

// Median microseconds of fn() on the host.
template <typename F>
double host_us(F&& fn, int reps = 50) {
  std::vector<double> t;
  for (int i = 0; i < reps + 3; ++i) {
    const auto a = std::chrono::steady_clock::now();
    fn();
    const auto b = std::chrono::steady_clock::now();
    if (i >= 3) t.push_back(std::chrono::duration<double, std::micro>(b - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct FlopRow {
  std::string kernel, shape;
  double us, flops, bytes;
};

std::string with_suffix(const std::string& path, const std::string& suffix) {
  const size_t dot = path.rfind('.'), slash = path.rfind('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return path + suffix;
  return path.substr(0, dot) + suffix + path.substr(dot);
}

// --only TEXT[,TEXT...]: the texts a case's name must contain one of (none: every case).
std::vector<std::string> parse_only(int argc, char** argv) {
  std::vector<std::string> out;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--only") {
      std::string list = argv[i + 1];
      for (size_t a = 0, b; a <= list.size(); a = b + 1) {
        b = list.find(',', a);
        if (b == std::string::npos) b = list.size();
        if (b > a) out.push_back(list.substr(a, b - a));
      }
    }
  return out;
}

bool wanted(const std::vector<std::string>& only, const std::string& name) {
  if (only.empty()) return true;
  for (const std::string& t : only)
    if (name.find(t) != std::string::npos) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  using pa::ch10::CacheType;
  const auto outputs = pa::bench::parse_outputs(argc, argv);
  const std::vector<std::string> only = parse_only(argc, argv);
  bool failed = false;
  try {
    cudaDeviceProp prop;
    PA_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const auto ceil = pa::bench::measure_ceilings();
    std::vector<pa::bench::Row> rows;
    std::vector<FlopRow> flop_rows;
    std::vector<std::string> plan_lines, notes;
    pa::ch09::Workspace ws09;
    pa::ch10::VarlenAttention ws10;
    const std::vector<int> lu = log_uniform_lengths(128, 64, 8192);
    long long lu_sum = 0;
    for (int l : lu) lu_sum += l;
    std::printf("log-uniform lengths: sum %lld (bench_flashinfer.py makes 190149)\n", lu_sum);
    if (lu_sum != 190149)
      notes.push_back("the log-uniform lengths differ from bench_flashinfer.py's");
    pa::DeviceBuffer<float> k_scale(std::vector<float>{0.05f}), v_scale(std::vector<float>{0.03f});

    for (const Case& c : all_cases()) {
      if (!wanted(only, c.name)) continue;
      const auto t0 = std::chrono::steady_clock::now();
      Setup s(c);
      const double bytes = c.bytes();
      auto add = [&](const std::string& kernel, double ms) {
        if (c.kind != Kind::prefill) {
          const double tbps = bytes / (ms * 1e-3) / 1e12;
          rows.push_back(
              {kernel, c.name, ms * 1e3, bytes, tbps, 100.0 * tbps / ceil.read_tbps, "read"});
        }
        if (c.kind == Kind::prefill || c.kind == Kind::mixed)
          flop_rows.push_back({kernel, c.name, ms * 1e3, c.flops(), bytes});
      };
      auto fail = [&](const std::string& what) {
        std::fprintf(stderr, "%s\n", what.c_str());
        notes.push_back(what);
        failed = true;
      };
      const CacheType cache = c.fp8 ? CacheType::fp8_e4m3 : CacheType::model_dtype;
      const std::vector<int> qsl = c.qsl();
      try {
        ws10.plan(s.shape, pa::DType::fp16, cache, c.seq_lens, qsl);
        const pa::ch10::Plan& plan = ws10.host_plan();
        std::printf(
            "%s: %zu items on %d blocks, chunk %d tokens, %d split tiles, %.1f MB, %.2f GFLOP\n",
            c.name.c_str(), plan.items.size(), plan.grid, plan.chunk_tokens, plan.num_counters,
            bytes / 1e6, c.flops() / 1e9);
        if (!c.fp8) {  // e4m3 cases plan the same lengths again
          const int grid = pa::ch10::wave_size(pa::DType::fp16, cache, c.d);
          const double mk = host_us([&] { pa::ch10::make_plan(s.shape, c.seq_lens, qsl, grid); });
          const double pl =
              host_us([&] { ws10.plan(s.shape, pa::DType::fp16, cache, c.seq_lens, qsl); });
          char line[256];
          std::snprintf(line, sizeof line, "| %s | %zu | %.1f | %.1f |", c.name.c_str(),
                        ws10.host_plan().items.size(), mk, pl);
          plan_lines.push_back(line);
          std::printf("  plan: make_plan %.1f us, VarlenAttention::plan %.1f us (host)\n", mk, pl);
        }
        if (!c.fp8) {
          const auto pools = pa::bench::random_half_pools(s.pool, bytes);
          const int copies = pools.copies();
          const auto &k = pools.k, &v = pools.v;
          auto run10 = [&](int i) {
            const int cp = i % copies;
            ws10.run<half>(s.out.get(), s.q.get(), k[cp].get(), v[cp].get(), s.table.get(),
                           s.lens.get(), s.qsl.get(), s.scale);
          };
          run10(0);
          PA_CUDA_CHECK(cudaDeviceSynchronize());
          double err;
          std::string against;
          if (c.all_decode()) {  // against chapter 9's decode
            const std::vector<float> mine = to_floats(s.out.download());
            pa::ch09::decode<half>(pa::ch09::Version::tensor_core, s.ch09_shape(), s.out.get(),
                                   s.q.get(), k[0].get(), v[0].get(), s.table.get(), s.lens.get(),
                                   s.max_len(), s.scale, ws09);
            err = rel_err(mine, to_floats(s.out.download()));
            against = "chapter 9";
          } else {
            err = check_on_host(s, k[0], v[0]);
            against = "the host reference";
          }
          std::printf("  ch10 vs %s: error %.1e of max |ref|\n", against.c_str(), err);
          if (!(err < 2e-2))
            fail("MISMATCH: ch10 varlen " + c.name + " disagrees with " + against + " (error " +
                 std::to_string(err) + ")");
          add("ch10 varlen", pa::bench::median_ms_queued(run10));
          // Chapter 13's Hopper prefill on the same chunk, checked the same way, in the same run.
          if (c.kind == Kind::prefill && pa::ch13::hopper_device()) {
            pa::ch13::HopperPrefill ws13;
            ws13.plan(s.shape, c.seq_lens, qsl);
            auto run13 = [&](int i) {
              const int cp = i % copies;
              ws13.run<half>(s.out.get(), s.q.get(), k[cp].get(), v[cp].get(), s.table.get(),
                             s.lens.get(), s.qsl.get(), s.scale);
            };
            PA_CUDA_CHECK(cudaMemset(s.out.get(), 0xFF, s.out.bytes()));
            run13(0);
            PA_CUDA_CHECK(cudaDeviceSynchronize());
            const double err13 = check_on_host(s, k[0], v[0]);
            std::printf("  ch13 hopper (%d items) vs the host reference: error %.1e of max |ref|\n",
                        ws13.num_items(), err13);
            if (!(err13 < 2e-2))
              fail("MISMATCH: ch13 hopper " + c.name + " disagrees with the host reference (error " +
                   std::to_string(err13) + ")");
            add("ch13 hopper", pa::bench::median_ms_queued(run13));
          }
          if (c.all_decode())  // as a model's layers call it: each launch placed behind the last
            std::printf("  ch10 varlen back to back: %.1f us per call\n",
                        1e3 * pa::bench::per_call_back_to_back_ms(run10));
          if (bytes < 64e6)  // a short step: what one launch that reads this much costs
            std::printf("  the read kernel over the same %.1f MB: %.1f us\n", bytes / 1e6,
                        pa::bench::read_floor_us(size_t(bytes)));
          if (c.all_decode())
            add("ch09 tensor_core", pa::bench::median_ms_queued([&](int i) {
                  const int cp = i % copies;
                  pa::ch09::decode<half>(pa::ch09::Version::tensor_core, s.ch09_shape(),
                                         s.out.get(), s.q.get(), k[cp].get(), v[cp].get(),
                                         s.table.get(), s.lens.get(), s.max_len(), s.scale, ws09);
                }));
        } else {
          const auto pools = pa::bench::random_e4m3_pools(s.pool, bytes);
          const int copies = pools.copies();
          const auto &k = pools.k, &v = pools.v;
          auto run10 = [&](int i) {
            const int cp = i % copies;
            ws10.run_fp8<half>(s.out.get(), s.q.get(), k[cp].get(), v[cp].get(), s.table.get(),
                               s.lens.get(), s.qsl.get(), k_scale.get(), v_scale.get(), s.scale);
          };
          auto run09 = [&](int i) {
            const int cp = i % copies;
            pa::ch09::decode_fp8<half>(s.ch09_shape(), s.out.get(), s.q.get(), k[cp].get(),
                                       v[cp].get(), s.table.get(), s.lens.get(), s.max_len(),
                                       k_scale.get(), v_scale.get(), s.scale, ws09);
          };
          run10(0);
          PA_CUDA_CHECK(cudaDeviceSynchronize());
          const std::vector<float> mine = to_floats(s.out.download());
          run09(0);
          const double err = rel_err(mine, to_floats(s.out.download()));
          std::printf("  ch10 e4m3 vs chapter 9's decode_fp8: error %.1e of max |ref|\n", err);
          if (!(err < 2e-2))
            fail("MISMATCH: ch10 varlen e4m3 " + c.name + " disagrees with chapter 9 (error " +
                 std::to_string(err) + ")");
          add("ch10 varlen e4m3", pa::bench::median_ms_queued(run10));
          add("ch09 fp8 (tensor_core)", pa::bench::median_ms_queued(run09));
        }
      } catch (const std::exception& e) {
        fail("FAILED: " + c.name + ": " + e.what());
      }
      std::printf("  (%.1f s)\n",
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }

    pa::bench::report(rows, ceil, prop.name, outputs.csv, outputs.md);
    std::printf("\n%-22s %-52s %10s %8s\n", "kernel", "case", "us", "TFLOP/s");
    for (const FlopRow& r : flop_rows)
      std::printf("%-22s %-52s %10.1f %8.1f\n", r.kernel.c_str(), r.shape.c_str(), r.us,
                  r.flops / (r.us * 1e-6) / 1e12);
    std::printf("\nplan() on the host (median of 50, us)\n");
    for (const std::string& l : plan_lines) std::printf("%s\n", l.c_str());
    if (!outputs.csv.empty()) {
      std::ofstream f(with_suffix(outputs.csv, "-flops"));
      f << "kernel,shape,us,flops,tflops,bytes,tbps,device\n";
      for (const FlopRow& r : flop_rows)
        f << r.kernel << "," << r.shape << "," << r.us << "," << r.flops << ","
          << r.flops / (r.us * 1e-6) / 1e12 << "," << r.bytes << ","
          << r.bytes / (r.us * 1e-6) / 1e12 << "," << prop.name << "\n";
    }
    if (!outputs.md.empty()) {
      std::ofstream f(outputs.md, std::ios::app);
      f << "\n## Prefill chunks and mixed steps (causal FLOPs counted exactly)\n\n"
        << "| kernel | case | time (us) | GFLOP | TFLOP/s | MB moved | TB/s |\n"
        << "|---|---|---:|---:|---:|---:|---:|\n";
      char line[512];
      for (const FlopRow& r : flop_rows) {
        std::snprintf(line, sizeof line, "| %s | %s | %.1f | %.2f | %.1f | %.1f | %.2f |\n",
                      r.kernel.c_str(), r.shape.c_str(), r.us, r.flops / 1e9,
                      r.flops / (r.us * 1e-6) / 1e12, r.bytes / 1e6,
                      r.bytes / (r.us * 1e-6) / 1e12);
        f << line;
      }
      f << "\n## plan() on the host (median of 50, us)\n\n"
        << "make_plan: the planner alone; VarlenAttention::plan: the planner and the upload of\n"
        << "the plan to the device (once per engine step, not per layer).\n\n"
        << "| case | work items | make_plan | VarlenAttention::plan |\n|---|---:|---:|---:|\n";
      for (const std::string& l : plan_lines) f << l << "\n";
      if (!notes.empty()) {
        f << "\n";
        for (const std::string& n : notes) f << "- " << n << "\n";
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench failed: %s\n", e.what());
    return 1;
  }
  return failed ? 1 : 0;
}
