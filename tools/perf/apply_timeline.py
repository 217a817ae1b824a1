#!/usr/bin/env python3
"""Marks a copy of the tree for a per-block timeline (tools/perf/timeline.h); performance work only.

    python3 tools/perf/apply_timeline.py ROOT      (then build ROOT with -DCMAKE_CUDA_FLAGS=-DPA_TIMELINE)

Edits ROOT in place: include/pa/timeline.h, chapter 10's varlen_kernel and chapter 11's
mla_decode_kernel: start, first stage landed (a block's last item's; chapter 10's decode-warp items
have none: the start again), end, and chapter 10's prologue steps (in the dump). One launch in 16
then prints a line "TL <kernel> grid N | start ... | first stage ready ... | end min p10 p50 p90
max" (us from the first block's start); with -DPA_TIMELINE_DUMP too, then one "TLB" line a block
(its SM, each item's end, tokens and split, and the steps). Fails loudly if a kernel no longer has
the text it marks.
"""
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from marks import edit as mark  # noqa: E402

root = sys.argv[1]
here = os.path.dirname(os.path.abspath(__file__))
shutil.copy(os.path.join(here, "timeline.h"), os.path.join(root, "include/pa/timeline.h"))


mark(root, "solutions/11-latent-attention/mla_kernel.cuh", [
    ('#include "pa/mma.h"\n', '#include "pa/mma.h"\n#include "pa/timeline.h"\n'),
    ("  PA_DYNAMIC_SHARED(unsigned char, smem);\n  for (int k = 0; k < a.rounds; ++k) {",
     "  PA_DYNAMIC_SHARED(unsigned char, smem);\n  PA_TL_MARK(0);\n  PA_TL_MARK(1);\n"
     "  for (int k = 0; k < a.rounds; ++k) {"),
    ("    attend_item<T, kFp8, RG, MT, KH>(a, w, smem);\n  }\n}",
     '    attend_item<T, kFp8, RG, MT, KH>(a, w, smem);\n    PA_TL_ITEM(w);\n  }\n  PA_TL_FINISH(kFp8 ? "ch11-fp8" : "ch11");\n}'),
    ("    const int tok0 = w.kv_begin + st * kStageTokens + first_key;\n\n    // ANCHOR: q_frag",
     "    if (st == 0) PA_TL_MARK(1);\n    const int tok0 = w.kv_begin + st * kStageTokens + first_key;\n\n"
     "    // ANCHOR: q_frag"),
])
mark(root, "solutions/10-varlen-attention/varlen_kernel.cuh", [
    # The prologue's steps (PA_TL_AT: -DPA_TIMELINE_DUMP prints them): 3 the block's first item
    # loaded, 4 its sequence's query_start_loc and seq_lens, 5 the first stages' table entries
    # read and their copies issued.
    ("    if (w.seq < 0) break;  // an empty place: the block is done\n",
     "    if (w.seq < 0) break;  // an empty place: the block is done\n    PA_TL_AT(3, w.seq);\n"),
    ("  const int tile_rows = ch10::tile_rows(n_new, G, w.row0);\n",
     "  const int tile_rows = ch10::tile_rows(n_new, G, w.row0);\n  PA_TL_AT(4, seq_len + q_start + tile_rows);\n"),
    ("      fetch(i);\n      issue(i);\n    }\n    fetch(kStages - 1);\n",
     "      fetch(i);\n      issue(i);\n    }\n    PA_TL_AT(5, k_block[0]);\n    fetch(kStages - 1);\n"),
    ("      __syncthreads();  // tile's copies are visible; everyone is done with tile - 1's stage\n",
     "      __syncthreads();  // tile's copies are visible; everyone is done with tile - 1's stage\n"
     "      if (tile == 0) PA_TL_MARK(1);\n"),
    ('#include "pa/dependent_launch.h"', '#include "pa/dependent_launch.h"\n#include "pa/timeline.h"'),
    ("  pa::let_dependents_start();\n  PA_DYNAMIC_SHARED(unsigned char, smem);",
     "  pa::let_dependents_start();\n  PA_DYNAMIC_SHARED(unsigned char, smem);\n  PA_TL_MARK(0);\n  PA_TL_MARK(1);"),
    ("    attend_item<T, C, D, kStages, Mask>(a, w, smem, mask);\n  }\n}\n// ANCHOR_END: kernel",
     '    attend_item<T, C, D, kStages, Mask>(a, w, smem, mask);\n    PA_TL_ITEM(w);\n  }\n  PA_TL_FINISH("ch10");\n}\n'
     "// ANCHOR_END: kernel"),
])
print(f"apply_timeline: {root} marked (build with -DCMAKE_CUDA_FLAGS=-DPA_TIMELINE)")
