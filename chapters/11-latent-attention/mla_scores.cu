// Chapter 11, for the tests: the scores exercise alone (MlaDecode::run_scores). The same
// kernel as run()'s (mla_kernel.cuh), instantiated with kScores: each item writes the scores
// of its first stages and stops, so that a test sees exercise 3's answer before any softmax
// or P V (exercise 4) touches it. Its own file: run() and the GPU path never see it, and a
// rebuild compiles it beside mla_decode.cu. Its arguments are MlaScoreArgs (mla_kernel.cuh):
// MlaArgs and where the scores go (scores [num_tokens, h_q, score_keys], the scores of keys 0
// .. score_keys - 1), a type of its own so that the kernels that serve keep MlaArgs as it
// was, and with it their code: two more fields in MlaArgs moved ptxas's register allocation
// (up to 10 more registers, new spills in two fp8 shapes) and cost one case 7% on the H100
// (bench/results/kernel-hooks-ab-h100.md).
#include "mla_kernel.cuh"
#include "pa/launch.h"

namespace pa::ch11 {

namespace {

template <typename T, int RG, int MT, bool KH = false>
void launch_scores(const MlaScoreArgs<T>& a, int grid, cudaStream_t stream) {
  using B = BlockShape<RG, MT, KH>;
  const auto kernel = mla_decode_kernel<T, false, RG, MT, KH, true>;
  PA_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, int(B::kSmemBytes)));
  pa::launch(kernel, dim3(grid), dim3(B::kThreads), B::kSmemBytes, stream, a);
}

}  // namespace

template <typename T>
void MlaDecode::run_scores(float* scores, int keys, const T* q, const T* latent_pool, const int* block_table,
                           const int* seq_lens, const int* query_start_loc, float scale, cudaStream_t stream) {
  static_assert(std::is_same<T, half>::value || std::is_same<T, bf16>::value,
                "the MLA decode kernel takes half or bf16");
  PA_REQUIRE(planned_, "MlaDecode: run_scores() before plan(): plan the step first");
  PA_REQUIRE(dtype_ == dtype_of<T>(), "MlaDecode: planned for " << dtype_name(dtype_) << ", run with "
                                                                << dtype_name(dtype_of<T>()));
  PA_REQUIRE(shape_.latent == LatentFormat::bits16, "MlaDecode::run_scores takes a 16-bit latent pool");
  PA_REQUIRE(keys >= 1 && keys <= 1024, "MlaDecode::run_scores: keys " << keys << " (1 to 1024)");
  for (const ch10::WorkItem& w : plan_.items)
    PA_REQUIRE(w.kv_begin == 0 && w.num_splits == 1,
               "MlaDecode::run_scores: an item starts at key " << w.kv_begin << " (chunk " << w.split << " of "
                                                               << w.num_splits
                                                               << "); plan without splits (one thread block)");
  if (plan_.items.empty()) return;
  MlaScoreArgs<T> a{{nullptr, q, latent_pool, block_table, seq_lens, query_start_loc, items_.get(), rounds_,
                     max_logits_.get(), exp_sums_.get(), partial_out_.get(), counters_.get(), scale,
                     shape_.num_q_heads, shape_.block_size, shape_.max_blocks_per_seq},
                    scores, keys};
  const int grid = plan_.grid;
  switch (planned_block_) {
    case MlaBlock::queries_in_registers: launch_scores<T, 1, 1>(a, grid, stream); break;
    case MlaBlock::eight_warps_queries_in_registers: launch_scores<T, 2, 1>(a, grid, stream); break;
    case MlaBlock::key_halves: launch_scores<T, 2, 1, true>(a, grid, stream); break;
    case MlaBlock::four_warps: launch_scores<T, 1, 2>(a, grid, stream); break;
    default: launch_scores<T, 2, 2>(a, grid, stream); break;
  }
}

template void MlaDecode::run_scores<half>(float*, int, const half*, const half*, const int*, const int*, const int*,
                                          float, cudaStream_t);
template void MlaDecode::run_scores<bf16>(float*, int, const bf16*, const bf16*, const int*, const int*, const int*,
                                          float, cudaStream_t);

}  // namespace pa::ch11
