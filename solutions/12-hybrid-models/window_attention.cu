// Chapter 12: the host side of the sliding-window kernel -- the checks, the plan with the
// window, and chapter 10's launch with this chapter's mask policy (window_mask.cuh).
#include <cmath>

#include "launch_varlen.cuh"  // chapter 10: VarlenAttention::run_masked
#include "window_mask.cuh"
#include "pa/ch12_hybrid.h"
#include "pa/ch12_window.h"

namespace pa::ch12 {

void check_options(const ch10::VarlenShape& s, const WindowOptions& opt) {
  PA_REQUIRE(opt.window > 0, "window must be positive, got " << opt.window
                                 << " (the keys a row sees, its own included; a full layer "
                                    "runs chapter 10's VarlenAttention)");
  PA_REQUIRE(opt.sinks.empty() || int(opt.sinks.size()) == s.num_q_heads,
             "sinks: one per query head: expected " << s.num_q_heads << " logits (Hq), got "
                                                    << opt.sinks.size());
  for (size_t h = 0; h < opt.sinks.size(); ++h)
    PA_REQUIRE(std::isfinite(opt.sinks[h]), "sinks: the sink of query head " << h << " is "
                                                << opt.sinks[h] << ", not a finite logit");
  PA_REQUIRE(std::isfinite(opt.softcap) && opt.softcap >= 0.f,
             "softcap must be 0 (none) or positive, got " << opt.softcap);
}

void check_window_metadata(const ch10::VarlenShape& s, const std::vector<int>& block_table,
                           const std::vector<int>& seq_lens, const std::vector<int>& query_start_loc,
                           int window) {
  ch10::check_metadata(s, block_table, seq_lens, query_start_loc);
  PA_REQUIRE(window > 0, "window must be positive, got " << window);
  if (block_table.empty()) return;
  for (int b = 0; b < s.num_seqs; ++b) {
    const int n = query_start_loc[size_t(b) + 1] - query_start_loc[size_t(b)];
    if (n == 0) continue;
    const int len = seq_lens[size_t(b)], first = std::max(0, len - n - window + 1);
    for (int j = first / s.block_size; j * s.block_size < len; ++j) {
      const int entry = block_table[size_t(b) * s.max_blocks_per_seq + j];
      PA_REQUIRE(entry != kNullBlock,
                 "sequence " << b << ": block table entry " << j << " is the null block (" << kNullBlock
                             << "), but position " << std::max(first, j * s.block_size)
                             << " of it is in the window of the step's first query (position "
                             << len - n << ", window " << window << ")");
    }
  }
}

namespace {
void check_planned(const ch10::VarlenShape& s, DType dtype, const WindowOptions& opt) {
  PA_REQUIRE(dtype == DType::fp16 || dtype == DType::bf16,
             "the window kernel takes half or bf16 queries and outputs, not " << dtype_name(dtype));
  check_options(s, opt);
}
}  // namespace

void WindowAttention::plan(const ch10::VarlenShape& s, DType dtype, const std::vector<int>& block_table,
                           const std::vector<int>& seq_lens, const std::vector<int>& query_start_loc,
                           const WindowOptions& opt, int chunk_tokens, int grid, cudaStream_t stream) {
  check_planned(s, dtype, opt);
  check_window_metadata(s, block_table, seq_lens, query_start_loc, opt.window);
  const int g = grid > 0 ? grid : ch10::wave_size(dtype, ch10::CacheType::model_dtype, s.head_size);
  use_plan(s, dtype, ch10::make_plan(s, seq_lens, query_start_loc, g, chunk_tokens, opt.window), opt,
           stream, query_start_loc);
}

void WindowAttention::use_plan(const ch10::VarlenShape& s, DType dtype, const ch10::Plan& plan,
                               const WindowOptions& opt, cudaStream_t stream,
                               const std::vector<int>& query_start_loc) {
  check_planned(s, dtype, opt);
  runner_.use_plan(s, dtype, ch10::CacheType::model_dtype, plan, stream, query_start_loc);
  opt_ = opt;
  if (!opt.sinks.empty()) {
    sinks_.reserve(opt.sinks.size(), 0);
    PA_CUDA_CHECK(cudaMemcpyAsync(sinks_.get(), opt.sinks.data(), opt.sinks.size() * sizeof(float),
                                  cudaMemcpyHostToDevice, stream));
  }
}

template <typename T>
void WindowAttention::run(T* out, const T* q, const T* k_pool, const T* v_pool, const int* block_table,
                          const int* seq_lens, const int* query_start_loc, float scale,
                          cudaStream_t stream) {
  const bool cap = opt_.softcap > 0.f;
  const WindowMask mask{opt_.window, opt_.sinks.empty() ? nullptr : sinks_.get(),
                        cap ? opt_.softcap / scale : 0.f, cap ? scale / opt_.softcap : 0.f};
  runner_.run_masked<T>(out, q, k_pool, v_pool, block_table, seq_lens, query_start_loc, scale, mask,
                        stream);
}

template void WindowAttention::run<half>(half*, const half*, const half*, const half*, const int*,
                                         const int*, const int*, float, cudaStream_t);
template void WindowAttention::run<bf16>(bf16*, const bf16*, const bf16*, const bf16*, const int*,
                                         const int*, const int*, float, cudaStream_t);

}  // namespace pa::ch12
