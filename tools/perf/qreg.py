#!/usr/bin/env python3
"""Marks a copy of the tree for the Q-in-registers experiment; performance work only (NOTES.md,
"ch11: the 16-row tile's queries in registers").

    python3 tools/perf/qreg.py ROOT     (then build ROOT)

The 4-warp block (BlockShape<1>) takes tiles of at most 16 rows (one mma tile, kMT = 1: O is
64 registers a thread) and each warp holds its 16 query rows' A fragments for all 36 k-steps
in registers (144), loaded once an item after the first stage lands, so the scores read only
K from shared memory. The runner sends an fp8 pool's tiles of at most 16 rows to that block
(32-row fp8 tiles go to the 8-warp block); PA_EXP_RG1_16BIT=1 sends 16-bit ones too. Tests
that force 32-row tiles onto the 4-warp block fail in this build (by design of the experiment).
Fails loudly if the kernel no longer has the text it edits.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from marks import edit as mark  # noqa: E402

root = sys.argv[1]


mark(root, "solutions/11-latent-attention/mla_kernel.cuh", [
    ("  using B = BlockShape<RG>;\n",
     "  using B = BlockShape<RG>;\n  constexpr int kMT = RG == 1 ? 1 : 2;  // EXPERIMENT: mma tiles of rows a row group\n"
     "  constexpr bool kQReg = RG == 1;       // EXPERIMENT: Q's A fragments in registers\n"),
    ("  int token[2][2], head[2][2], pos[2][2];", "  int token[kMT][2], head[kMT][2], pos[kMT][2];"),
    ("  bool live[2];", "  bool live[2] = {false, false};"),
    ("  float o[2][kNTiles][4];", "  float o[kMT][kNTiles][4];\n  uint32_t qf[kQReg ? kKSteps : 1][4];  // EXPERIMENT"),
    ("  float m_run[2][2], l_run[2][2];", "  float m_run[kMT][2], l_run[kMT][2];"),
    ("    float sc[2][kJ][4];", "    float sc[kMT][kJ][4];"),
    ("      uint32_t kf[2][4], af[2][2][4];\n      const bool two = live[1];",
     "      uint32_t kf[2][4], af[2][kMT][4];\n      const bool two = kMT > 1 && live[1];"),
    ("        ldmatrix_x4(af[buf][0], qa[kk % 4] + 128 * (kk / 4));\n        if (two) ldmatrix_x4(af[buf][1],",
     "        if constexpr (!kQReg) ldmatrix_x4(af[buf][0], qa[kk % 4] + 128 * (kk / 4));\n"
     "        if constexpr (kMT > 1) if (two) ldmatrix_x4(af[buf][kMT - 1],"),
    ("      load(0, 0);\n",
     "      if constexpr (kQReg) {\n        if (st == 0) {\n#pragma unroll\n"
     "          for (int kk = 0; kk < kKSteps; ++kk) ldmatrix_x4(qf[kk], qa[kk % 4] + 128 * (kk / 4));\n"
     "        }\n      }\n      load(0, 0);\n"),
    ("        for (int j = 0; j < kJ; ++j) mma_16x8x16<T>(sc[0][j], af[kk % 2][0], b[j]);\n        if (two) {",
     "        for (int j = 0; j < kJ; ++j) mma_16x8x16<T>(sc[0][j], kQReg ? qf[kQReg ? kk : 0] : af[kk % 2][0], b[j]);\n"
     "        if constexpr (kMT > 1) if (two) {"),
    ("          for (int j = 0; j < kJ; ++j) mma_16x8x16<T>(sc[1][j], af[kk % 2][1], b[j]);",
     "          for (int j = 0; j < kJ; ++j) mma_16x8x16<T>(sc[kMT - 1][j], af[kk % 2][kMT - 1], b[j]);"),
    ("    float corr[2][2];", "    float corr[kMT][2];"),
    ("        uint32_t af[2][4];\n", "        uint32_t af[kMT][4];\n"),
], regex=[(r"mt < 2;", "mt < kMT;", 15)])
mark(root, "solutions/11-latent-attention/mla_decode.cu", [
    ("#include <algorithm>\n", "#include <algorithm>\n#include <cstdlib>\n"),
    ("  return s.latent == LatentFormat::fp8_e4m3 && rows <= kSmallTileRows ? 1 : 2;",
     "  if (rows > 16) return 2;  // EXPERIMENT: the 4-warp block takes one mma tile\n"
     "  if (std::getenv(\"PA_EXP_RG1_16BIT\")) return 1;\n"
     "  return s.latent == LatentFormat::fp8_e4m3 ? 1 : 2;"),
])
print(f"qreg: {root} marked")
