// Chapter 5: the reduce alone (merge_partitions through v2's reduce kernel), on a workspace
// the test writes itself. The golden cases cannot see how one partition is returned: their
// partial outputs are acc / l, and (l * (acc / l)) / l rounds back to acc / l. A partition's
// output here is any float, where (l * x) / l is not always x.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "compare.h"
#include "pa/ch05_paged_attention_v2.h"
#include "pa/launch.h"
#include "reduce_partitions.cuh"  // the chapter's own: the student's merge_partitions

namespace {

using pa::ch04::PagedAttentionShape;

TEST(MergePartitions, OnePartitionIsItsPartialOutputUnchanged) {
  const int D = 128, len = 300;  // one partition of 512 tokens
  const PagedAttentionShape s{1, 1, 1, D, 16, 32, 32};
  pa::ch05::Workspace ws;
  ws.reserve(1, 1, 1, D);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> x(D);
  for (float& e : x) e = normal(rng);
  const float l = 4.33698702f, m = 2.5f;
  // The test's own premise: for these values, (l * x) / l differs from x somewhere.
  int changed = 0;
  for (float e : x) {
    volatile float lx = l * e;
    changed += lx / l != e;
  }
  ASSERT_GT(changed, 0) << "the test's values no longer tell x from (l * x) / l";
  PA_CUDA_CHECK(cudaMemcpy(ws.max_logits(), &m, sizeof(float), cudaMemcpyHostToDevice));
  PA_CUDA_CHECK(cudaMemcpy(ws.exp_sums(), &l, sizeof(float), cudaMemcpyHostToDevice));
  PA_CUDA_CHECK(cudaMemcpy(ws.partial_out(), x.data(), D * sizeof(float), cudaMemcpyHostToDevice));
  pa::DeviceBuffer<int> lens(std::vector<int>{len});
  pa::DeviceBuffer<float> out(D);
  pa::test::poison(out);
  pa::launch(pa::ch05::paged_attention_v2_reduce_kernel<float>, dim3(1, 1), dim3(128), 0, nullptr, out.get(),
             static_cast<const float*>(ws.max_logits()), static_cast<const float*>(ws.exp_sums()),
             static_cast<const float*>(ws.partial_out()), static_cast<const int*>(lens.get()),
             pa::ch05::kPartitionSize, 1, s);
  PA_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_TRUE(pa::test::exactly_equal(out.download(), x, pa::test::flat_dims(size_t(D))))
      << "a sequence of " << len << " tokens has one partition (max_logit " << m << ", exp_sum " << l
      << "): merge_partitions must return its partial_out unchanged, so that v2 equals v1 bit for bit. "
      << changed << " of these " << D << " values change when weighed and divided back, (l * x) / l: "
      << "one partition needs no weighing.";
}

}  // namespace
