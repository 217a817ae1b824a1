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
