// Chapter 10: a plan laid out for the kernel, item k of thread block c at [k * grid + c]. Host
// code with no kernel in it, so that a chapter that plans with chapter 10 (chapter 11's
// latent decode) links it without compiling chapter 10's kernels.
#include <algorithm>

#include "pa/ch10_varlen.h"

namespace pa::ch10 {

std::vector<WorkItem> items_by_rounds(const Plan& plan, int* rounds) {
  PA_REQUIRE(plan.grid >= 1 && plan.cta_start.size() == size_t(plan.grid) + 1 &&
                 plan.cta_start.front() == 0 && plan.cta_start.back() == int(plan.items.size()),
             "use_plan: cta_start must have grid + 1 entries, from 0 to the number of items");
  const size_t g = size_t(plan.grid);
  *rounds = 0;
  for (size_t c = 0; c < g; ++c) *rounds = std::max(*rounds, plan.cta_start[c + 1] - plan.cta_start[c]);
  std::vector<WorkItem> out(size_t(*rounds) * g, WorkItem{-1, 0, 0, 0, 0, 0, 1, 0, -1, 0});
  for (size_t c = 0; c < g; ++c)
    for (int i = plan.cta_start[c]; i < plan.cta_start[c + 1]; ++i)
      out[size_t(i - plan.cta_start[c]) * g + c] = plan.items[size_t(i)];
  return out;
}

}  // namespace pa::ch10
