#!/usr/bin/env python3
"""Marks a copy of the tree so that bench_ch11 can replace its plan by contiguous shares;
performance work only (NOTES.md, "session 38" and "ch11: streaming across items").

    python3 tools/perf/contiguous_plan.py ROOT    (then build ROOT's bench_ch11)
    PA_EXP_CONTIG=64 bench_ch11 ...               (shares cut on 64-token stages; 1: anywhere)

Every tile whole, in tile order, cut into `grid` equal token shares: thread block c runs the
pieces of share c (the tail of one tile, then the head of the next). The plan goes to the
kernel through MlaDecode::use_plan; the bench checks the outputs as it does for its own plan.
"""
import sys
root = sys.argv[1]
p = root + "/bench/bench_ch11.cu"
s = open(p).read()
helper = r'''
// EXPERIMENT (not committed): every tile whole in tile order, cut into `grid` equal token
// shares; thread block c runs the pieces of share c (at most two items when tiles are long).
pa::ch10::Plan contiguous_plan(const m::MlaShape& s, const std::vector<int>& lens,
                               const std::vector<int>& qsl, int grid, int align) {
  const pa::ch10::Plan whole = pa::ch10::make_plan(m::planning_shape(s), lens, qsl, 1, 0);
  long long total = 0;
  for (const auto& t : whole.items) total += t.kv_end - t.kv_begin;
  std::vector<long long> cut(grid + 1);
  for (int c = 0; c <= grid; ++c) cut[c] = (total * c / grid) / align * align;
  cut[grid] = total;
  pa::ch10::Plan plan;
  plan.grid = grid;
  std::vector<std::vector<pa::ch10::WorkItem>> per(grid);
  long long off = 0;
  for (const auto& t : whole.items) {
    const long long b = off, e = off + (t.kv_end - t.kv_begin);
    std::vector<std::pair<int, std::pair<int, int>>> pieces;  // (cta, [begin, end))
    for (int c = 0; c < grid; ++c) {
      const long long lo = std::max(b, cut[c]), hi = std::min(e, cut[c + 1]);
      if (lo < hi) pieces.push_back({c, {int(t.kv_begin + lo - b), int(t.kv_begin + hi - b)}});
    }
    const int splits = int(pieces.size());
    const int counter = splits > 1 ? plan.num_counters++ : -1;
    const int base = int(plan.partial_rows);
    if (splits > 1) plan.partial_rows += int64_t(pa::ch10::kTileRows) * splits;
    for (int p = 0; p < splits; ++p)
      per[pieces[p].first].push_back({t.seq, 0, t.row0, pieces[p].second.first, pieces[p].second.second,
                                      p, splits, base, counter, 0});
    off = e;
  }
  plan.cta_start.assign(grid + 1, 0);
  for (int c = 0; c < grid; ++c) {
    plan.cta_start[c + 1] = plan.cta_start[c] + int(per[c].size());
    for (auto& w : per[c]) plan.items.push_back(w);
  }
  return plan;
}
'''
s = s.replace("namespace m = pa::ch11;\n", "namespace m = pa::ch11;\n" + helper, 1)
old = "      dec.plan(s, pa::DType::bf16, c.lens, qsl);\n"
assert old in s
s = s.replace(old, old + '''      if (const char* e = std::getenv("PA_EXP_CONTIG")) {
        const int grid = dec.host_plan().grid;
        dec.use_plan(s, pa::DType::bf16, contiguous_plan(s, c.lens, qsl, grid, std::atoi(e)), nullptr, qsl);
        std::printf("(contiguous plan: %zu items on %d blocks, align %d)\\n", dec.host_plan().items.size(), grid, std::atoi(e));
      }
''', 1)
s = s.replace("#include <cstring>\n", "#include <cstring>\n#include <cstdlib>\n", 1)
open(p, "w").write(s)
print("contig patch applied")
