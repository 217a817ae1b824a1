// What happens when the block table lies (the debugging appendix runs this).
//   usage: lying_block_table checked|out-of-range|stale
// checked:      the host API's checked mode refuses an out-of-range block id.
// out-of-range: the same table, uploaded unchecked: the kernel reads outside the pool.
//               Run it under compute-sanitizer on a GPU to see the read reported.
// stale:        a block that was freed and handed to another sequence: every id is in
//               range, nothing crashes, and the answer is silently wrong.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "pa/ch04_paged_attention.h"
#include "pa/dtype.h"

namespace {

using pa::half;

constexpr int kBlocks = 64, kBs = 16, kHkv = 2, kHq = 4, kD = 64;
const size_t kRow = size_t(kHkv) * kD;

struct World {
  pa::ch02::PoolShape ps{kBlocks, kBs, kHkv, kD};
  pa::ch02::KVPool<half> pool{ps};
  pa::ch03::BlockManager manager{kBlocks, kBs};
  std::mt19937 rng{1};

  // Appends n random tokens to seq and writes them to the pool; returns the metadata.
  pa::ch03::BatchMetadata append(int seq, int n) {
    pa::ch03::BatchMetadata md = pa::ch03::build_batch(manager, {seq}, {n});
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<half> k(n * kRow), v(n * kRow);
    for (auto& e : k) e = pa::from_float<half>(normal(rng));
    for (auto& e : v) e = pa::from_float<half>(normal(rng));
    pa::DeviceBuffer<half> dk(k), dv(v);
    pa::DeviceBuffer<int64_t> slots(md.slot_mapping);
    pa::ch02::reshape_and_cache<half>(ps, dk.get(), dv.get(), n, pool.k.get(), pool.v.get(), slots.get());
    return md;
  }

  // v1 on the table as given, unchecked; returns the output.
  std::vector<half> attend(const std::vector<int>& table, int len, int max_blocks) {
    const pa::ch04::PagedAttentionShape s{1, kHq, kHkv, kD, kBs, kBlocks, max_blocks};
    std::vector<half> hq(kHq * kD, pa::from_float<half>(0.5f));
    pa::DeviceBuffer<half> q(hq), out(hq.size());
    pa::DeviceBuffer<int> t(table), l(std::vector<int>{len});
    pa::ch04::paged_attention_v1<half>(s, out.get(), q.get(), pool.k.get(), pool.v.get(), t.get(),
                                       l.get(), 0.125f);
    PA_CUDA_CHECK(cudaDeviceSynchronize());
    return out.download();
  }
};

void summarize(const char* what, const std::vector<half>& out) {
  int nans = 0;
  double mx = 0;
  for (const half& e : out) {
    const float f = pa::to_float(e);
    if (std::isnan(f)) ++nans;
    else mx = std::max(mx, double(std::fabs(f)));
  }
  std::printf("%s: %d of %zu outputs are NaN, largest |finite output| %.3f\n", what, nans,
              out.size(), mx);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "checked" && mode != "out-of-range" && mode != "stale") {
    std::fprintf(stderr, "usage: lying_block_table checked|out-of-range|stale\n");
    return 2;
  }
  try {
    World w;
    w.manager.add_sequence(0);
    pa::ch03::BatchMetadata md = w.append(0, 40);  // 3 blocks: 16 + 16 + 8 tokens
    std::printf("sequence 0: %d tokens in blocks %d, %d, %d\n", md.context_lens[0],
                md.block_table[0], md.block_table[1], md.block_table[2]);
    if (mode == "checked") {
      md.block_table[1] = 100000;  // the lie: a block the pool does not have
      std::printf("block_table[0][1] := 100000, then the checked upload:\n");
      pa::ch04::DeviceBatch batch(md, kBlocks, kBs);  // throws
      std::printf("(not reached)\n");
    } else if (mode == "out-of-range") {
      std::vector<int> table(md.block_table.begin(), md.block_table.end());
      table[1] = 100000;
      std::printf("block_table[0][1] := 100000, uploaded unchecked, then v1:\n");
      summarize("v1", w.attend(table, 40, 3));
    } else {
      const std::vector<int> old_table(md.block_table.begin(), md.block_table.end());
      const std::vector<half> before = w.attend(old_table, 40, 3);
      w.manager.release(0);  // its blocks go back to the free list...
      w.manager.add_sequence(1);
      w.append(1, 40);       // ...and sequence 1 gets them, and writes its own K and V there
      std::printf("sequence 0 released; sequence 1 now owns blocks %d, %d, %d\n",
                  w.manager.block_list(1)[0], w.manager.block_list(1)[1], w.manager.block_list(1)[2]);
      const std::vector<half> after = w.attend(old_table, 40, 3);  // the stale table
      double diff = 0;
      for (size_t i = 0; i < after.size(); ++i)
        diff = std::max(diff, double(std::fabs(pa::to_float(after[i]) - pa::to_float(before[i]))));
      summarize("v1 with the stale table", after);
      std::printf("max |change| from sequence 0's true answer: %.3f (no error anywhere)\n", diff);
    }
  } catch (const std::exception& e) {
    std::printf("pa::Error: %s\n", e.what());
    return 1;
  }
  return 0;
}
