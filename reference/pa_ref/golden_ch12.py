"""Chapter 12's golden cases: which blocks a sliding window still needs (hybrid.py).

first_needed case: hybrid.first_needed_block over a grid, flattened:
    window, block_size, next_pos, expect  int32 [N]   (window 0: a full layer)
held_bs<B>_w<W> cases: one sequence grown by a script of appends in one layer group:
    chunks               int32 [N]   tokens appended by each append_slots
    expect_after_append  int32 [N]   blocks the group holds right after the append: it first
                                     freed what the step's queries (from the old length on)
                                     cannot see, then took the new blocks
    expect_after_free    int32 [N]   after free_dead_blocks at the new length:
                                     hybrid.blocks_held(length, window, block_size)
  params: window (0 = full), block_size
prefix_hit case: hybrid.prefix_hit_blocks on random caches, K instances of 3 groups:
    windows    int32 [K, 3]      0 = a full group
    block_size, max_blocks, expect  int32 [K]
    cached     int32 [K, 3, 12]  1 where block i of the prefix is cached in group g
gemma3_32k case: the Gemma-3-like accounting of test_hybrid.py:
    windows int32 [6]  five sliding layers of 1,024 and one full (0)
  params: length 32768, block_size 16, full_blocks (every layer full), hybrid_blocks
win_<dtype>_d<D>_bs<BS>_g<G>_<tag> cases: the window kernel (window.py) on a varlen batch:
    q [T, Hq, D], k_pool, v_pool (chapter 2's layouts; block 0 is the null block, all NaN),
    block_table [B, M] (the entries no row of the step sees, and the padding, are 0),
    seq_lens, query_start_loc, scale, sinks [Hq] (with sinks), expected [T, Hq, D] float64
  params: window, sinks (0/1), softcap (0: none), atol, rtol, note
"""

from dataclasses import dataclass

import numpy as np

from . import hybrid
from .dtypes import round_to
from .golden_ch04 import random_paged_cache
from .golden_io import TOLERANCES, case_seed, write_case
from .paged import blocks_for, pack_x
from .window import first_key, window_attention


def _window(w):
    return None if w == 0 else w


def _blocks(length, block_size):
    return -(-length // block_size)


def chapter_12(out):
    rows = [(w, bs, p, hybrid.first_needed_block(p, _window(w), bs))
            for bs in (8, 16, 32) for w in (0, 1, 2, 7, 8, 9, 16, 17, 31, 32, 33, 100)
            for p in range(0, 4 * 32 + 3)]
    cols = np.array(rows, dtype=np.int32).T
    write_case(out / "first_needed", {"window": cols[0], "block_size": cols[1], "next_pos": cols[2],
                                      "expect": cols[3]}, {"cases": len(rows)})

    for bs, w in [(8, 0), (8, 1), (8, 8), (8, 9), (16, 7), (16, 16), (16, 33), (16, 1000), (32, 31)]:
        name = f"held_bs{bs}_w{w}"
        rng = np.random.default_rng(case_seed(name))
        # Decode steps (1) mixed with prefill chunks, some a block long, some not.
        chunks = [int(c) for c in rng.choice([0, 1, 1, 1, 2, bs - 1, bs, bs + 1, 3 * bs + 5], size=60)]
        after_append, after_free, length = [], [], 0
        for n in chunks:
            dead = min(hybrid.first_needed_block(length, _window(w), bs), _blocks(length, bs))
            length += n
            after_append.append(_blocks(length, bs) - dead)
            after_free.append(hybrid.blocks_held(length, _window(w), bs))
        write_case(out / name, {"chunks": np.array(chunks, dtype=np.int32),
                                "expect_after_append": np.array(after_append, dtype=np.int32),
                                "expect_after_free": np.array(after_free, dtype=np.int32)},
                   {"window": w, "block_size": bs})

    rng = np.random.default_rng(case_seed("prefix_hit"))
    inst = []
    for k in range(400):
        bs = int(rng.choice([4, 8]))
        windows = [int(rng.choice([0, 0, 1, 3, 4, 5, 8, 9, 17])) for _ in range(3)]
        cached = (rng.random((3, 12)) < rng.choice([0.6, 0.85, 0.95])).astype(np.int32)
        max_blocks = int(rng.choice([12, 12, 12, 5, 0, 20]))
        want = hybrid.prefix_hit_blocks([list(map(bool, c)) for c in cached], [_window(w) for w in windows],
                                        bs, max_blocks)
        inst.append((windows, bs, max_blocks, cached, want))
    write_case(out / "prefix_hit", {
        "windows": np.array([i[0] for i in inst], dtype=np.int32),
        "block_size": np.array([i[1] for i in inst], dtype=np.int32),
        "max_blocks": np.array([i[2] for i in inst], dtype=np.int32),
        "cached": np.array([i[3] for i in inst], dtype=np.int32),
        "expect": np.array([i[4] for i in inst], dtype=np.int32)}, {"instances": len(inst)})

    windows = [1024] * 5 + [0]
    length, bs = 32768, 16
    write_case(out / "gemma3_32k", {"windows": np.array(windows, dtype=np.int32)},
               {"length": length, "block_size": bs,
                "full_blocks": hybrid.hybrid_kv_blocks(length, bs, [None] * len(windows)),
                "hybrid_blocks": hybrid.hybrid_kv_blocks(length, bs, [_window(w) for w in windows])})
    window_cases(out)  # the window kernel's cases (window.py)


@dataclass(frozen=True)
class WindowCase:
    """One ragged batch for the window kernel: per sequence, the tokens cached and the new."""

    name: str
    dtype: str
    head_size: int
    block_size: int
    num_heads: int
    num_kv_heads: int
    prefix_lens: tuple
    new_lens: tuple
    window: int
    sinks: bool
    softcap: float  # 0: none
    note: str


W = WindowCase

# Small for the CPU emulator. Positions are chosen so the first key of some row falls on a
# block edge, inside a block, and (a window wider than the sequence) at 0.
CH12_WINDOW = [
    W("win_fp16_d128_bs16_g4_decode_edges", "fp16", 128, 16, 8, 2, (0, 14, 31, 47, 63, 100, 150),
      (1,) * 7, 32, True, 0.0,
      "decodes, window 32 (two blocks): first keys 0, 0, 0, 16 and 32 (block edges), 69 and 119"),
    W("win_bf16_d64_bs8_g2_decode_inside", "bf16", 64, 8, 4, 2, (5, 9, 40, 77, 130), (1,) * 5, 20,
      False, 0.0, "bf16 decodes, 8-token blocks, window 20: first keys inside blocks (21, 58, 111)"),
    W("win_fp16_d64_bs16_g4_prefill", "fp16", 64, 16, 8, 2, (0, 37, 5), (70, 45, 20), 50, True, 0.0,
      "prefill chunks, window 50, sinks; sequence 2 (25 tokens) is shorter than the window"),
    W("win_bf16_d128_bs32_g1_mixed_softcap", "bf16", 128, 32, 4, 4, (100, 0, 300, 64), (1, 33, 5, 1),
      64, True, 1.5, "mixed step, 32-token blocks, window 64 (two blocks), sinks and soft-cap 1.5"),
    W("win_fp16_d128_bs16_g8_wide", "fp16", 128, 16, 8, 1, (10, 200), (1, 16), 4096, True, 0.0,
      "a window wider than every sequence: full attention with sinks"),
    W("win_fp16_d96_bs8_g2_window1", "fp16", 96, 8, 4, 2, (0, 9, 20), (1, 3, 12), 1, False, 0.0,
      "window 1: every row sees its own key only"),
    W("win_bf16_d256_bs16_g2_softcap", "bf16", 256, 16, 4, 2, (40,), (24,), 33, False, 2.0,
      "head size 256 (32-token stages), window 33, soft-cap 2 without sinks"),
]


def window_arrays(case):
    """Inputs with block 0 the NaN null block and every entry no row sees pointing at it."""
    rng = np.random.default_rng(case_seed(case.name))
    bs, hkv, d = case.block_size, case.num_kv_heads, case.head_size
    seq_lens = np.array([p + n for p, n in zip(case.prefix_lens, case.new_lens)], dtype=np.int32)
    query_start_loc = np.concatenate([[0], np.cumsum(case.new_lens)]).astype(np.int32)
    needed = [blocks_for(int(n), bs) for n in seq_lens]
    width = max(needed) + 1
    table, _, k_pool, v_pool = random_paged_cache(
        rng, sum(needed) + 4, width, needed, seq_lens, hkv, d, bs, pack_x(case.dtype), case.dtype)
    # Block 0 becomes the null block: the others move up by one.
    k_pool = np.concatenate([np.full((1,) + k_pool.shape[1:], np.nan), k_pool])
    v_pool = np.concatenate([np.full((1,) + v_pool.shape[1:], np.nan), v_pool])
    table = np.where(table >= 0, table + 1, 0).astype(np.int32)
    for b, (prefix, n) in enumerate(zip(case.prefix_lens, case.new_lens)):
        dead = first_key(prefix, case.window) // bs if n else 0  # the step's earliest window
        for j in range(dead):  # given back by the manager: NaN, and the entry is the null block
            k_pool[table[b, j]] = np.nan
            v_pool[table[b, j]] = np.nan
            table[b, j] = 0
    q = round_to(rng.standard_normal((int(query_start_loc[-1]), case.num_heads, d)), case.dtype)
    scale = 1.0 / np.sqrt(d)
    sinks = (rng.normal(1.0, 1.5, case.num_heads).astype(np.float32).astype(np.float64)
             if case.sinks else None)
    arrays = {"q": q.astype(np.float32), "k_pool": k_pool.astype(np.float32),
              "v_pool": v_pool.astype(np.float32), "block_table": table, "seq_lens": seq_lens,
              "query_start_loc": query_start_loc, "scale": np.array(scale, dtype=np.float64),
              "expected": window_attention(q, k_pool, v_pool, table, seq_lens, query_start_loc, scale,
                                           window=case.window, sinks=sinks,
                                           softcap=case.softcap or None)}
    if case.sinks:
        arrays["sinks"] = sinks.astype(np.float32)
    return arrays


def window_params(case):
    atol, rtol = TOLERANCES[case.dtype]
    return {"kind": "window_attention", "dtype": case.dtype, "window": case.window,
            "sinks": int(case.sinks), "softcap": case.softcap, "atol": atol, "rtol": rtol,
            "prefix_lens": ",".join(map(str, case.prefix_lens)),
            "new_lens": ",".join(map(str, case.new_lens)), "note": case.note}


def window_cases(out):
    for case in CH12_WINDOW:
        write_case(out / case.name, window_arrays(case), window_params(case))
