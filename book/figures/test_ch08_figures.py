"""Chapter 8's figures show what the reference computes: the block lists, counts and copies of
forked sequences (pa_ref.cow), the prefix cache's chain hashes and hits (pa_ref.prefix_cache,
bit-exact with the C++ block_hash), and cascade attention's groups and merge (pa_ref.cascade).
Each value is read back from the drawn patches (ch08.py) and replayed here.

    .venv/bin/python -m pytest -q book/figures/test_ch08_figures.py
"""

import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import figures  # noqa: E402  (puts reference/ on the path)
import ch08  # noqa: E402
import style  # noqa: E402
import pa_ref  # noqa: E402
from pa_ref import cascade, prefix_cache  # noqa: E402


@pytest.fixture(scope="module")
def drawn(all_drawn):
    """This file's figures, from the session's drawing (conftest.py)."""
    return {name: all_drawn[name] for name in ("fork-sharing", "hash-chain", "cascade-merge")}


def test_the_figures_are_registered_legible_and_column_wide(drawn):
    assert figures.FIGURES["fork-sharing"] is ch08.fork_sharing
    for name, (fig, _) in drawn.items():
        style.check_legible(fig)
        assert 7.5 <= fig.get_figwidth() <= 8.0, name


def test_fork_sharing_replays_the_reference_manager(drawn):
    _, info = drawn["fork-sharing"]
    prompt_len, bs, num_blocks = info["args"]
    m = pa_ref.SharedBlockManager(num_blocks, bs)
    want = []

    def snap(copies=()):
        want.append({"lists": {s: m.block_list(s) for s in m.sequences()},
                     "pool": [m.refcount(b) for b in range(num_blocks)], "copies": list(copies)})

    m.add_sequence(0)
    m.append_slots(0, prompt_len)
    snap()
    m.fork(0, 1)
    m.fork(0, 2)
    snap()
    for s in (0, 1, 2):
        m.append_slots(s, 1)
    snap(m.take_copies())
    m.release(1)
    m.fork(0, 3)
    snap()
    for s in (0, 2, 3):
        m.append_slots(s, 1)
    snap(m.take_copies())
    stages = info["stages"]
    for got, w in zip(stages, want, strict=True):
        assert got["lists"] == w["lists"] and got["pool"] == w["pool"] and got["copies"] == w["copies"]
        # The red frames are the blocks of count > 1, and each frame shows its block's count.
        assert all(got["pool"][b] == rc for b, rc in got["rc"].items())
    # What the page says the figure shows: the fork copies nothing, the first writes copy the
    # shared partial tail n - 1 = 2 times, the full block 0 stays shared, the dead beam frees
    # only its private tail, and the next write into the re-shared tail copies once.
    assert stages[1]["copies"] == [] and len(stages[2]["copies"]) == 2
    assert all(src == 1 for src, _ in stages[2]["copies"]) and stages[2]["lists"][2] == [0, 1]
    assert [s["pool"][0] for s in stages] == [1, 3, 3, 3, 3]
    assert stages[3]["freed"] == [3] and stages[3]["pool"][0] == 3
    assert len(stages[4]["copies"]) == 1 and stages[4]["lists"][3] == stages[3]["lists"][0]


def test_hash_chain_is_the_reference_chain_and_lookup(drawn):
    _, info = drawn["hash-chain"]
    a, b, bs = info["a"], info["b"], info["block_size"]
    assert info["hashes"]["A"] == prefix_cache.chain_hashes(a, bs)
    assert info["hashes"]["B"] == prefix_cache.chain_hashes(b, bs)
    h = prefix_cache.ROOT_HASH
    for i, drawn_hash in enumerate(info["hashes"]["B"]):  # each link hashes its parent and its tokens
        h = prefix_cache.block_hash(h, b[i * bs:(i + 1) * bs])
        assert drawn_hash == h
    # The cache holds A's four full blocks; B hits the first two, misses the third and stops.
    cache = prefix_cache.PrefixCache(bs)
    cache.commit([info["cached"][i] for i in range(len(a) // bs)], a, len(a))
    assert info["hit"] == cache.match_prefix(b, len(b) - 1) == [info["cached"][0], info["cached"][1]]
    assert info["status"] == ["hit", "hit", "miss", "unread"]
    # B's last full block holds A's tokens there, and still is another block: the chain.
    assert info["same_tokens_other_hash"] == [3]
    assert b[3 * bs:4 * bs] == a[3 * bs:4 * bs] and info["hashes"]["B"][3] != info["hashes"]["A"][3]


def test_cascade_merge_is_the_reference_plan_and_merge(drawn):
    _, info = drawn["cascade-merge"]
    table, lens, bs = info["table"], info["lens"], info["block_size"]
    groups, prefix_lens = cascade.plan_cascade(table, lens, bs)
    assert groups == [([0, 1, 2], 12)]
    for s in range(len(lens)):  # the pink (prefix) cells are the planner's prefix, per sequence
        n = int(prefix_lens[s]) // bs
        assert info["prefix"][s] == [int(v) for v in table[s, :n]]
        assert info["suffix"][s] == [int(v) for v in table[s, n:-(-int(lens[s]) // bs)]]
    per_seq, read = info["reads"]
    assert per_seq == sum(len(info["prefix"][s]) + len(info["suffix"][s]) for s in range(len(lens))) == 15
    assert read == len(info["prefix"][0]) + sum(len(v) for v in info["suffix"].values()) == 9
    # The drawn weights are the merge's, the bar is split by them, and merging the two
    # partial states gives sequence 0's row of the cascade output, equal to plain attention.
    m, l, w = info["m"], info["l"], info["w"]
    np.testing.assert_allclose(w, l * np.exp(m - m.max()), rtol=1e-15)
    np.testing.assert_allclose(info["bar_share"], w / w.sum(), rtol=1e-12)
    np.testing.assert_allclose(info["merged"], info["out"][0, 0], atol=1e-12)
    np.testing.assert_allclose(info["out"], info["ref"], atol=1e-12)
    assert info["gap"] < 1e-12
