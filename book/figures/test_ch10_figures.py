"""Chapter 10's kernel figures (ch10.py) against the reference: every cell is read back from
the drawn patches (its place on the page, not only its label) and checked against
pa_ref.kernel_layouts (the kernel's swizzle, copies and token order) and pa_ref.work_maps
(the mma fragments).

    .venv/bin/python -m pytest -q book/figures
"""

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import figures  # noqa: E402  (puts reference/ on the path)
from pa_ref import kernel_layouts as kl  # noqa: E402
from pa_ref import work_maps as wm  # noqa: E402


@pytest.fixture(scope="module")
def drawn(all_drawn):
    """This file's figures, from the session's drawing (conftest.py)."""
    return {name: all_drawn[name] for name in ("varlen-ring", "varlen-p-registers")}


def grid_of(patches):
    """(label fields, column, row) of equal cells, from their places: the grid's origin is its
    top-left cell."""
    x0, y0 = min(p.get_x() for p in patches), min(p.get_y() for p in patches)
    w, h = patches[0].get_width(), patches[0].get_height()
    return [(tuple(int(v) for v in p.get_label().split(":")), int(round((p.get_x() - x0) / w)),
             int(round((p.get_y() - y0) / h))) for p in patches]


def test_ring_is_the_kernels_stages(drawn):
    fig, info = drawn["varlen-ring"]
    ax, lay = info["ax"], kl.ch10_stage_layout(2, 128)
    assert info["stages"] == kl.ch10_stages(2, 128) == 3 and info["layout"] == lay
    stages = figures.tagged(ax, "stage")
    assert len(stages) == info["stages"]
    kb = stages[0].get_width() / lay["bytes"]  # drawn width per byte, the same for every part
    k = figures.tagged(ax, "k-chunk")
    assert len(k) == info["stages"] * lay["chunks"]
    for p in k:
        s, c, warp = (int(v) for v in p.get_label().split(":"))
        assert warp == kl.ch10_k_copier(c, 0)[0] == c % 4
        assert p.get_width() == pytest.approx(kb * lay["tokens"] * 16)
        assert p.get_x() == pytest.approx(stages[s].get_x() + c * kb * lay["tokens"] * 16)
    v = figures.tagged(ax, "v-half")
    assert len(v) == info["stages"] * lay["halves"]
    assert sum(p.get_width() for p in v) == pytest.approx(kb * info["stages"] * lay["v_bytes"])
    (unused,) = figures.tagged(ax, "unused")
    assert unused.get_width() == pytest.approx(kb * (kl.CH10_RING_BUDGET - 3 * lay["bytes"]))


@pytest.mark.parametrize("name,swizzle", [("plain", False), ("swizzled", True)])
def test_ring_cells_are_the_swizzle(drawn, name, swizzle):
    _, info = drawn["varlen-ring"]
    ax, tokens = info["ax"], info["layout"]["tokens"]
    cells = grid_of(figures.tagged(ax, f"cell-{name}"))
    assert sorted((col, row) for _, col, row in cells) == [(s, c) for s in range(8) for c in range(8)]
    for (c, slot, t), col, row in cells:
        assert (c, slot) == (row, col)
        assert kl.ch10_k_unit(c, t, tokens, swizzle) == c * tokens + slot
    # The outlined reads: lanes 0-7 of the first score product, where the kernel reads them.
    grid = figures.tagged(ax, f"cell-{name}")
    x0, y0 = min(p.get_x() for p in grid), min(p.get_y() for p in grid)
    w, h = grid[0].get_width(), grid[0].get_height()
    reads = {int(p.get_label().split(":")[0]): (int(round((p.get_y() - y0) / h)), int(round((p.get_x() - x0) / w)))
             for p in figures.tagged(ax, f"read-{name}")}
    units = []
    for lane in range(8):
        c, t = kl.ch10_score_read(lane, 0, 0)
        unit = kl.ch10_k_unit(c, t, tokens, swizzle)
        assert reads[lane] == (c, unit - c * tokens)
        units.append(unit)
    counts = sorted((tuple(int(v) for v in p.get_label().split(":")) for p in figures.tagged(ax, f"count-{name}")))
    assert counts == [(b, sum(kl.bank_group(u) == b for u in units)) for b in range(8)]
    assert info["passes"][name] == kl.passes(units) == (1 if swizzle else 4)


def test_p_goes_straight_down(drawn):
    _, info = drawn["varlen-p-registers"]
    ax = info["ax"]
    s_cells = {round(p.get_x(), 6): tuple(int(v) for v in p.get_label().split(":")) for p in figures.tagged(ax, "s")}
    a_cells = {round(p.get_x(), 6): tuple(int(v) for v in p.get_label().split(":")) for p in figures.tagged(ax, "a")}
    assert len(s_cells) == len(a_cells) == 16
    for q, n, tok, t in s_cells.values():
        assert tok == kl.ch10_score_token(q, n)
        assert all(any(wm.mma_c_element(4 * g + t, i)[1] == n for i in range(2)) for g in range(8))
    for k, tok, t in a_cells.values():
        assert tok == kl.ch10_pv_token(k)
        assert all(any(wm.mma_a_element(4 * g + t, i) == (g, k) for i in range(8)) for g in range(8))
    # Each A slot sits under the score column whose accumulator it is: same token, same lane.
    assert set(s_cells) == set(a_cells)
    for x, (q, n, tok, t) in s_cells.items():
        k, tok_a, t_a = a_cells[x]
        assert (k, tok_a, t_a) == (8 * q + n, tok, t)
    # The arrows of the lane shown: its own accumulators, register by register.
    lane = info["lane"]
    for q, n, k in info["arrows"]:
        assert k == 8 * q + n and n // 2 == lane % 4


def test_any_token_order_keeps_p_in_registers():
    # The claim at the figure's foot: a_i is accumulator c of product q of the same lane, and
    # sits at column 8 q + (its column in C) -- whatever token each column stands for.
    for lane in range(32):
        for i in range(8):
            q, c = kl.ch10_pv_a_from_scores(i)
            row_c, col_c = wm.mma_c_element(lane, c)
            assert wm.mma_a_element(lane, i) == (row_c, 8 * q + col_c)


def test_v_reads_are_four_consecutive_tokens(drawn):
    _, info = drawn["varlen-p-registers"]
    ax = info["ax"]
    v = sorted(tuple(int(s) for s in p.get_label().split(":")) for p in figures.tagged(ax, "v"))
    assert v == [(tok, tok // 4) for tok in range(16)]
    for t in range(4):
        assert [tok for tok, lt in v if lt == t] == kl.ch10_v_tokens(t)
        want = [kl.ch10_pv_token(wm.mma_b_element(t, i)[0]) for i in range(4)]
        assert want == kl.ch10_v_tokens(t)
    plain = sorted(tuple(int(s) for s in p.get_label().split(":")) for p in figures.tagged(ax, "natural"))
    for t in range(4):
        assert [tok for tok, lt in plain if lt == t] == sorted(wm.mma_b_element(t, i)[0] for i in range(4))
