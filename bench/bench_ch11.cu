// GPU benchmark of chapter 11: the absorbed MLA decode over the paged latent cache, against
// the read ceiling measured in the same run, and as TFLOP/s (the kernel turns compute-bound
// near h_q * s_q = 170 on an H100). bf16, one pool [blocks, block_size, 576] of random
// rows, physical blocks randomly permuted, pools rotated so that the working set is at
// least 10x the L2 cache; every call timed on the GPU alone, queued behind a spin.
//
// The cases are bench/ch11_cases.txt's, the one list bench/bench_flashinfer_mla.py runs too,
// by the same names (bench/ch11_cases.h reads it): the book's seven (h_q 16, a DeepSeek-V3
// shard under 8-way tensor parallelism; 128, data-parallel attention; 64 with 2 new tokens,
// Kimi K2 with multi-token prediction; 16 with 4, speculative verification; a ragged batch;
// block size 16 beside FlashMLA's 64), then sweeps over h_q x s_q, the batch and the context.
// Bytes: every sequence's whole latent context once (1,152 bytes a token) plus q and out.
// FLOPs: 2 * (576 + 512) * h_q per (query row, key it attends), causal, exact.
//   usage: bench_ch11 [--csv FILE] [--md FILE] [--cases FILE] [--only TEXT] [--list] [--fp8]
//                     [--block 8|4|4q|8q|8h]
//   (--fp8: the same cases over the fp8 latent pool, 656 bytes a token read, named "... e4m3";
//   --block: the thread block forced (MlaDecode::set_block), not the runner's choice, for
//   measuring that choice; a case whose tiles the block cannot take prints FAILED with the
//   runner's reason, the others still run, and the exit status is 1)
// --cases: the case file (default: the source tree's bench/ch11_cases.txt, else
// ./bench/ch11_cases.txt); --only: the cases whose name holds TEXT; --list: print the
// cases and exit before touching the GPU. The CSV has one row per case, TFLOP/s included
// (bench/compare_ch11.py reads it beside bench_flashinfer_mla.py's).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "bench_common.h"
#include "ch11_cases.h"
#include "pa/ch11_mla.h"
#include "pa/dtype.h"

namespace {

using pa::bf16;
namespace m = pa::ch11;

using Case = pa::bench::ch11cases::MlaCase;

#ifndef PA_BENCH_CASES
#define PA_BENCH_CASES "bench/ch11_cases.txt"
#endif

std::string arg_value(int argc, char** argv, const std::string& flag, const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (flag == argv[i]) return argv[i + 1];
  return fallback;
}

bool has_flag(int argc, char** argv, const std::string& flag) {
  for (int i = 1; i < argc; ++i)
    if (flag == argv[i]) return true;
  return false;
}

std::vector<Case> load_cases(int argc, char** argv) {
  std::string path = arg_value(argc, argv, "--cases", "");
  if (path.empty()) path = std::ifstream(PA_BENCH_CASES) ? PA_BENCH_CASES : "bench/ch11_cases.txt";
  const std::string only = arg_value(argc, argv, "--only", "");
  std::vector<Case> out;
  for (Case& c : pa::bench::ch11cases::read_cases(path))
    if (c.name.find(only) != std::string::npos) out.push_back(std::move(c));
  if (out.empty()) throw std::runtime_error("no case of " + path + " holds '" + only + "'");
  return out;
}

std::string csv_quoted(const std::string& s) { return "\"" + s + "\""; }  // names hold no '"'

// An e4m3 byte's value (chapter 6's format: 4 exponent bits, bias 7, 3 mantissa bits; S.1111.111
// is NaN), on the host, to check the fp8 kernel against a pool dequantized here.
float e4m3_value(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  if (e == 15 && m == 7) return NAN;
  const float v = e == 0 ? std::ldexp(m / 8.0f, -6) : std::ldexp(1.0f + m / 8.0f, e - 7);
  return b & 0x80 ? -v : v;
}

// An fp8 pool's rows as 16-bit rows [c_kv * tile scale | k_rope] (what the fp8 kernel attends).
std::vector<bf16> dequantized(const std::vector<uint8_t>& pool, size_t rows) {
  std::vector<bf16> out(rows * m::kRowWidth);
  for (size_t r = 0; r < rows; ++r) {
    const uint8_t* row = pool.data() + r * m::kFp8RowBytes;
    float scale[m::kFp8Scales];
    std::memcpy(scale, row + m::kFp8ScalesAt, sizeof scale);
    for (int c = 0; c < m::kLatentDim; ++c)
      out[r * m::kRowWidth + c] = pa::from_float<bf16>(e4m3_value(row[c]) * scale[c / m::kFp8Tile]);
    std::memcpy(&out[r * m::kRowWidth + m::kLatentDim], row + m::kFp8RopeAt, 2 * m::kRopeDim);
  }
  return out;
}

// The rows check_rows compares: the first, the longest and the last sequence's new tokens,
// at heads 0, stride, 2 * stride, ... and h_q - 1, the stride the smallest power of two that
// keeps the host's work under kCheckKeys (keys x rows; a row costs its keys x 1,088
// multiply-adds in double): every 8th head at L 4096 and B 64, and a few heads a token of the
// 64K contexts, so that a case's check stays well under a second.
constexpr double kCheckKeys = 2.5e5;

std::vector<int> checked_heads(const Case& c, const std::vector<int>& seqs) {
  double keys = 0;
  for (int b : seqs) keys += double(c.lens[b]) * c.s_q;
  int stride = 8;
  while (stride < c.hq && keys * ((c.hq + stride - 1) / stride + 1) > kCheckKeys) stride *= 2;
  std::vector<int> heads;
  for (int h = 0; h < c.hq; h += stride) heads.push_back(h);
  if (heads.back() != c.hq - 1) heads.push_back(c.hq - 1);
  return heads;
}

// max |out - ref| / max |ref| over those rows, the reference in double on the host from
// copy 0 of the pool and q.
double check_rows(const Case& c, const std::vector<int>& table, int max_blocks,
                  const std::vector<int>& qsl, const std::vector<bf16>& pool,
                  const std::vector<bf16>& q, const std::vector<bf16>& out, float scale) {
  const int W = m::kRowWidth, V = m::kLatentDim, B = int(c.lens.size());
  const int longest = int(std::max_element(c.lens.begin(), c.lens.end()) - c.lens.begin());
  const std::set<int> seq_set{0, longest, B - 1};
  const std::vector<int> seqs(seq_set.begin(), seq_set.end());
  const std::vector<int> heads = checked_heads(c, seqs);
  double worst = 0, top = 0;
  for (int b : seqs) {
    const int L = c.lens[b];
    for (int i = 0; i < c.s_q; ++i)
      for (int h : heads) {
        const size_t row = size_t(qsl[b] + i) * c.hq + h;
        const int seen = L - c.s_q + i + 1;
        std::vector<double> sc(seen), acc(V, 0.0);
        double mx = -1e300, sum = 0;
        for (int t = 0; t < seen; ++t) {
          const size_t at = (size_t(table[size_t(b) * max_blocks + t / c.block]) * c.block + t % c.block) * W;
          double d = 0;
          for (int j = 0; j < W; ++j) d += double(pa::to_float(q[row * W + j])) * pa::to_float(pool[at + j]);
          sc[t] = d * scale;
          mx = std::max(mx, sc[t]);
        }
        for (int t = 0; t < seen; ++t) {
          const size_t at = (size_t(table[size_t(b) * max_blocks + t / c.block]) * c.block + t % c.block) * W;
          const double p = std::exp(sc[t] - mx);
          sum += p;
          for (int j = 0; j < V; ++j) acc[j] += p * pa::to_float(pool[at + j]);
        }
        for (int j = 0; j < V; ++j) {
          const double ref = acc[j] / sum;
          worst = std::max(worst, std::fabs(double(pa::to_float(out[row * V + j])) - ref));
          top = std::max(top, std::fabs(ref));
        }
      }
  }
  return worst / std::max(top, 1e-30);
}

}  // namespace

int main(int argc, char** argv) {
  const auto outputs = pa::bench::parse_outputs(argc, argv);
  std::vector<Case> cases;
  // --fp8: every case over chapter 11's fp8 latent pool (656 bytes a token), named "... e4m3".
  const bool fp8 = has_flag(argc, argv, "--fp8");
  const std::string block_arg = arg_value(argc, argv, "--block", "");
  m::MlaBlock block = m::MlaBlock::automatic;
  try {
    if (block_arg == "8") block = m::MlaBlock::eight_warps;
    else if (block_arg == "4") block = m::MlaBlock::four_warps;
    else if (block_arg == "4q") block = m::MlaBlock::queries_in_registers;
    else if (block_arg == "8q") block = m::MlaBlock::eight_warps_queries_in_registers;
    else if (block_arg == "8h") block = m::MlaBlock::key_halves;
    else if (!block_arg.empty()) throw std::runtime_error("--block " + block_arg + ": 8, 4, 4q, 8q or 8h (warps; q: the queries in registers; h: key halves)");
    cases = load_cases(argc, argv);
    if (fp8)
      for (Case& c : cases) c.name += " e4m3";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ch11: %s\n", e.what());
    return 2;
  }
  if (has_flag(argc, argv, "--list")) {
    for (const Case& c : cases) {
      long long tokens = 0;
      for (int L : c.lens) tokens += L;
      std::printf("%-44s h_q %3d  s_q %d  B %3zu  tokens %8lld  block %d\n", c.name.c_str(), c.hq, c.s_q,
                  c.lens.size(), tokens, c.block);
    }
    std::printf("%zu cases\n", cases.size());
    return 0;
  }
  cudaDeviceProp prop{};
  PA_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const auto ceil = pa::bench::measure_ceilings();
  std::vector<pa::bench::Row> rows;
  std::vector<double> row_flops;
  bool failed = false;
  std::printf("%-44s %10s %9s %8s %10s\n", "case", "us", "TB/s", "% read", "TFLOP/s");
  for (const Case& c : cases) {
    try {
      const int B = int(c.lens.size());
      std::vector<int> qsl(B + 1, 0), table;
      int max_blocks = 0, num_blocks = 0;
      double tokens = 0, keys = 0;
      for (int b = 0; b < B; ++b) {
        qsl[b + 1] = qsl[b] + c.s_q;
        const int nb = (c.lens[b] + c.block - 1) / c.block;
        max_blocks = std::max(max_blocks, nb);
        num_blocks += nb;
        tokens += c.lens[b];
        for (int i = 0; i < c.s_q; ++i) keys += c.lens[b] - c.s_q + i + 1;
      }
      const auto perm = pa::bench::permuted_blocks(num_blocks, 17);
      table.assign(size_t(B) * max_blocks, 0);
      for (int b = 0, next = 0; b < B; ++b)
        for (int j = 0; j < (c.lens[b] + c.block - 1) / c.block; ++j) table[size_t(b) * max_blocks + j] = perm[next++];
      m::MlaShape s{B, qsl[B], c.hq, c.block, num_blocks, max_blocks};
      if (fp8) s.latent = m::LatentFormat::fp8_e4m3;
      const size_t slots = size_t(num_blocks) * c.block;
      const size_t pool_n = slots * m::kRowWidth;
      const size_t q_n = size_t(qsl[B]) * c.hq * m::kRowWidth, o_n = size_t(qsl[B]) * c.hq * m::kLatentDim;
      const double row_bytes = fp8 ? double(m::kFp8RowBytes) : 2.0 * m::kRowWidth;  // read a token
      const double bytes = tokens * row_bytes + 2.0 * (double(q_n) + double(o_n));
      const double flops = 2.0 * (m::kRowWidth + m::kLatentDim) * c.hq * keys;
      const int copies = pa::bench::rotation_count(size_t(bytes));
      std::vector<pa::DeviceBuffer<bf16>> pools, qs;
      std::vector<pa::DeviceBuffer<uint8_t>> pools8;
      for (int k = 0; k < copies; ++k) {
        qs.emplace_back(q_n);
        pa::bench::fill_random_half(qs.back().get(), q_n, 200 + k, true);
        if (!fp8) {
          pools.emplace_back(pool_n);
          pa::bench::fill_random_half(pools.back().get(), pool_n, 100 + k, true);
          continue;
        }
        // Every slot written by chapter 11's quantizing writer from random c_kv and k_rope.
        pa::DeviceBuffer<bf16> ckv(slots * m::kLatentDim), rope(slots * m::kRopeDim);
        pa::bench::fill_random_half(ckv.get(), slots * m::kLatentDim, 100 + k, true);
        pa::bench::fill_random_half(rope.get(), slots * m::kRopeDim, 300 + k, true);
        std::vector<int64_t> slot_ids(slots);
        for (size_t i = 0; i < slots; ++i) slot_ids[i] = int64_t(i);
        pa::DeviceBuffer<int64_t> d_slots(slots);
        d_slots.upload(slot_ids);
        pools8.emplace_back(slots * m::kFp8RowBytes);
        m::reshape_and_cache_latent_fp8<bf16>(m::LatentPoolShape{num_blocks, c.block}, ckv.get(), rope.get(),
                                              int(slots), pools8.back().get(), d_slots.get());
      }
      pa::DeviceBuffer<bf16> out(o_n);
      pa::DeviceBuffer<int> d_table(table.size()), d_lens(B), d_qsl(B + 1);
      d_table.upload(table);
      d_lens.upload(c.lens);
      d_qsl.upload(qsl);
      m::MlaDecode dec;
      dec.set_block(block);
      dec.plan(s, pa::DType::bf16, c.lens, qsl);
      const float scale = 1.0f / std::sqrt(192.0f);
      auto run = [&](int i) {
        const int k = i % copies;
        if (fp8)
          dec.run(out.get(), qs[k].get(), pools8[k].get(), d_table.get(), d_lens.get(), d_qsl.get(), scale);
        else
          dec.run(out.get(), qs[k].get(), pools[k].get(), d_table.get(), d_lens.get(), d_qsl.get(), scale);
      };
      run(0);
      PA_CUDA_CHECK(cudaDeviceSynchronize());
      const double err = check_rows(c, table, max_blocks, qsl,
                                    fp8 ? dequantized(pools8[0].download(), slots) : pools[0].download(),
                                    qs[0].download(), out.download(), scale);
      if (!(err < 2e-2)) {
        std::printf("MISMATCH %s: max |out - ref| / max |ref| = %.2e (not timed)\n", c.name.c_str(), err);
        failed = true;
        continue;
      }
      const double us = pa::bench::median_ms_queued(run) * 1e3;
      const double tbps = bytes / us / 1e6;
      std::printf("%-44s %10.1f %9.2f %7.1f%% %10.1f\n", c.name.c_str(), us, tbps,
                  100.0 * tbps / ceil.read_tbps, flops / us / 1e6);
      std::fflush(stdout);
      rows.push_back({fp8 ? "ch11 mla decode e4m3" : "ch11 mla decode", c.name, us, bytes, tbps, 100.0 * tbps / ceil.read_tbps, "read"});
      row_flops.push_back(flops);
    } catch (const std::exception& e) {  // a case the kernel refuses: said, and the others still run
      std::printf("FAILED %s: %s\n", c.name.c_str(), e.what());
      failed = true;
    }
  }
  pa::bench::report(rows, ceil, prop.name, "", outputs.md);
  if (!outputs.csv.empty()) {  // names hold commas: quoted; TFLOP/s beside the bytes
    std::ofstream csv(outputs.csv);
    csv << "kernel,case,us,bytes,tbps,pct_read,flops,tflops,read_ceiling_tbps,copy_ceiling_tbps,device\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      char line[512];
      std::snprintf(line, sizeof line, ",%.3f,%.0f,%.4f,%.2f,%.0f,%.2f,%.4f,%.4f,", r.us, r.bytes, r.tbps,
                    r.pct, row_flops[i], row_flops[i] / r.us / 1e6, ceil.read_tbps, ceil.copy_tbps);
      csv << r.kernel << "," << csv_quoted(r.shape) << line << csv_quoted(prop.name) << "\n";
    }
  }
  return failed ? 1 : 0;
}
