// A chapter 11 golden case on the device, and its comparison sequence by sequence: a
// failure names the sequence, its new token, the head and the output element.
#pragma once

#include <algorithm>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "compare.h"
#include "golden.h"
#include "pa/ch11_mla.h"

namespace pa::test {

// out: [tokens of one sequence, h_q, 512].
inline Dims mla_out_dims(int tokens, int heads, int width = ch11::kLatentDim) {
  return {{"new token", tokens}, {"head", heads}, {"element", width}};
}

// The most rows of any tile of a batch (a sequence's first tile, chapter 10's tile_rows):
// the 4-warp thread block takes tiles of at most 32.
inline int max_tile_rows(const std::vector<int>& qsl, int heads) {
  int rows = 0;
  for (size_t b = 0; b + 1 < qsl.size(); ++b) rows = std::max(rows, ch10::tile_rows(qsl[b + 1] - qsl[b], heads, 0));
  return rows;
}

// A thread block in a failure message.
inline const char* block_words(ch11::MlaBlock b) {
  switch (b) {
    case ch11::MlaBlock::eight_warps: return "the 8-warp thread block (64-key stages)";
    case ch11::MlaBlock::four_warps: return "the 4-warp thread block (32-key stages, 8 keys a warp)";
    case ch11::MlaBlock::queries_in_registers:
      return "the 4-warp thread block that holds the queries in registers (16-row tiles, one mma tile a warp)";
    case ch11::MlaBlock::eight_warps_queries_in_registers:
      return "the 8-warp thread block that holds the queries in registers (32-row tiles, one mma tile a warp)";
    case ch11::MlaBlock::key_halves:
      return "the 8-warp thread block on key halves (16-row tiles, each row group on half of a stage's keys)";
    default: return "the runner's choice of thread block";
  }
}

// An mla_ or naive_ golden case, uploaded. Padding entries of the block table point at a
// block no sequence owns (all NaN): a kernel that follows one leaks NaN into its output.
template <typename T>
struct MlaCase {
  explicit MlaCase(const GoldenCase& c) : name(c.name()) {
    const auto qs = c.shape("q"), ps = c.shape("latent_pool"), ts = c.shape("block_table");
    shape = ch11::MlaShape{int(ts[0]), int(qs[0]), int(qs[1]), int(ps[1]), int(ps[0]), int(ts[1]),
                           int(qs[2]), ch11::kLatentDim};
    table = c.get<int>("block_table");
    std::set<int> owned(table.begin(), table.end());
    int unowned = 0;
    while (owned.count(unowned)) ++unowned;
    for (int& id : table)
      if (id < 0) id = unowned;
    seq_lens = c.get<int>("seq_lens");
    qsl = c.get<int>("query_start_loc");
    scale = float(c.get<double>("scale")[0]);
    chunk_tokens = c.has_param("chunk_tokens") ? int(c.param_int("chunk_tokens")) : 0;
    grid = c.has_param("grid") ? int(c.param_int("grid")) : 0;
    q = DeviceBuffer<T>(to_dtype<T>(c.get<float>("q")));
    pool = DeviceBuffer<T>(to_dtype<T>(c.get<float>("latent_pool")));
    d_table = DeviceBuffer<int>(table);
    d_seq_lens = DeviceBuffer<int>(seq_lens);
    d_qsl = DeviceBuffer<int>(qsl);
    out = DeviceBuffer<T>(size_t(shape.num_tokens) * shape.num_q_heads * ch11::kLatentDim);
  }

  // Plans (chunk_tokens and grid: the case's unless given) and runs; the output poisoned first.
  std::vector<T> run(int chunk = -1, int grid_size = -1, ch11::MlaBlock block = ch11::MlaBlock::automatic) {
    ch11::MlaDecode mla;
    mla.set_block(block);
    mla.plan(shape, dtype_of<T>(), seq_lens, qsl, chunk < 0 ? chunk_tokens : chunk,
             grid_size < 0 ? grid : grid_size);
    mla.poison_workspace();
    planned_block = mla.block();
    splits = 0;
    for (const ch10::WorkItem& w : mla.host_plan().items) splits = std::max(splits, w.num_splits);
    poison(out);
    mla.run(out.get(), q.get(), pool.get(), d_table.get(), d_seq_lens.get(), d_qsl.get(), scale);
    PA_CUDA_CHECK(cudaDeviceSynchronize());
    return out.download();
  }

  // Runs a plan made by hand (MlaDecode::use_plan) on the thread block `block`.
  std::vector<T> run_plan(const ch10::Plan& plan, ch11::MlaBlock block = ch11::MlaBlock::automatic) {
    ch11::MlaDecode mla;
    mla.set_block(block);
    mla.use_plan(shape, dtype_of<T>(), plan, nullptr, qsl);
    mla.poison_workspace();
    planned_block = mla.block();
    poison(out);
    mla.run(out.get(), q.get(), pool.get(), d_table.get(), d_seq_lens.get(), d_qsl.get(), scale);
    PA_CUDA_CHECK(cudaDeviceSynchronize());
    return out.download();
  }

  std::string name;
  ch11::MlaShape shape{};
  std::vector<int> table, seq_lens, qsl;
  float scale = 0.f;
  int chunk_tokens = 0, grid = 0, splits = 0;
  ch11::MlaBlock planned_block = ch11::MlaBlock::automatic;  // the last run's thread block (block_words)

  int max_tile_rows() const { return pa::test::max_tile_rows(qsl, shape.num_q_heads); }
  DeviceBuffer<T> q, pool, out;
  DeviceBuffer<int> d_table, d_seq_lens, d_qsl;
};

// got and want [num_tokens, heads, width], compared sequence by sequence.
template <typename T>
::testing::AssertionResult mla_close(const std::vector<T>& got, const std::vector<double>& want,
                                     const std::vector<int>& qsl, const std::vector<int>& seq_lens,
                                     int heads, int width, double atol, double rtol) {
  std::ostringstream failures;
  int bad = 0;
  const size_t row = size_t(heads) * width;
  for (size_t b = 0; b + 1 < qsl.size(); ++b) {
    const int n = qsl[b + 1] - qsl[b];
    if (n == 0) continue;
    const std::vector<T> g(got.begin() + qsl[b] * row, got.begin() + qsl[b + 1] * row);
    const std::vector<double> w(want.begin() + qsl[b] * row, want.begin() + qsl[b + 1] * row);
    const auto r = all_close(g, w, mla_out_dims(n, heads, width), atol, rtol);
    if (!r) {
      ++bad;
      failures << "\n  sequence " << b << " (seq_len " << seq_lens[b] << ", " << n << " new tokens): "
               << r.message();
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " sequence(s) differ:" << failures.str();
}

inline std::pair<double, double> tolerance_of(const GoldenCase& c) {
  return c.param("dtype") == "bf16" ? std::pair{1e-2, 1e-2} : std::pair{2e-3, 2e-3};
}

}  // namespace pa::test
