"""Chapter 1's figures and Appendix B's, read back from the drawn patches and checked against
the reference: the dense layout (work_maps.dense_offset), the kernel's warps and lanes
(dense_warp_tokens, dense_lane_dims), the online softmax and the merge (attention.online_softmax,
warp_softmax_states, merge_softmax_states, against decode_attention), and the stale table
(BlockManager, replayed here, and the demo's recorded output).

    .venv/bin/python -m pytest -q book/figures
"""

import re
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import figures  # noqa: E402  (puts reference/ on the path)
import style  # noqa: E402
from pa_ref import BlockManager, decode_attention, softmax  # noqa: E402
from pa_ref import work_maps as wm  # noqa: E402
from pa_ref.attention import online_softmax, warp_softmax_states  # noqa: E402
from pa_ref.paged import token_slot  # noqa: E402

NAMES = ["dense-slab", "dense-warps", "online-rescale", "warp-merge", "stale-table"]


@pytest.fixture(scope="module")
def drawn(all_drawn):
    """This file's figures, from the session's drawing (conftest.py)."""
    return {name: all_drawn[name] for name in NAMES}


def test_registered_and_legible(drawn):
    for name, (fig, _) in drawn.items():
        style.check_legible(fig)
        assert 7.5 <= fig.get_figwidth() <= 8.0, name


def test_dense_slab(drawn):
    fig, info = drawn["dense-slab"]
    ax, row = info["ax"], info["row"]
    B, L, H, D = info["shape"]
    assert row == H * D
    # The red cell is the element's offset in the row-major [B][L][Hkv][D] array.
    (x, y), = info["element_cell"]
    assert y * row + x == wm.dense_offset(*info["element"], L, H, D) == 139
    assert y * row + x == np.ravel_multi_index(info["element"], (B, L, H, D))
    # The written cells are exactly slots t < len of each sequence.
    for b, n in enumerate(info["context_lens"]):
        got = {int(round(p.get_y())) * row + int(round(p.get_x())) for p in figures.tagged(ax, f"written-{b}")}
        assert got == {wm.dense_offset(b, t, g, d, L, H, D) for t in range(n) for g in range(H)
                       for d in range(D)}
    n_written = sum(info["context_lens"]) * row
    assert len(figures.tagged(ax, "reserved")) == B * L * row - n_written
    # The outline covers what the kernel's thread block for (head, seq b) reads.
    b = info["element"][0]
    x0, y0, w, h = info["read_box"]
    box = {(y0 + r) * row + x0 + c for r in range(h) for c in range(w)}
    kv = wm.dense_kv_head(info["head"], info["num_q_heads"], H)
    assert box == {wm.dense_offset(b, t, kv, d, L, H, D) for t in range(info["context_lens"][b])
                   for d in range(D)}


def test_dense_warps(drawn):
    _, info = drawn["dense-warps"]
    n, D = info["context_len"], info["head_size"]
    assert info["tokens"] == sorted((w, t) for w in range(wm.DENSE_WARPS) for t in wm.dense_warp_tokens(w, n))
    assert sorted(t for _, t in info["tokens"]) == list(range(n))
    assert info["dims"] == sorted((lane, i, d) for lane in range(32)
                                  for i, d in enumerate(wm.dense_lane_dims(lane, D)))
    assert sorted(d for _, _, d in info["dims"]) == list(range(D))
    assert info["skipped"] == 32 * wm.dense_per_lane(D) - D == 16


def test_online_rescale(drawn):
    _, info = drawn["online-rescale"]
    s, v = info["scores"], info["values"]
    states = online_softmax(s, v)
    np.testing.assert_allclose(info["m_line"], np.maximum.accumulate(s))
    for key in ("l", "acc"):
        prev = 0.0
        for t, ((kept, new), st) in enumerate(zip(info["drawn"][key], states)):
            total = st[key] if key == "l" else st[key][0]
            assert np.isclose(kept, prev * st["c"])      # the old value, rescaled
            assert np.isclose(kept + new, total)         # plus the token's term
            assert np.isclose(new, st["p"] * (1 if key == "l" else v[t, 0]))
            prev = total
    assert info["grew"] == [t for t in range(1, len(s)) if s[t] > s[:t].max()]
    assert np.isclose(info["out"], softmax(s) @ v[:, 0])


def test_warp_merge(drawn):
    _, info = drawn["warp-merge"]
    s, n = info["scores"], info["context_len"]
    # The bars: each slot once, in its warp's colour group, at its score.
    assert [(w, t) for w, t, _ in info["bars"]] == sorted(
        (w, t) for w in range(4) for t in wm.dense_warp_tokens(w, n))
    for _, t, height in info["bars"]:
        assert np.isclose(height, s[t])
    m, l, _ = warp_softmax_states(s, np.zeros((n, 1)))
    np.testing.assert_allclose(info["m"], m)
    np.testing.assert_allclose(info["l"], l)
    assert info["M"] == s.max()
    # The drawn segments are l_w * exp(m_w - M), and they sum to L.
    for w, part in info["parts"]:
        assert np.isclose(part, l[w] * np.exp(m[w] - s.max()))
    assert np.isclose(sum(p for _, p in info["parts"]), info["L"])
    assert info["gap"] < 1e-15  # the caption says so
    np.testing.assert_allclose(info["out"], info["want"], atol=1e-14)
    assert info["empty_f"][3] == 0.0  # the caption's empty warp


def test_stale_table(drawn):
    _, info = drawn["stale-table"]
    bs, n = info["block_size"], info["length"]
    # Replay the demo on the reference manager.
    m = BlockManager(info["num_blocks"], bs)
    m.add_sequence(0)
    m.append_slots(0, n)
    kept = m.block_list(0)
    m.release(0)
    m.add_sequence(1)
    m.append_slots(1, n)
    assert info["kept"] == kept == [0, 1, 2] and info["seq1_blocks"] == m.block_list(1) == [2, 1, 0]
    # The C++ demo printed the same blocks (recorded on an H100 for Appendix B).
    recorded = (HERE.parent / "src" / "recorded" / "appendix_stale.txt").read_text()
    assert re.search(r"sequence 0: 40 tokens in blocks 0, 1, 2\b", recorded)
    assert "sequence 1 now owns blocks 2, 1, 0" in recorded
    # Each position of the stale read: the kept row's slot, holding sequence 1's token if it
    # wrote that slot, else sequence 0's (left in place).
    seq1 = {m.slot(1, p): p for p in range(n)}
    got = {}
    for b, o0, cnt, seq, tok in info["drawn"][3]:
        j = kept.index(b)
        for i in range(cnt):
            got[j * bs + o0 + i] = (seq, tok + i)
    want = {}
    for p in range(n):
        slot = token_slot(kept, p, bs)
        want[p] = (1, seq1[slot]) if slot in seq1 else (0, p)
    assert got == want
    assert info["theirs"] == sum(1 for s, _ in want.values() if s == 1) == 32 and info["ours"] == 8
    # Step 3 holds sequence 1's tokens where the manager put them.
    for b, o0, cnt, seq, tok in info["drawn"][2]:
        for i in range(cnt):
            if seq == 1:
                assert m.slot(1, tok + i) == b * bs + o0 + i
