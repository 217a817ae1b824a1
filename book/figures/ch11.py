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


# --------------------------------------------------------------------------- the kernel's shapes

SHAPE_ORDER = ("eight_warps", "eight_warps_queries_in_registers", "key_halves", "four_warps",
               "queries_in_registers")
QUARTER = [BLUE, ORANGE, GREEN, PINK]  # warp w's colour is its quarter's, w % 4


def _runs_on(name):
    """The tiles the runner's automatic choice (kernel_layouts.ch11_block_for) sends to a shape."""
    from pa_ref import kernel_layouts as kl
    picks = {(r, fp8) for r in range(1, 65) for fp8 in (False, True) if kl.ch11_block_for(r, fp8) == name}
    if not picks:
        return "tests only"
    lo, hi = min(r for r, _ in picks), max(r for r, _ in picks)
    pools = {fp8 for _, fp8 in picks}
    pool = "" if len(pools) == 2 else (", fp8" if True in pools else ", 16-bit")
    return f"runs {lo}–{hi} rows{pool}"


SHAPE_TITLES = {"eight_warps": ("8 warps", ""), "eight_warps_queries_in_registers": ("8 warps,", "Q in registers"),
                "key_halves": ("8 warps on", "key halves"), "four_warps": ("4 warps", ""),
                "queries_in_registers": ("4 warps,", "Q in registers")}


def mla_block_shapes(decode_rows=16):
    """The five thread blocks of the MLA decode kernel (BlockShape<RG, MT, KH>): which rows of
    a tile and which keys of a stage each warp scores, and what a tile of `decode_rows` rows
    (16 heads of one new token) leaves empty."""
    from pa_ref import kernel_layouts as kl

    fig = st.figure(6.4)
    ax = st.bare_axes(fig, [0.02, 0.02, 0.96, 0.96], (0, 100), (0, 76))
    kx, ry = 0.36, 0.30  # units a key, units a row
    info = {"shapes": {}, "warps": [], "empty": [], "runs": {}}
    ax.text(1, 1.4, "Each warp's scores of a stage: the tile's rows (down) × the stage's keys (across)",
            fontsize=10.5, fontweight="bold", va="center")
    slots = [(1.0, 4.6), (34.5, 4.6), (68.0, 4.6), (1.0, 45.0), (34.5, 45.0)]
    for (x0, y0), name in zip(slots, SHAPE_ORDER):
        rg, mt, kh = kl.MLA_BLOCKS[name]
        s = kl.ch11_block_shape(rg, mt, kh)
        info["shapes"][name] = s
        t1, t2 = SHAPE_TITLES[name]
        ax.text(x0, y0, f"{t1} {t2}".strip(), fontsize=10.5, fontweight="bold", va="center")
        ax.text(x0, y0 + 2.2, f"BlockShape<RG {rg}, MT {mt}{', KH' if kh else ''}>", fontsize=9.6, va="center",
                color=MUTED)
        gx, gy = x0 + 3.6, y0 + 5.6
        rows = s["tile_rows"]
        for r in range(0, rows + 1, 16):
            ax.text(gx - 0.5, gy + r * ry, str(r), ha="right", va="center", fontsize=9.4, color=MUTED)
        ax.text(gx, gy - 1.0, "key 0", fontsize=9.4, va="center", color=MUTED)
        ax.text(gx + s["stage_tokens"] * kx, gy - 1.0, str(s["stage_tokens"]), ha="right", va="center",
                fontsize=9.4, color=MUTED)
        for w in range(s["warps"]):
            (r0, r1), (k0, k1), _ = kl.ch11_warp_work(s, w)
            p = st.cell(ax, gx + k0 * kx, gy + r0 * ry, (k1 - k0) * kx, (r1 - r0) * ry, fc=LIGHT[QUARTER[w % 4]],
                        ec=INK if w < 4 else MUTED, lw=1.0, gid=f"warp-{name}")
            if w >= 4:
                p.set_hatch("..")
            p.set_label(f"{w}:{r0}:{r1}:{k0}:{k1}")
            info["warps"].append((name, w, r0, r1, k0, k1))
            ax.text(gx + (k0 + k1) / 2 * kx, gy + (r0 + min(r1, r0 + 16)) / 2 * ry, str(w), ha="center",
                    va="center", fontsize=10.5, fontweight="bold", zorder=7,
                    bbox=dict(facecolor="white", edgecolor="none", pad=0.8) if w >= 4 else None)
        if decode_rows < rows:
            p = st.cell(ax, gx, gy + decode_rows * ry, s["stage_tokens"] * kx, (rows - decode_rows) * ry,
                        fc=GREY, ec="none", lw=0, z=6, alpha=0.6, gid=f"empty-{name}")
            p.set_label(f"{decode_rows}:{rows}")
            info["empty"].append((name, decode_rows, rows))
        runs = _runs_on(name)
        info["runs"][name] = runs
        stats = [f"≤ {rows} rows a tile, {s['stage_tokens']}-key stages",
                 f"{s['smem_bytes']:,} B: {s['blocks_per_sm']} block{'s' if s['blocks_per_sm'] > 1 else ''} "
                 "an SM", runs]
        sy = gy + rows * ry + 2.0
        for i, line in enumerate(stats):
            ax.text(x0, sy + 2.2 * i, line, fontsize=9.6, va="center",
                    color=INK if i < 2 else (MUTED if runs == "tests only" else BLUE),
                    fontweight="bold" if i == 2 else "normal")
    lines = ["A box: one warp's scores of", "a stage, its rows by its keys;", "every key a whole 576-wide row.",
             "The number: the warp. Colour:", "its quarter w % 4, the 128 of", "O's 512 columns it owns in P V.",
             "Dotted: row group 1 (warps 4–7).", "", f"Grey: rows a tile of {decode_rows} (16 heads",
             "of one new token) leaves empty:", "their warps skip their mma. On", "key halves both row groups have",
             "all 16 rows, each half the keys."]
    for i, line in enumerate(lines):
        ax.text(68.0, 45.0 + 2.3 * i, line, fontsize=9.6, va="center", color=MUTED)
    info["ax"] = ax
    info["decode_rows"] = decode_rows
    return fig, info


def mla_key_halves(kv_end=176, rows=16, seed=4):
    """Key halves: a 16-row tile's item over keys 0 .. kv_end - 1, in 64-key stages; row group
    rg attends keys 32 rg .. 32 rg + 31 of each stage, 8 a warp, with its own max, exp-sum
    and O; at the item's end the two are merged as chapter 5 merges partitions. The numbers
    are computed: a random row's two states, merged by pa_ref.merge_partitions, against the
    softmax over all its keys."""
    from pa_ref import kernel_layouts as kl
    from pa_ref import merge_partitions, softmax

    s = kl.ch11_block_shape(*kl.MLA_BLOCKS["key_halves"])
    halves = kl.ch11_key_halves(0, kv_end, s["stage_tokens"])
    rng = np.random.default_rng(seed)
    scores = rng.standard_normal(kv_end) * 2.0
    values = rng.standard_normal((kv_end, 6))
    states = []
    for rg in range(2):
        keys = [k for st_ in halves for k in range(*st_[rg])]
        m = scores[keys].max()
        e = np.exp(scores[keys] - m)
        states.append((m, e.sum(), e @ values[keys] / e.sum(), keys))
    merged = merge_partitions(np.array([[[states[0][0], states[1][0]]]]), np.array([[[states[0][1], states[1][1]]]]),
                              np.array([[[states[0][2], states[1][2]]]]))[0, 0]
    whole = softmax(scores) @ values
    gap = float(np.max(np.abs(merged - whole)))

    fig = st.figure(4.3)
    ax = st.bare_axes(fig, [0.02, 0.02, 0.96, 0.96], (0, 100), (0, 46))
    ax.text(1, 1.5, f"Key halves: one item of a {rows}-row tile over keys 0–{kv_end - 1}, in stages of "
            f"{s['stage_tokens']} keys", fontsize=10.5, fontweight="bold", va="center")
    x0, kx, y = 6.0, 88.0 / (len(halves) * s["stage_tokens"]), 6.5
    info = {"spans": [], "warp_cells": [], "gap": gap, "halves": halves, "kv_end": kv_end}
    ax.text(x0 - 0.6, y + 1.6, "keys", ha="right", va="center", fontsize=10)
    for st_i, pair in enumerate(halves):
        s0 = st_i * s["stage_tokens"]
        for rg, (a, b) in enumerate(pair):
            if b > a:
                p = st.cell(ax, x0 + a * kx, y, (b - a) * kx, 3.2, fc=LIGHT[BLUE if rg == 0 else ORANGE],
                            ec=BLUE if rg == 0 else ORANGE, lw=1.2, gid=f"half-{rg}")
                p.set_label(f"{st_i}:{a}:{b}")
                info["spans"].append((st_i, rg, a, b))
                if st_i == 0:  # the first stage: each warp's 8 keys
                    for w in range(4 * rg, 4 * rg + 4):
                        _, (k0, k1), _ = kl.ch11_warp_work(s, w)
                        c = st.cell(ax, x0 + (s0 + k0) * kx, y, (k1 - k0) * kx, 3.2, fc="none", ec=MUTED, lw=0.6,
                                    z=3, gid="warp-keys")
                        c.set_label(f"{w}:{s0 + k0}:{s0 + k1}")
                        info["warp_cells"].append((w, s0 + k0, s0 + k1))
                        ax.text(x0 + (s0 + (k0 + k1) / 2) * kx, y + 1.6, f"w{w}", ha="center", va="center",
                                fontsize=9.4)
                else:
                    ax.text(x0 + (a + b) / 2 * kx, y + 1.6, f"rg {rg}", ha="center", va="center", fontsize=10)
        ax.plot([x0 + s0 * kx] * 2, [y - 1.2, y + 4.4], color=INK, lw=1.2)
        ax.text(x0 + s0 * kx + 0.4, y - 1.0, f"stage {st_i}: {s0}", fontsize=9.6, va="center")
    end_x = x0 + kv_end * kx
    ax.plot([end_x] * 2, [y - 1.2, y + 4.4], color=st.RED, lw=1.4)
    ax.text(end_x + 0.5, y + 5.6, f"kv_end {kv_end}", fontsize=9.6, color=st.RED, va="center")
    ax.text(1, y + 8.2, f"Both row groups hold all {rows} rows. A warp scores its 8 keys of a stage against "
            f"them, each key's whole", fontsize=10, va="center")
    ax.text(1, y + 10.3, f"576-wide row (36 k-steps); the split is over keys, never over a row's columns.",
            fontsize=10, va="center")

    # The two states and their merge, for one row (computed).
    yb = 23.0
    for rg, (m, l, o, keys) in enumerate(states):
        colour = BLUE if rg == 0 else ORANGE
        by = yb + 8.0 * rg
        st.cell(ax, 1.0, by, 44.0, 6.6, fc=LIGHT[colour], ec=colour, lw=1.2, gid=f"state-{rg}")
        ax.text(2.0, by + 1.8, f"row group {rg} (warps {4 * rg}–{4 * rg + 3}): {len(keys)} keys", fontsize=10,
                fontweight="bold", va="center")
        ax.text(2.0, by + 4.5, f"its own m, l, O; one row: m = {m:.3f}, l = {l:.3f}", fontsize=10, va="center")
        _arrow(ax, (45.0, by + 3.3), (57.0, yb + 7.3), colour)
        ax.text(46.0, by + 3.3 + (-1.8 if rg == 0 else 1.8), "registers" if rg == 0 else "shared memory",
                fontsize=9.6, ha="left", va="center", color=colour)
    st.cell(ax, 57.0, yb + 2.3, 42.0, 10.0, fc="white", ec=INK, lw=1.2, gid="merge")
    ax.text(58.0, yb + 4.3, "row group 0 merges, writes the rows", fontsize=10, fontweight="bold", va="center")
    ax.text(58.0, yb + 7.1, "M = max m,  w = l · e^(m − M)", fontsize=10, va="center")
    ax.text(58.0, yb + 9.9, "O = Σ w · O / Σ w   (chapter 5's merge)", fontsize=10, va="center")
    ax.text(1, yb + 18.4, "At the item's end row group 1 leaves its state in the ring (free by then). On a random "
            f"row of {kv_end} keys", fontsize=10, va="center", color=MUTED)
    ax.text(1, yb + 20.5, f"the merged output and the softmax over all its keys differ by {gap:.0e} "
            "(pa_ref.merge_partitions, pa_ref.softmax).", fontsize=10, va="center", color=MUTED)
    info["states"] = [(m, l, keys) for m, l, _, keys in states]
    info["ax"] = ax
    return fig, info


def mla_fp8_row(seed=7):
    """The fp8 latent row, 656 bytes in 16-byte chunks, eight a line: four tiles of 128 e4m3
    bytes, the chunk of four float32 scales, eight chunks of 16-bit RoPE values; each chunk
    labelled with the thread (of the row's four) that converts it (kernel_layouts.ch11_fp8_pieces).
    The scales printed are those pa_ref.mla.quantize_latent_fp8 writes for a sample row."""
    from pa_ref import kernel_layouts as kl

    rng = np.random.default_rng(seed)
    c_kv = rng.standard_normal((1, mla.D_C)) * np.repeat([0.02, 0.5, 3.0, 0.1], mla.FP8_TILE)[None, :]
    k_rope = rng.standard_normal((1, mla.D_ROPE))
    row = mla.quantize_latent_fp8(c_kv, k_rope, "bf16")[0]
    who = {}
    for my in range(4):
        for at, _, _ in kl.ch11_fp8_pieces(my):
            who[at] = my

    fig = st.figure(3.9)
    ax = st.bare_axes(fig, [0.02, 0.02, 0.96, 0.96], (0, 100), (0, 42))
    ax.text(1, 1.5, f"One token's fp8 latent row: {mla.FP8_ROW_BYTES} bytes (bf16: {mla.mla_bytes_per_token():,}) = "
            f"{mla.FP8_ROW_BYTES // 16} chunks of 16, to scale",
            fontsize=10.5, fontweight="bold", va="center")
    x0, cw, ch, y0 = 14.5, 7.0, 3.6, 4.5
    tiles = [LIGHT[BLUE], LIGHT[ORANGE], LIGHT[GREEN], LIGHT[PINK]]
    lines = [(f"bytes {t * mla.FP8_TILE}–{(t + 1) * mla.FP8_TILE - 1}", t * mla.FP8_TILE, mla.FP8_TILE,
              f"c_kv {t * mla.FP8_TILE}–{(t + 1) * mla.FP8_TILE - 1}, e4m3", "e4m3")
             for t in range(mla.FP8_SCALES)]
    lines.append((f"bytes {mla.FP8_SCALES_AT}–{mla.FP8_ROPE_AT - 1}", mla.FP8_SCALES_AT,
                  mla.FP8_ROPE_AT - mla.FP8_SCALES_AT, "4 float32 scales", "scale"))
    lines.append((f"bytes {mla.FP8_ROPE_AT}–{mla.FP8_ROW_BYTES - 1}", mla.FP8_ROPE_AT,
                  mla.FP8_ROW_BYTES - mla.FP8_ROPE_AT, f"k_rope, {mla.D_ROPE} × 16-bit", "rope"))
    info = {"chunks": [], "scales": [], "row": row, "who": who}
    scales_read = np.ascontiguousarray(row[mla.FP8_SCALES_AT:mla.FP8_ROPE_AT]).view("<f4")
    for i, (left, start, nbytes, right, kind) in enumerate(lines):
        y = y0 + i * (ch + 1.0)
        ax.text(x0 - 0.8, y + ch / 2, left, ha="right", va="center", fontsize=9.6)
        ax.text(x0 + 8 * cw + 1.0, y + ch / 2, right, va="center", fontsize=9.6)
        for j in range(nbytes // 16):
            at = start + 16 * j
            if kind == "scale":  # one chunk, to scale: four float32 of 4 bytes
                for k in range(mla.FP8_SCALES):
                    p = st.cell(ax, x0 + k * cw / 4, y, cw / 4, ch, fc=tiles[k], ec=INK, lw=0.8, gid="scale")
                    p.set_label(f"{at + 4 * k}:{k}")
                    info["scales"].append((at + 4 * k, k, float(scales_read[k])))
                ax.text(x0 + cw + 0.8, y + ch / 2, "s0 … s3 = " + ", ".join(f"{v:.3g}" for v in scales_read),
                        va="center", fontsize=9.6)
                info["chunks"].append((at, kind, None))
                continue
            fc = tiles[(at // mla.FP8_TILE)] if kind == "e4m3" else LIGHT[GREY]
            p = st.cell(ax, x0 + j * cw, y, cw, ch, fc=fc, ec="white", lw=1.2, gid=f"chunk-{kind}")
            p.set_label(f"{at}:{who[at]}")
            info["chunks"].append((at, kind, who[at]))
            ax.text(x0 + (j + 0.5) * cw, y + ch / 2, f"T{who[at]}", ha="center", va="center", fontsize=9.6)
    yt = y0 + len(lines) * (ch + 1.0) + 1.0
    texts = [f"Tile t's 128 values share scale s_t = amax_t / 448 (colours match). The RoPE part stays 16-bit: "
             f"{mla.D_ROPE} of the",
             f"score's {mla.D_C + mla.D_ROPE} columns, {2 * mla.D_ROPE} bytes. Tn: which of the row's 4 threads "
             f"converts the chunk to 16 bits",
             "in shared memory (e4m3 chunk j: 16-bit chunks 2j, 2j + 1; RoPE chunk c: chunk 64 + c, copied).",
             f"Scales shown: the reference's for a sample row whose tiles differ in size (quantize_latent_fp8)."]
    for i, t in enumerate(texts):
        ax.text(1, yt + 2.1 * i, t, fontsize=9.6, va="center", color=MUTED)
    info["ax"] = ax
    info["c_kv"] = c_kv
    return fig, info
