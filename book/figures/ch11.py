"""Chapter 11's figures: what one token costs in the cache (MLA's latent row against K and V
per head), and the absorbed computation (what the decode kernel reads, and for what).

Every size comes from pa_ref.mla (mla_bytes_per_token, kv_bytes_per_token, D_C, D_ROPE); the
absorbed figure computes a small MLA both ways (mla_naive, mla_absorbed) and prints how far
apart they are. book/figures/test_figures.py counts the drawn cells back.
"""

import numpy as np
from matplotlib.patches import FancyArrowPatch

from pa_ref import mla

import style as st
from style import BLUE, GREEN, GREY, GRID, INK, LIGHT, MUTED, ORANGE, PINK

CELL_BYTES = 128  # one drawn cell: 64 values of bf16


def _arrow(ax, a, b, colour=INK, lw=1.2):
    ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=11, color=colour, linewidth=lw,
                                 zorder=5, shrinkA=2, shrinkB=2))


def mla_cache(per_row=64):
    """One token of one layer, to scale: a cell is 64 bf16 values (128 bytes), 64 cells a row."""
    caches = [
        ("MHA: K and V of 128 heads of 128", mla.kv_bytes_per_token(128, 128), [("K", BLUE), ("V", ORANGE)]),
        ("GQA: K and V of 8 heads of 128", mla.kv_bytes_per_token(8, 128), [("K", BLUE), ("V", ORANGE)]),
        ("MLA: one latent row for all 128 heads", mla.mla_bytes_per_token(), [("c_kv", GREEN), ("k_rope", PINK)]),
    ]
    rows_of = [-(-b // CELL_BYTES // per_row) for _, b, _ in caches]
    cw, ch = 1.0, 1.0  # square cells
    height = sum(r * ch for r in rows_of) + 3.4 * len(caches) + 2.4
    fig = st.figure(0.122 * (height + 1.6) + 0.15)
    ax = st.bare_axes(fig, [0.02, 0.02, 0.96, 0.96], (0, per_row * cw + 0.6), (-0.7, height + 0.9))
    y, info = 0.6, {}
    for (title, nbytes, parts), rows in zip(caches, rows_of):
        cells = nbytes // CELL_BYTES
        ax.text(0.2, y, f"{title}: {nbytes:,} bytes", fontsize=10.5, fontweight="bold", va="center")
        y += 1.2
        key = title.split(":")[0].lower()
        for i in range(cells):
            if key == "mla":  # 8 cells of c_kv (512), 1 of k_rope (64)
                part = parts[0] if i < mla.D_C // 64 else parts[1]
            else:  # per head: 2 cells of K (128 values), then 2 of V
                part = parts[(i // 2) % 2]
            c = st.cell(ax, 0.2 + (i % per_row) * cw, y + (i // per_row) * ch, cw, ch, fc=LIGHT[part[1]],
                        ec=GRID, lw=0.4)
            c.set_gid(f"cell-{key}")
        if key == "mla":
            ax.text(0.2 + 9 * cw + 1.0, y + 0.5, "c_kv 512 (green) | k_rope 64 (pink)", va="center", fontsize=10)
        info[key] = {"bytes": nbytes, "cells": cells}
        y += rows * ch + 2.2
    ax.text(0.2, y - 0.4, f"One cell: 64 values in bf16 ({CELL_BYTES} bytes). Blue: K, orange: V, green: the "
            "latent c_kv, pink: the\nRoPE key. MHA's 512 cells are the same token as MLA's 9.", fontsize=10,
            color=MUTED, va="top")
    return fig, info


def mla_absorbed(heads=4, length=9, new=2):
    """The two ways to compute MLA, and what the absorbed kernel reads."""
    rng = np.random.default_rng(11)
    d_c, d_nope, d_r, d_v = 32, 16, 8, 12  # a small MLA, to check the figure's claim
    case = dict(q_nope=rng.standard_normal((new, heads, d_nope)), q_rope=rng.standard_normal((new, heads, d_r)),
                c_kv=rng.standard_normal((length, d_c)), k_rope=rng.standard_normal((length, d_r)),
                w_uk=rng.standard_normal((heads, d_c, d_nope)) / np.sqrt(d_c),
                w_uv=rng.standard_normal((heads, d_c, d_v)) / np.sqrt(d_c))
    gap = float(np.max(np.abs(mla.mla_naive(**case) - mla.mla_absorbed(**case))))

    fig = st.figure(4.9)
    ax = st.bare_axes(fig, [0.02, 0.02, 0.96, 0.96], (0, 100), (0, 50))
    # The latent rows: 9 units of c_kv (512), 1 of k_rope (64) -- the same ratio as the cache.
    x0, unit = 33.0, 3.4
    n_c, n_r = mla.D_C // 64, mla.D_ROPE // 64
    ax.text(x0, 1.6, f"the cached rows: [c_kv {mla.D_C} | k_rope {mla.D_ROPE}], one per token",
            fontsize=10.5, fontweight="bold")
    for t in range(4):
        y = 3.2 + 2.2 * t
        for i in range(n_c + n_r):
            c = st.cell(ax, x0 + i * unit, y, unit, 1.8, fc=LIGHT[GREEN] if i < n_c else LIGHT[PINK], ec=GRID, lw=0.5)
            c.set_gid("row-latent" if i < n_c else "row-rope")
    yb = 3.2 + 2.2 * 4 + 0.3
    ax.plot([x0, x0 + (n_c + n_r) * unit], [yb, yb], color=BLUE, lw=2.2)
    ax.text(x0 + (n_c + n_r) * unit + 1, yb, f"K: all {mla.D_C + mla.D_ROPE} columns", color=BLUE,
            fontsize=10.5, va="center")
    ax.plot([x0, x0 + n_c * unit], [yb + 1.6, yb + 1.6], color=ORANGE, lw=2.2)
    ax.text(x0 + (n_c + n_r) * unit + 1, yb + 1.8, f"V: the first {mla.D_C}, the same rows", color=ORANGE,
            fontsize=10.5, va="center")

    def box(x, y, text, colour, gid=None):
        c = st.cell(ax, x, y, 22, 4.4, fc=LIGHT[colour], ec=colour, lw=1.0)
        if gid:
            c.set_gid(gid)
        ax.text(x + 11, y + 2.2, text, ha="center", va="center", fontsize=10, linespacing=1.3)
        return c

    xs = (1, 26, 51, 76)
    # Naive: every head's K and V decompressed, then attention per head.
    y1 = 21.8
    ax.text(1, y1 - 1.6, "naive: decompress K and V for every head, then attention", fontsize=10.5,
            fontweight="bold", color=MUTED)
    for x, text in zip(xs, ("up-project c_kv\nwith W_UK[h], W_UV[h]", "K_h, V_h per head:\nL x 128 x (192 + 128)",
                            "per head:\nsoftmax(q K_h^T) V_h", "o_h\n128 wide")):
        box(x, y1, text, GREY, gid="naive" if x == 26 else None)
    for a in xs[:-1]:
        _arrow(ax, (a + 22, y1 + 2.2), (a + 25, y1 + 2.2), MUTED)
    # Absorbed: W_UK folded into the query, W_UV applied after the sum.
    y2 = 32.0
    ax.text(1, y2 - 1.6, "absorbed (what a server runs): MQA over the latent rows, read once for all heads",
            fontsize=10.5, fontweight="bold")
    for x, text, colour in zip(xs, (f"q' = [q_nope W_UK^T\n| q_rope]: {mla.D_C + mla.D_ROPE}",
                                    f"scores q' . row\nall {mla.D_C + mla.D_ROPE} columns",
                                    f"softmax . c_kv\nthe first {mla.D_C} columns", "o_lat W_UV[h]\n= o_h"),
                                (BLUE, BLUE, ORANGE, ORANGE)):
        box(x, y2, text, colour, gid="absorbed-q" if x == 1 else None)
    for a in xs[:-1]:
        _arrow(ax, (a + 22, y2 + 2.2), (a + 25, y2 + 2.2))
    ax.text(1, 41.8, f"Both give the same output: on a small MLA, the reference's mla_naive and mla_absorbed "
            f"differ by {gap:.0e}.", fontsize=10, color=MUTED)
    ax.text(1, 44.0, f"Per cached token and query row the kernel does {mla.flops_per_token(1):,} FLOPs "
            f"on {mla.mla_bytes_per_token():,} bytes read once for every head.", fontsize=10, color=MUTED)
    return fig, {"gap": gap, "latent_units": n_c, "rope_units": n_r}
