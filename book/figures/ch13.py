"""Chapter 13's figures: the producer/consumer pipeline over two stages with its barriers'
phases, the tensor map that puts a K page into a stage (chunk-major, unswizzled) beside Q's
128-byte swizzle, and the wgmma fragments (which thread holds which accumulator, and how
P's accumulators become O += P V's A operand).

Everything drawn comes from reference/pa_ref/hopper_layouts.py, which mirrors the C++
(book/figures/test_ch13_figures.py checks the C++ still holds the mirrored expressions, and
reads the drawn cells back).
"""

from pa_ref import hopper_layouts as hl
from pa_ref.paged import k_pool_index

import style as st
from style import BLUE, GREEN, GREY, GRID, INK, LIGHT, MUTED, ORANGE, PINK, RED, SKY, YELLOW

CHUNK_COLOURS = [BLUE, ORANGE, GREEN, PINK, SKY, RED, YELLOW, GREY]


def pipeline_timeline(tiles=4, copy=4, v_later=2):
    """The producer warp and the consumer warpgroups over `tiles` KV tiles and two stages
    (pa_ref.hopper_layouts.pipeline, illustrative durations), and the parity of every wait."""
    run = hl.pipeline(tiles=tiles, copy=copy, v_later=v_later)
    end = run["end"]
    fig = st.figure(7.8)
    ax = st.bare_axes(fig, [0.02, 0.02, 0.96, 0.96], (-7.5, end + 1.0), (0, 39.2))
    ax.text(-7.3, 0.9, f"{tiles} KV tiles through a ring of 2 stages: who waits for what "
            "(time in illustrative units)", fontsize=10.5, fontweight="bold", va="center")
    rows = {"producer": 4.0, "stage 0": 6.9, "stage 1": 10.2, "consumers": 13.8}
    h, hs = 2.0, 1.45
    for name in ("producer", "consumers"):
        ax.text(-7.3, rows[name] + h / 2, name, fontsize=10, va="center", fontweight="bold")
    for s in (0, 1):
        for j, half in enumerate("KV"):
            ax.text(-7.3, rows[f"stage {s}"] + j * (hs + 0.1) + hs / 2, f"stage {s} {half}", fontsize=10,
                    va="center", fontweight="bold")
    for x in range(0, end + 1, 5):
        ax.plot([x, x], [3.4, 16.4], color=GRID, lw=0.5, zorder=0)
        ax.text(x, 17.1, str(x), fontsize=9.4, ha="center", va="center", color=MUTED)
    info = {"run": run, "stage_bars": [], "waits": []}
    # The producer: its waits for a free stage (the zero-length ones pass at once).
    for start, stop, kind, label, n in run["events"]["producer"]:
        bar, parity = label.split(" parity ")
        info["waits"].append(("producer", n, bar, int(parity), start, stop))
        if stop > start:
            st.cell(ax, start, rows["producer"], stop - start, h, fc=LIGHT[GREY], ec=MUTED, lw=0.6, hatch="///")
            ax.text((start + stop) / 2, rows["producer"] - 0.8, f"{bar}, parity {parity}",
                    fontsize=9.4, ha="center", va="center")
    ax.text(-7.3, rows["producer"] - 0.8, "waits for", fontsize=9.4, va="center", color=MUTED)
    issues = {}
    for issue, land, bar, n in run["copies"]:
        prev = issues.setdefault(n, [issue, land])
        prev[1] = max(prev[1], land)
    for n, (issue, land) in sorted(issues.items()):
        ax.plot([issue], [rows["producer"] + h / 2], marker="v", color=ORANGE, ms=9, zorder=5)
    # The stages, K and V apart: TMA writing (orange), landed and not yet read (white), read
    # by a wgmma (blue: S = Q K^T; pink: O += P V), K kept until the stage's release (pale).
    cons = run["events"]["consumer 1"]
    lands = {(n, bar[0]): land for issue, land, bar, n in run["copies"]}
    for n, (issue, land) in sorted(issues.items()):
        s = n % 2
        s0, s1 = next((e[0], e[1]) for e in cons if e[4] == n and e[3] == "S = Q K^T")
        p0, p1 = next((e[0], e[1]) for e in cons if e[4] == n and e[3] == "O += P V")
        for half, y, land_h, r0, r1, colour, text in (
                ("K", rows[f"stage {s}"], lands[(n, "k")], s0, s1, BLUE, f"S {n}"),
                ("V", rows[f"stage {s}"] + hs + 0.1, lands[(n, "v")], p0, p1, PINK, f"PV {n}")):
            c = st.cell(ax, issue, y, land_h - issue, hs, fc=ORANGE, ec="white", lw=0.8, gid="stage-tma")
            c.set_label(f"{n}:{s}:{half}:{issue}:{land_h}")
            ax.text((issue + land_h) / 2, y + hs / 2, f"TMA {n}", fontsize=9.4, ha="center", va="center",
                    color=INK, fontweight="bold")
            if r0 > land_h:
                st.cell(ax, land_h, y, r0 - land_h, hs, fc="white", ec=MUTED, lw=0.6)
            c = st.cell(ax, r0, y, r1 - r0, hs, fc=colour, ec="white", lw=0.8, gid="stage-read")
            c.set_label(f"{n}:{s}:{half}:{r0}:{r1}")
            ax.text((r0 + r1) / 2, y + hs / 2, text, fontsize=9.4, ha="center", va="center", color="white",
                    fontweight="bold")
            if half == "K" and p1 > r1:
                st.cell(ax, r1, y, p1 - r1, hs, fc=LIGHT[BLUE], ec="white", lw=0.8)
        info["stage_bars"].append((n, s, issue, lands[(n, "k")], lands[(n, "v")], s0, p1))
    # The consumers (both warpgroups run the same waits and arrive together here).
    colours = {"S = Q K^T": BLUE, "softmax": GREEN, "O += P V": PINK}
    short = {"S = Q K^T": "S", "softmax": "exp", "O += P V": "PV"}
    for start, stop, kind, label, n in cons:
        y = rows["consumers"]
        if kind == "work":
            st.cell(ax, start, y, stop - start, h, fc=colours[label], ec="white", lw=0.8)
            ax.text((start + stop) / 2, y + h / 2, short[label], fontsize=9.4, ha="center", va="center",
                    color="white" if label != "softmax" else INK, fontweight="bold")
        elif kind == "wait":
            bar, parity = label.split(" parity ")
            info["waits"].append(("consumers", n, bar, int(parity), start, stop))
            if stop > start:
                st.cell(ax, start, y, stop - start, h, fc=LIGHT[GREY], ec=MUTED, lw=0.6, hatch="///")
        else:
            ax.plot([start], [y + h + 0.4], marker="^", color=RED, ms=8, zorder=5)
    # Legend.
    yl = 19.0
    items = [(ORANGE, "TMA copy in flight"), (BLUE, "S = Q K^T, wgmma"), (GREEN, "softmax"),
             (PINK, "O += P V, wgmma")]
    for j, (c, text) in enumerate(items):
        x = -7.3 + j * 9.0
        st.cell(ax, x, yl - 0.5, 1.2, 1.0, fc=c, ec="white")
        ax.text(x + 1.6, yl, text, fontsize=9.4, va="center")
    ax.plot([-6.7], [yl + 1.9], marker="v", color=ORANGE, ms=9)
    ax.text(-5.7, yl + 1.9, "copies issued", fontsize=9.4, va="center")
    ax.plot([2.3], [yl + 1.9], marker="^", color=RED, ms=8)
    ax.text(3.3, yl + 1.9, "both consumers arrive on empty[s]: the stage is free again", fontsize=9.4,
            va="center")
    st.cell(ax, -7.3, yl + 3.3, 1.2, 1.0, fc=LIGHT[GREY], ec=MUTED, lw=0.6, hatch="///")
    ax.text(-5.7, yl + 3.8, "a wait on a barrier", fontsize=9.4, va="center")
    st.cell(ax, 1.7, yl + 3.3, 1.2, 1.0, fc=LIGHT[BLUE], ec="white")
    ax.text(3.3, yl + 3.8, "K read, kept until the release; white: landed, not read yet", fontsize=9.4,
            va="center")
    # The table: every wait's barrier, parity and the phase it waits for.
    yt = 25.0
    cols = [-7.3, -3.6, -0.6, 16.0]
    heads = ["tile", "stage", "producer waits", "consumers wait k_full, v_full"]
    for x, t in zip(cols, heads):
        ax.text(x, yt, t, fontsize=9.6, fontweight="bold", va="center")
    info["table"] = []
    for n in range(tiles):
        s = n % 2
        pp, cp = hl.producer_empty_parity(n), hl.consumer_full_parity(n)
        y = yt + 1.8 * (n + 1)
        before = "phase −1: passes" if n < 2 else f"phase {n // 2 - 1}: tile {n - 2} read"
        row = [str(n), str(s), f"empty[{s}] parity {pp} ({before})", f"parity {cp} (phase {n // 2})"]
        for x, t in zip(cols, row):
            ax.text(x, y, t, fontsize=9.4, va="center")
        info["table"].append((n, s, pp, cp))
    notes = ["Tile n uses stage n % 2 and its barriers' phase n / 2. A wait with parity p passes",
             "once the barrier's latest phase of parity p has completed; a fresh barrier counts",
             "parity 1 (the phase before phase 0) as done, which lets the producer start."]
    for j, t in enumerate(notes):
        ax.text(-7.3, yt + 1.8 * (tiles + 1) + 0.5 + 1.7 * j, t, fontsize=9.4, va="center", color=MUTED)
    info["ax"] = ax
    return fig, info


def stage_layout(bs=16, D=128, page=2, block=7, hkv=2, num_blocks=12, kv_head=0, q_rows=8):
    """Top: one K page of the pool ([D/8 chunks][BS tokens][8]) and where the tensor map's
    boxes put it in the stage (pa_ref.hopper_layouts.tma_box with k_map_spec, one box per
    chunk, at k_box): chunk-major, the tile's pages side by side, no swizzle; k-step 0's two
    core matrices outlined. Bottom: Q's first rows as load_q stores them, 128 bytes a row,
    chunk c of row r in slot c ^ (r % 8) (q_address, the 128-byte swizzle)."""
    shape = hl.tile_shape(D)
    tokens, chunks, pages = shape["tokens"], D // 8, shape["tokens"] // bs
    spec = hl.k_map_spec(bs, D, hkv, num_blocks)
    k0 = hl.smem_k(0, D)
    where = {}  # (token of the page, chunk) -> (chunk row, token column) in the stage
    for c in range(chunks):
        landed = dict(hl.tma_box(spec, (0, 0, c, kv_head, block), hl.k_box(0, page, c, bs, D)))
        for r in range(bs):
            rel = landed[2 * k_pool_index(block, kv_head, 8 * c, r, hkv, D, bs, 8)] - k0
            where[(r, c)] = (rel // (tokens * 16), (rel % (tokens * 16)) // 16)
    fig = st.figure(7.2)
    ax = st.bare_axes(fig, [0.02, 0.02, 0.96, 0.96], (0, 100), (0, 70.5))
    ax.text(1, 1.5, f"K: one page into the stage, chunk-major, no swizzle (D {D}, {bs}-token pages)",
            fontsize=10.5, fontweight="bold", va="center")
    # Left: the pool's page, memory order row by row: chunk c, then token.
    cw, ch, x0, y0 = 1.6, 1.55, 5.0, 8.0
    ax.text(x0 - 3.4, y0 - 2.6, f"the pool, block {block}: [chunk][token][8]", fontsize=9.6, va="center")
    for c in range(chunks):
        ax.text(x0 - 0.5, y0 + c * ch + ch / 2, f"c{c}", fontsize=9.4, ha="right", va="center", color=MUTED)
        for r in range(bs):
            cell = st.cell(ax, x0 + r * cw, y0 + c * ch, cw, ch, fc=CHUNK_COLOURS[c % 8], ec="white", lw=0.4,
                           gid="pool")
            cell.set_label(f"{r}:{c}")
    for r in (0, bs - 1):
        ax.text(x0 + r * cw + cw / 2, y0 + chunks * ch + 0.9, str(r), fontsize=9.4, ha="center", va="center",
                color=MUTED)
    ax.text(x0 + bs * cw / 2, y0 + chunks * ch + 0.9, "token", fontsize=9.4, ha="center", va="center",
            color=MUTED)
    box_c = 3  # one box, outlined in both places
    st.cell(ax, x0, y0 + box_c * ch, bs * cw, ch, fc="none", ec=INK, lw=2.0, z=5)
    # Right: the stage's K, row c = chunk c of all the stage's tokens (kTokens x 16 bytes).
    sw, x1 = 0.42, 42.5
    ax.text(x1, y0 - 2.6, f"the stage: [chunk][token][8], {tokens} tokens × 16 bytes a row", fontsize=9.6,
            va="center")
    for c in range(chunks):
        for q in range(pages):
            if q != page:
                st.cell(ax, x1 + q * bs * sw, y0 + c * ch, bs * sw, ch, fc=LIGHT[GREY], ec="white", lw=0.6)
    for (r, c), (row, col) in where.items():
        cell = st.cell(ax, x1 + col * sw, y0 + row * ch, sw, ch, fc=CHUNK_COLOURS[c % 8], ec="none", lw=0,
                       gid="stage")
        cell.set_label(f"{r}:{c}")
    for q in range(pages):
        ax.text(x1 + (q + 0.5) * bs * sw, y0 - 0.9, f"p{q}", fontsize=9.4, ha="center", va="center",
                color=INK if q == page else MUTED, fontweight="bold" if q == page else "normal")
    for t in (0, 64, tokens - 1):
        ax.text(x1 + t * sw + sw / 2, y0 + chunks * ch + 0.9, str(t), fontsize=9.4, ha="center", va="center",
                color=MUTED)
    ax.text(x1 + 32 * sw, y0 + chunks * ch + 0.9, "token of the stage", fontsize=9.4, ha="center",
            va="center", color=MUTED)
    st.cell(ax, x1 + page * bs * sw, y0 + box_c * ch, bs * sw, ch, fc="none", ec=INK, lw=2.0, z=5)
    ax.annotate("", xy=(x1 + page * bs * sw - 0.4, y0 + box_c * ch + ch / 2),
                xytext=(x0 + bs * cw + 0.6, y0 + box_c * ch + ch / 2),
                arrowprops=dict(arrowstyle="->", color=INK, lw=1.2))
    ax.text((x0 + bs * cw + x1 + page * bs * sw) / 2, y0 + box_c * ch - 1.0, f"one box: chunk {box_c}",
            fontsize=9.4, ha="center", va="center")
    # k-step 0 of S = Q K^T: chunks 0 and 1 of 8 tokens, two core matrices of 128 contiguous bytes.
    t8 = page * bs
    for c in (0, 1):
        st.cell(ax, x1 + t8 * sw, y0 + c * ch, 8 * sw, ch, fc="none", ec=INK, lw=2.0, z=6)
    ax.annotate("k-step 0: c0 and c1 of 8 tokens", xy=(x1 + (t8 + 8) * sw + 0.2, y0 + ch),
                xytext=(x1 + (page + 1) * bs * sw + 2.0, y0 + ch), fontsize=9.4, va="center",
                arrowprops=dict(arrowstyle="->", color=INK, lw=1.0))
    yt = y0 + chunks * ch + 3.2
    k_lines = [
        f"The map walks the pool as stored: dims (8, {bs} tokens, {chunks} chunks, heads, blocks), box (8, {bs}, 1, 1, 1).",
        f"Each box ({bs} × 16 bytes) lands in its chunk's row at its page's place: k_box = k + c·{tokens * 16} + p·{bs * 16}.",
        "wgmma's core matrix is 8 tokens × 16 bytes, here 128 contiguous bytes: no two rows share a bank.",
        f"k_desc: k-step s starts at chunk 2s; LBO {tokens * 16} bytes (chunk 2s + 1), SBO 128 (the next 8 tokens).",
    ]
    for j, t in enumerate(k_lines):
        ax.text(1, yt + 1.9 * j, t, fontsize=9.4, va="center", color=MUTED)
    # Bottom: Q's 128-byte swizzle, rows 0 .. q_rows - 1 of slab 0 (dims 0-63).
    yq = yt + 1.9 * len(k_lines) + 2.6
    ax.text(1, yq, "Q: a 128-byte row per query row (dims 0–63), swizzled by 128 bytes",
            fontsize=10.5, fontweight="bold", va="center")
    qw, qh, xq, y2 = 4.2, 2.0, 5.0, yq + 3.6
    q_where = {}
    for r in range(q_rows):
        ax.text(xq - 0.5, y2 + r * qh + qh / 2, f"r{r}", fontsize=9.4, ha="right", va="center", color=MUTED)
        for c in range(8):
            rel = hl.q_address(0, r, c)
            row, slot = rel // 128, (rel % 128) // 16
            q_where[(r, c)] = (row, slot)
            cell = st.cell(ax, xq + slot * qw, y2 + row * qh, qw, qh, fc=CHUNK_COLOURS[c], ec="white", lw=0.5,
                           gid="q")
            cell.set_label(f"{r}:{c}")
            ax.text(xq + slot * qw + qw / 2, y2 + row * qh + qh / 2, f"c{c}", fontsize=9.4, ha="center",
                    va="center", color="white" if c in (0, 5) else INK)
            if c in (0, 1):
                st.cell(ax, xq + slot * qw, y2 + row * qh, qw, qh, fc="none", ec=INK, lw=2.2, z=6)
    for s_ in range(8):
        ax.text(xq + s_ * qw + qw / 2, y2 - 0.9, str(s_), fontsize=9.4, ha="center", va="center", color=MUTED)
    ax.text(xq + 4 * qw, y2 + q_rows * qh + 0.9, "16-byte slot of the row", fontsize=9.4, ha="center",
            va="center", color=MUTED)
    xk = xq + 8 * qw + 3.0
    q_lines = ["load_q stores chunk c of row r in slot",
               "c XOR (r mod 8): the swizzle is a function",
               "of the shared address, and q_desc names the",
               "same mode, so wgmma reads the same slots.",
               "k-step 0 (outlined) reads chunks 0 and 1 of 8 rows:",
               "8 different slots each, so no bank conflicts.",
               "V's page rows (BS × 2 bytes) are swizzled",
               "the same way, by their own width; a TMA box",
               "is swizzled only when its inner row fills the span."]
    for j, t in enumerate(q_lines):
        ax.text(xk, y2 + 0.5 + 1.9 * j, t, fontsize=9.4, va="center", color=MUTED if j < 6 else INK)
    info = {"where": where, "q_where": q_where, "bs": bs, "D": D, "page": page, "spec": spec, "block": block,
            "kv_head": kv_head, "ax": ax}
    return fig, info


def wgmma_fragments(n_cols=16):
    """Warp 0's rows (0-15) of a 64 x N accumulator, k-step 0's 16 columns: the thread that
    holds each element (WgmmaAcc::row/col), coloured by the A-fragment register it becomes
    (p[0][r] = pack(d[2r], d[2r+1]) in tile_math.cuh, a[r] in wgmma.h's A layout)."""
    fig = st.figure(5.8)
    ax = st.bare_axes(fig, [0.02, 0.02, 0.96, 0.96], (0, 100), (0, 52))
    ax.text(1, 1.5, "S's accumulators are P's A operand: the same thread holds the same element",
            fontsize=10.5, fontweight="bold", va="center")
    cw, ch, x0, y0 = 2.75, 2.2, 4.5, 6.5
    reg_colours = [BLUE, ORANGE, GREEN, PINK]
    held = {}
    for t in range(128):
        for i in range(n_cols // 2 * 2):
            r, c = hl.acc_row(i, t), hl.acc_col(i, t)
            if r < 16 and c < n_cols:
                held[(r, c)] = (t, i)
    info = {"held": held, "cells": {}}
    ax.text(x0, y0 - 1.4, "rows 0–15 (warp 0) × columns 0–15 (keys of k-step 0)", fontsize=9.6, va="center")
    for (r, c), (t, i) in held.items():
        reg = (i % 8) // 2  # p[0][reg] packs d[2 reg], d[2 reg + 1]
        cell = st.cell(ax, x0 + c * cw, y0 + r * ch, cw, ch, fc=reg_colours[reg], ec=reg_colours[reg], lw=0.4,
                       gid="acc")
        cell.set_label(f"{r}:{c}:{t}:{i}")
        info["cells"][(r, c)] = (t, i, reg)
        if c % 2 == 0:  # columns 2q and 2q + 1 of a row: one thread, one 32-bit register
            ax.text(x0 + (c + 1) * cw, y0 + r * ch + ch / 2, str(t), fontsize=9.4, ha="center", va="center",
                    color="white" if reg in (0, 2) else INK)
            st.cell(ax, x0 + c * cw, y0 + r * ch, 2 * cw, ch, fc="none", ec="white", lw=1.6, z=3)
    for r in range(16):
        ax.text(x0 - 0.6, y0 + r * ch + ch / 2, str(r), fontsize=9.4, ha="right", va="center", color=MUTED)
    for c in range(0, n_cols, 2):
        ax.text(x0 + c * cw + cw, y0 - 0.1 + 16 * ch + 1.0, f"{c},{c + 1}", fontsize=9.4, ha="center",
                va="center", color=MUTED)
    # The key: the registers.
    xk = x0 + n_cols * cw + 2.5
    ax.text(xk, y0 + 0.6, "thread t: g = t % 32 / 4, q = t % 4", fontsize=9.6, va="center",
            fontweight="bold")
    ax.text(xk, y0 + 2.6, "d[i] is at row 16·(t / 32) + g + 8·(i / 2 % 2)", fontsize=9.4, va="center")
    ax.text(xk, y0 + 4.4, "and column 8·(i / 4) + 2q + i % 2", fontsize=9.4, va="center")
    keys = ["a[0] = d[0], d[1]: row g, cols 2q, 2q+1",
            "a[1] = d[2], d[3]: row g+8, cols 2q, 2q+1",
            "a[2] = d[4], d[5]: row g, cols 2q+8, 2q+9",
            "a[3] = d[6], d[7]: row g+8, cols 2q+8, 2q+9"]
    for j, (c, text) in enumerate(zip(reg_colours, keys)):
        y = y0 + 7.4 + 2.6 * j
        st.cell(ax, xk, y - 0.8, 2.0, 1.6, fc=c, ec="white")
        ax.text(xk + 2.6, y, text, fontsize=9.4, va="center")
    ax.text(xk, y0 + 19.0, "Two fp16 (or bf16) of a row, packed into", fontsize=9.4, va="center", color=MUTED)
    ax.text(xk, y0 + 20.8, "one 32-bit register, are the A fragment", fontsize=9.4, va="center", color=MUTED)
    ax.text(xk, y0 + 22.6, "of O += P V's k-step: no shuffle,", fontsize=9.4, va="center", color=MUTED)
    ax.text(xk, y0 + 24.4, "no trip through shared memory.", fontsize=9.4, va="center", color=MUTED)
    yt = y0 + 16 * ch + 3.6
    foot = ["Each cell: the thread (0–31 in warp 0) that holds the element; colour: the register of A it "
            "goes into.",
            "k-step ks of O += P V takes d[8ks] … d[8ks+7]: p[ks][r] = pack(d[8ks+2r], d[8ks+2r+1]).",
            "Warps 1–3 hold rows 16–63 the same way; each further 16 columns is the next k-step."]
    for j, t in enumerate(foot):
        ax.text(1, yt + 1.9 * j, t, fontsize=9.4, va="center", color=MUTED)
    info["ax"] = ax
    return fig, info
