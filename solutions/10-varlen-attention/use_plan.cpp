// Chapter 10: VarlenAttention::use_plan, a plan made by hand run as plan()'s would be. Tests
// use it for what make_plan never makes: chunks that end inside a stage of the kernel's ring
// (make_plan's chunks are multiples of kKvTile, so its chunk ends always fall between two
// stages), where only the mask's kv_end condition keeps a chunk from reading past its end.
#include <algorithm>

#include "pa/ch10_varlen.h"

namespace pa::ch10 {

namespace {

// Grows a device buffer to hold at least n (as plan() does: never shrinks).
template <typename U>
void grow(DeviceBuffer<U>& buf, size_t n, int fill_byte) {
  if (buf.size() >= n && buf.size() > 0) return;
  buf = DeviceBuffer<U>(std::max<size_t>(n, 1));
  buf.fill_bytes(fill_byte);
}

}  // namespace

void VarlenAttention::use_plan(const VarlenShape& s, DType dtype, CacheType cache,
                               const Plan& plan, cudaStream_t stream) {
  planned_ = false;
  PA_REQUIRE(dtype == DType::fp16 || dtype == DType::bf16,
             "chapter 10's kernel takes half or bf16 queries and outputs, not " << dtype_name(dtype));
  check_shape(s);
  PA_REQUIRE(plan.grid >= 1 && plan.cta_start.size() == size_t(plan.grid) + 1 &&
                 plan.cta_start.front() == 0 && plan.cta_start.back() == int(plan.items.size()),
             "use_plan: cta_start must have grid + 1 entries, from 0 to the number of items");
  plan_ = plan;
  shape_ = s;
  dtype_ = dtype;
  cache_ = cache;
  // The device's layout, as plan()'s: item k of block c at [k * grid + c], empty places seq -1.
  const int g = plan.grid;
  host_rounds_ = 0;
  for (int c = 0; c < g; ++c)
    host_rounds_ = std::max(host_rounds_, plan.cta_start[size_t(c) + 1] - plan.cta_start[size_t(c)]);
  by_rounds_.assign(size_t(host_rounds_) * size_t(g), WorkItem{-1, 0, 0, 0, 0, 0, 1, 0, -1, 0});
  for (int c = 0; c < g; ++c)
    for (int i = plan.cta_start[size_t(c)]; i < plan.cta_start[size_t(c) + 1]; ++i)
      by_rounds_[size_t(i - plan.cta_start[size_t(c)]) * size_t(g) + size_t(c)] = plan.items[size_t(i)];
  grow(items_, by_rounds_.size(), 0);
  grow(rounds_, 1, 0);
  grow(counters_, size_t(plan.num_counters), 0);
  const size_t rows = size_t(plan.partial_rows);
  grow(max_logits_, rows, 0xff);
  grow(exp_sums_, rows, 0xff);
  grow(partial_out_, rows * size_t(s.head_size), 0xff);
  PA_CUDA_CHECK(cudaMemcpyAsync(items_.get(), by_rounds_.data(), by_rounds_.size() * sizeof(WorkItem),
                                cudaMemcpyHostToDevice, stream));
  PA_CUDA_CHECK(cudaMemcpyAsync(rounds_.get(), &host_rounds_, sizeof(int), cudaMemcpyHostToDevice, stream));
  planned_ = true;
}

}  // namespace pa::ch10
