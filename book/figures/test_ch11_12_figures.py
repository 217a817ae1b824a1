"""Chapters 11 and 12's kernel figures (ch11.py: block shapes, key halves, the fp8 row;
ch12.py: the window mask) against the reference: the drawn boxes and cells, read back from
their places, are the kernel's (pa_ref.kernel_layouts), the fp8 row's offsets are pa_ref.mla's
and its bytes the reference quantizer's, and the drawn window mask is what
pa_ref.window.window_attention computes.

    .venv/bin/python -m pytest -q book/figures
"""

import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import figures  # noqa: E402  (puts reference/ on the path)
from pa_ref import kernel_layouts as kl  # noqa: E402
from pa_ref import hybrid, mla, reshape_and_cache, window  # noqa: E402

NAMES = ("mla-block-shapes", "mla-key-halves", "mla-fp8-row", "window-mask")


@pytest.fixture(scope="module")
def drawn(all_drawn):
    """This file's figures, from the session's drawing (conftest.py)."""
    return {name: all_drawn[name] for name in NAMES}


def fields(p):
    return tuple(int(v) for v in p.get_label().split(":"))


@pytest.mark.parametrize("name", sorted(kl.MLA_BLOCKS))
def test_block_shapes_are_the_kernels(drawn, name):
    _, info = drawn["mla-block-shapes"]
    ax = info["ax"]
    s = kl.ch11_block_shape(*kl.MLA_BLOCKS[name])
    assert info["shapes"][name] == s
    boxes = figures.tagged(ax, f"warp-{name}")
    assert len(boxes) == s["warps"]
    # Scale and origin from warp 0's box, whose rows and keys start at 0.
    w0 = next(p for p in boxes if fields(p)[0] == 0)
    r0, r1, k0, k1 = fields(w0)[1:]
    assert (r0, k0) == (0, 0)
    kx, ry = w0.get_width() / (k1 - k0), w0.get_height() / (r1 - r0)
    area = 0
    for p in boxes:
        w = fields(p)[0]
        rows = (int(round((p.get_y() - w0.get_y()) / ry)), int(round((p.get_y() + p.get_height() - w0.get_y()) / ry)))
        keys = (int(round((p.get_x() - w0.get_x()) / kx)), int(round((p.get_x() + p.get_width() - w0.get_x()) / kx)))
        want_rows, want_keys, _ = kl.ch11_warp_work(s, w)
        assert (rows, keys) == (want_rows, want_keys), (name, w)
        area += (rows[1] - rows[0]) * (keys[1] - keys[0])
    # The boxes tile the tile's rows x the stage's keys, none overlapping.
    assert area == s["tile_rows"] * s["stage_tokens"]
    empty = figures.tagged(ax, f"empty-{name}")
    if s["tile_rows"] > info["decode_rows"]:
        (e,) = empty
        assert fields(e) == (info["decode_rows"], s["tile_rows"])
        assert e.get_y() == pytest.approx(w0.get_y() + info["decode_rows"] * ry)
    else:
        assert empty == [] and name in ("key_halves", "queries_in_registers")
    runs = info["runs"][name]
    assert runs == {"eight_warps": "runs 33–64 rows", "eight_warps_queries_in_registers": "runs 17–32 rows",
                    "key_halves": "runs 1–16 rows, 16-bit", "queries_in_registers": "runs 1–16 rows, fp8",
                    "four_warps": "tests only"}[name]


def test_key_halves_split_every_stage(drawn):
    _, info = drawn["mla-key-halves"]
    ax, kv_end = info["ax"], info["kv_end"]
    assert info["halves"] == kl.ch11_key_halves(0, kv_end, 64)
    spans = [(rg,) + fields(p) for rg in range(2) for p in figures.tagged(ax, f"half-{rg}")]
    want = [(rg, st_i, a, b) for st_i, pair in enumerate(info["halves"]) for rg, (a, b) in enumerate(pair) if b > a]
    assert sorted(spans) == sorted(want)
    # Drawn to scale, end to end: every key of the chunk once.
    all_spans = sorted(figures.tagged(ax, "half-0") + figures.tagged(ax, "half-1"), key=lambda p: p.get_x())
    kx = all_spans[0].get_width() / (fields(all_spans[0])[2] - fields(all_spans[0])[1])
    for p, q in zip(all_spans, all_spans[1:]):
        assert p.get_x() + p.get_width() == pytest.approx(q.get_x())
        assert fields(p)[2] == fields(q)[1]
    assert sum(p.get_width() for p in all_spans) == pytest.approx(kx * kv_end)
    s = kl.ch11_block_shape(*kl.MLA_BLOCKS["key_halves"])
    assert sorted(fields(p) for p in figures.tagged(ax, "warp-keys")) == [
        (w,) + kl.ch11_warp_work(s, w)[1] for w in range(8)]
    assert [len(keys) for _, _, keys in info["states"]] == [96, 80]
    assert info["gap"] < 1e-12  # the caption's claim: the merge is the softmax over all keys


def test_fp8_row_is_the_references(drawn):
    _, info = drawn["mla-fp8-row"]
    ax, row = info["ax"], info["row"]
    assert row.shape == (mla.FP8_ROW_BYTES,)
    chunks = sorted(info["chunks"])
    assert [at for at, _, _ in chunks] == list(range(0, mla.FP8_ROW_BYTES, 16))
    for at, kind, who in chunks:
        want = "e4m3" if at < mla.FP8_SCALES_AT else "scale" if at < mla.FP8_ROPE_AT else "rope"
        assert kind == want
    # Which of the row's four threads converts each chunk: convert_raw's pieces.
    pieces = {at: my for my in range(4) for at, _, _ in kl.ch11_fp8_pieces(my)}
    drawn_who = {fields(p)[0]: fields(p)[1] for kind in ("e4m3", "rope") for p in figures.tagged(ax, f"chunk-{kind}")}
    assert drawn_who == pieces
    # To scale: every chunk as wide as the others, the scales a quarter of one each.
    cells = figures.tagged(ax, "chunk-e4m3") + figures.tagged(ax, "chunk-rope")
    cw = cells[0].get_width()
    assert all(p.get_width() == pytest.approx(cw) for p in cells)
    scales = figures.tagged(ax, "scale")
    assert sorted(fields(p) for p in scales) == [(mla.FP8_SCALES_AT + 4 * k, k) for k in range(mla.FP8_SCALES)]
    assert all(p.get_width() == pytest.approx(cw / 4) for p in scales)
    # The printed scales are the quantizer's, stored little-endian at the drawn offsets.
    want = mla.fp8_tile_scales(info["c_kv"])[0]
    for at, k, value in info["scales"]:
        assert value == np.frombuffer(row[at:at + 4].tobytes(), "<f4")[0] == want[k]


def test_window_mask_is_the_references(drawn):
    _, info = drawn["window-mask"]
    ax, W, L = info["ax"], info["window"], info["seq_len"]
    cells = {kind: {} for kind in ("seen", "left", "future")}
    for kind in cells:
        for p in figures.tagged(ax, kind):
            r, k = fields(p)
            cells[kind].setdefault(r, []).append(k)
    sinks = sorted(fields(p) for p in figures.tagged(ax, "sink"))
    assert sinks == [(row["row"], row["head"]) for row in info["rows"]]
    for row in info["rows"]:
        r, pos = row["row"], row["pos"]
        assert pos == L - info["new"] + row["token"] and r == row["token"] * info["group"] + row["head"]
        lo, hi = hybrid.visible_range(pos, W)
        assert sorted(cells["seen"][r]) == row["seen"] == list(range(window.first_key(pos, W), pos + 1))
        assert (lo, hi) == (row["seen"][0], row["seen"][-1])
        assert sorted(cells["left"].get(r, [])) == list(range(lo))
        assert sorted(cells["future"].get(r, [])) == list(range(pos + 1, L))
    # The pieces: the one no row sees is the one the kernel never loads.
    union = {k for row in info["rows"] for k in row["seen"]}
    for p0, p1, kind in info["pieces"]:
        assert (kind == "unread") == (not union & set(range(p0, p1)))
    assert [kind for _, _, kind in info["pieces"]] == ["unread", "cut", "causal"]


def test_window_mask_with_sinks_is_window_attention(drawn):
    # Attention over the drawn keys, with the head's sink in the denominator, is the
    # reference's window_attention for every row of the tile.
    _, info = drawn["window-mask"]
    W, L, G, n_new = info["window"], info["seq_len"], info["group"], info["new"]
    rng = np.random.default_rng(0)
    D, bs, x = 16, 16, 8
    blocks = -(-L // bs)
    k_pool = np.zeros((blocks, 1, D // x, bs, x))
    v_pool = np.zeros((blocks, 1, D, bs))
    k, v = rng.standard_normal((L, 1, D)), rng.standard_normal((L, 1, D))
    reshape_and_cache(k, v, k_pool, v_pool, np.arange(L))
    q = rng.standard_normal((n_new, G, D))
    sinks = np.array([0.7, -1.3])[:G]
    scale = 1 / np.sqrt(D)
    out = window.window_attention(q, k_pool, v_pool, np.arange(blocks)[None, :], [L], [0, n_new], scale,
                                  window=W, sinks=sinks)
    for row in info["rows"]:
        i, h, keys = row["token"], row["head"], row["seen"]
        s = scale * k[keys, 0] @ q[i, h]
        m = max(s.max(), sinks[h])
        e = np.exp(s - m)
        want = e @ v[keys, 0] / (np.exp(sinks[h] - m) + e.sum())
        np.testing.assert_allclose(out[i, h], want, atol=1e-12)
