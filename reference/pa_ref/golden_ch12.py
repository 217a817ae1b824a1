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
gemma3_32k case: the Gemma-3-like accounting of test_hybrid.py:
    windows int32 [6]  five sliding layers of 1,024 and one full (0)
  params: length 32768, block_size 16, full_blocks (every layer full), hybrid_blocks
"""

import numpy as np

from . import hybrid
from .golden_io import case_seed, write_case


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

    windows = [1024] * 5 + [0]
    length, bs = 32768, 16
    write_case(out / "gemma3_32k", {"windows": np.array(windows, dtype=np.int32)},
               {"length": length, "block_size": bs,
                "full_blocks": hybrid.hybrid_kv_blocks(length, bs, [None] * len(windows)),
                "hybrid_blocks": hybrid.hybrid_kv_blocks(length, bs, [_window(w) for w in windows])})
