#!/usr/bin/env python3
"""Marks a copy of the tree for the deep-ring experiment; performance work only (NOTES.md,
"ch11: a deeper ring on the 4-warp block").

    python3 tools/perf/deep_ring.py ROOT S     (then build ROOT; S = the 4-warp block's ring depth)
    PA_EXP_RG1_16BIT=1 bench_ch11 ...          (16-bit tiles of at most 32 rows on that block too)

The 4-warp block (BlockShape<1>: tiles of at most 32 rows, 32-key stages) gets a ring of S
stages instead of 2 and runs one block an SM when S > 2 (S = 5: 225,792 bytes), so S - 1
stages (36,864 bytes each) are in flight an SM where the 8-warp block has one of 73,728.
Fails loudly if the kernel no longer has the text it edits. It marks the tree of dfc133a
(session 43), where the experiment ran; the 4-warp block has changed since (v5-v8), so on a later
tree it stops at its first edit: mark an export of that commit (git archive dfc133a).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from marks import edit as mark  # noqa: E402

root, depth = sys.argv[1], int(sys.argv[2])


mark(root, "solutions/11-latent-attention/mla_kernel.cuh", [
    ("  static constexpr size_t kRingBytes = kStages * kStageBytes;",
     f"  static constexpr int kRing = RG == 1 ? {depth} : kStages;                   // EXPERIMENT\n"
     "  static constexpr int kPerSm = RG == 1 && kRing > 2 ? 1 : 3 - RG;\n"
     "  static constexpr size_t kRingBytes = kRing * kStageBytes;"),
    ("  static_assert((3 - RG) * (kSmemBytes + 1024) <= 228 * 1024,",
     "  static_assert(kPerSm * (kSmemBytes + 1024) <= 228 * 1024,"),
    ("  for (int st = 0; st < kStages - 1; ++st) issue(st);",
     "  for (int st = 0; st < B::kRing - 1; ++st) issue(st);"),
    ("      cp_async_wait<kStages - 2>();", "      cp_async_wait<B::kRing - 2>();"),
    ("      issue(st + kStages - 1);\n      kv = ring + (st % kStages) * kStageTokens * kRowWidth;",
     "      issue(st + B::kRing - 1);\n      kv = ring + (st % B::kRing) * kStageTokens * kRowWidth;"),
    ("      else copy_row(ring + (st % kStages) * kStageTokens * kRowWidth,",
     "      else copy_row(ring + (st % B::kRing) * kStageTokens * kRowWidth,"),
    ("__launch_bounds__(BlockShape<RG>::kThreads, 3 - RG) mla_decode_kernel",
     "__launch_bounds__(BlockShape<RG>::kThreads, BlockShape<RG>::kPerSm) mla_decode_kernel"),
])
mark(root, "solutions/11-latent-attention/mla_decode.cu", [
    ("#include <algorithm>\n", "#include <algorithm>\n#include <cstdlib>\n"),
    ("  return s.latent == LatentFormat::fp8_e4m3 && rows <= kSmallTileRows ? 1 : 2;",
     "  if (std::getenv(\"PA_EXP_RG1_16BIT\") && rows <= kSmallTileRows) return 1;  // EXPERIMENT\n"
     "  return s.latent == LatentFormat::fp8_e4m3 && rows <= kSmallTileRows ? 1 : 2;"),
])
print(f"deep_ring: {root} marked, the 4-warp block's ring {depth} deep")
