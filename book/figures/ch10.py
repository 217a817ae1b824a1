"""Chapter 10's kernel figures: the four warps' shared ring and its K swizzle, and the token
order that keeps P in registers.

Every slot, bank group, pass count and token comes from pa_ref.kernel_layouts, which mirrors
the expressions of solutions/10-varlen-attention/varlen_kernel.cuh (its tests check that the
C++ still holds them), and the mma fragment layouts from pa_ref.work_maps.
book/figures/test_ch10_figures.py reads the drawn cells back and checks them against both.
"""

from matplotlib.patches import FancyArrowPatch

from pa_ref import kernel_layouts as kl
from pa_ref import work_maps as wm

import style as st
from style import BLUE, GREEN, GREY, GRID, INK, LIGHT, MUTED, ORANGE, PINK, RED

WARP = [BLUE, ORANGE, GREEN, PINK]  # warp w's colour (and lane t's, in the P figure)


def _arrow(ax, a, b, colour=INK, lw=1.2, rad=0.0):
    ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=10, color=colour, linewidth=lw,
                                 connectionstyle=f"arc3,rad={rad}", zorder=6, shrinkA=1, shrinkB=1))


def varlen_ring(elem_bytes=2, head_size=128, rows=8):
    """(a) The ring in shared memory: its stages, K by chunk (coloured by the warp that copies
    it) and V by half. (b) The first `rows` chunks of a stage's K, slots 0-7, without and with
    the swizzle, and the units one quarter-warp of the score loop reads."""
    lay = kl.ch10_stage_layout(elem_bytes, head_size)
    stages = kl.ch10_stages(elem_bytes, head_size)
    tokens, chunks = lay["tokens"], lay["chunks"]
    fig = st.figure(6.3)
    ax = st.bare_axes(fig, [0.02, 0.02, 0.96, 0.96], (0, 100), (0, 68.5))
    info = {"layout": lay, "stages": stages, "k": [], "v": [], "cells": [], "reads": [], "passes": {},
            "counts": {}}

    # (a) the ring, to scale in bytes.
    budget = kl.CH10_RING_BUDGET // 1024
    ax.text(1, 1.4, f"(a) The ring: {stages} stages of {lay['bytes'] // 1024} KB in {budget} KB "
            f"(fp16, D = {head_size}); stage i % {stages} holds KV tile i", fontsize=11, fontweight="bold",
            va="center")
    x0, kb, y, h = 1.0, 98.0 / budget, 5.6, 3.4
    ax.text(x0, y - 1.3, f"Each stage: K, {chunks} chunks × {tokens} tokens (coloured by the warp that copies "
            f"it), then V, {lay['halves']} halves × D × 16 tokens", fontsize=10, va="center")
    for s in range(stages):
        base = x0 + s * lay["bytes"] / 1024 * kb
        cw = tokens * 16 / 1024 * kb
        for c in range(chunks):
            warp = kl.ch10_k_copier(c, 0, head_size, elem_bytes)[0]
            p = st.cell(ax, base + c * cw, y, cw, h, fc=WARP[warp], ec="white", lw=0.5, gid="k-chunk")
            p.set_label(f"{s}:{c}:{warp}")
            info["k"].append((s, c, warp, cw / kb * 1024))
        vw = lay["v_bytes"] / lay["halves"] / 1024 * kb
        vx = base + lay["k_bytes"] / 1024 * kb
        for half in range(lay["halves"]):
            p = st.cell(ax, vx + half * vw, y, vw, h, fc=LIGHT[GREY], ec="white", lw=0.8, gid="v-half")
            p.set_label(f"{s}:{half}")
            info["v"].append((s, half, vw / kb * 1024))
            ax.text(vx + (half + 0.5) * vw, y + h / 2, f"h{half}", ha="center", va="center", fontsize=9.4,
                    color=INK)
        st.cell(ax, base, y, lay["bytes"] / 1024 * kb, h, fc="none", ec=INK, lw=1.3, z=3, gid="stage")
        later = ", ".join(str(s + k * stages) for k in range(3))
        ax.text(base + 0.3, y + h + 1.3, f"stage {s}: tiles {later}, …", fontsize=10, va="center")
    rest = budget - stages * lay["bytes"] // 1024
    if rest:
        ux = x0 + stages * lay["bytes"] / 1024 * kb
        st.cell(ax, ux, y, rest * kb, h, fc="white", ec=GREY, lw=0.8, hatch="///", gid="unused")
        ax.text(ux + rest * kb / 2, y + h + 1.3, f"{rest} KB", fontsize=10, va="center", ha="center", color=MUTED)
    rows_w0 = sorted({d for d in range(16) if kl.ch10_v_copier(d, 0, head_size, elem_bytes)[0] // 32 == 0})
    ax.text(1, 14.2, "Warp w copies K chunks w, w + 4, … (lane l: tokens l and l + 32) and a quarter of V's rows "
            f"(warp 0: rows {rows_w0[0]}–{rows_w0[-1]},", fontsize=10, va="center")
    ax.text(1, 16.4, "16–19, …). All four then read all of it: a barrier after the wait.", fontsize=10,
            va="center")
    for w in range(4):
        lx = 60.5 + 9.8 * w
        st.cell(ax, lx, 15.5, 1.6, 1.8, fc=WARP[w], ec="white")
        ax.text(lx + 2.0, 16.4, f"warp {w}", fontsize=10, va="center")

    # (b) the swizzle: chunk rows x slots 0..7 (= bank groups: a chunk's row is 64 units).
    ax.text(1, 20.8, f"(b) K in a stage: chunk c's row of {tokens} slots of 16 bytes; slot s is in bank group "
            "s % 8", fontsize=11, fontweight="bold", va="center")
    cw, ch = 4.3, 3.1
    top = 29.0
    lanes = range(8)  # one quarter-warp: lanes 0..7 of the first score product (m = 0, q = 0)
    reads = [kl.ch10_score_read(lane, 0, 0) for lane in lanes]
    for name, gx, swz, title in (("plain", 13.0, False, "without the swizzle: slot t"),
                                 ("swizzled", 58.0, True, "the kernel's: slot t ^ 2 (c % 4)")):
        ax.text(gx + 4 * cw, top - 4.4, title, fontsize=10.5, fontweight="bold", ha="center", va="center")
        for s in range(8):
            ax.text(gx + (s + 0.5) * cw, top - 1.6, str(s), ha="center", va="center", fontsize=9.4, color=MUTED)
        for c in range(rows):
            for t in range(8):
                unit = kl.ch10_k_unit(c, t, tokens, swz)
                slot = unit - c * tokens
                p = st.cell(ax, gx + slot * cw, top + c * ch, cw, ch, fc=LIGHT[WARP[c % 4]], ec="white", lw=1.0,
                            gid=f"cell-{name}")
                p.set_label(f"{c}:{slot}:{t}")
                info["cells"].append((name, c, slot, t))
                ax.text(gx + (slot + 0.5) * cw, top + (c + 0.5) * ch, str(t), ha="center", va="center",
                        fontsize=9.6, color=INK)
        units = []
        for lane, (c, t) in zip(lanes, reads):
            unit = kl.ch10_k_unit(c, t, tokens, swz)
            units.append(unit)
            slot = unit - c * tokens
            p = st.cell(ax, gx + slot * cw, top + c * ch, cw, ch, fc="none", ec=RED, lw=2.0, z=4,
                        gid=f"read-{name}")
            p.set_label(f"{lane}:{c}:{slot}")
            info["reads"].append((name, lane, c, slot))
        # Lanes per bank group, and the passes they cost.
        cy = top + rows * ch + 0.9
        counts = [sum(1 for u in units if kl.bank_group(u) == b) for b in range(8)]
        for b, n in enumerate(counts):
            p = st.cell(ax, gx + b * cw, cy, cw, ch, fc=LIGHT[RED] if n > 1 else "white", ec=GRID, lw=0.8,
                        gid=f"count-{name}")
            p.set_label(f"{b}:{n}")
            ax.text(gx + (b + 0.5) * cw, cy + ch / 2, str(n), ha="center", va="center", fontsize=9.6,
                    color=RED if n > 1 else INK, fontweight="bold" if n > 1 else "normal")
        n_pass = kl.passes(units)
        info["passes"][name], info["counts"][name] = n_pass, counts
        ax.text(gx + 4 * cw, cy + ch + 1.7, f"{n_pass} pass{'es' if n_pass > 1 else ''} for lanes 0–7",
                fontsize=10.5, ha="center", va="center", color=RED if n_pass > 1 else GREEN, fontweight="bold")
    ax.text(12.0, top - 1.6, "slot", ha="right", va="center", fontsize=9.4, color=MUTED)
    for c in range(rows):
        ax.text(12.0, top + (c + 0.5) * ch, f"chunk {c}", ha="right", va="center", fontsize=9.6)
        ax.text(57.3, top + (c + 0.5) * ch, f"t ^ {2 * (c % 4)}", ha="right", va="center", fontsize=9.6,
                color=MUTED)
    ax.text(12.0, top + rows * ch + 0.9 + ch / 2, "lanes", ha="right", va="center", fontsize=9.6, color=RED)
    ax.text(57.3, top + rows * ch + 0.9 + ch / 2, "lanes", ha="right", va="center", fontsize=9.6, color=RED)
    yb = top + rows * ch + ch + 5.0
    for j, line in enumerate(("A cell's number is the token t it holds; its colour, the warp that copied it. Outlined: the units",
                              "lanes 0–7 read for the first score product (lane l: chunk l % 4, token l / 4). Each group of 8 "
                              "slots",
                              "is permuted within itself, so a warp's copy of 32 tokens of a chunk still writes 512 contiguous "
                              "bytes.")):
        ax.text(1, yb + 2.1 * j, line, fontsize=10, color=MUTED, va="center")
    info["ax"] = ax
    return fig, info


def p_in_registers(lane_shown=1):
    """One 16-token half of a stage: the score products' columns, P as the A operand of
    O += P V, and V's rows, each cell coloured by the lane t (of g, t) that holds it."""
    fig = st.figure(5.0)
    ax = st.bare_axes(fig, [0.02, 0.02, 0.96, 0.96], (0, 100), (0, 53))
    cw, ch = 5.0, 3.2
    info = {"s": [], "a": [], "v": [], "natural": [], "arrows": [], "lane": lane_shown}
    legend_x = 60.0
    for t in range(4):
        st.cell(ax, legend_x + 9.6 * t, 0.5, 1.6, 1.8, fc=WARP[t], ec="white")
        ax.text(legend_x + 9.6 * t + 2.0, 1.4, f"t = {t}", fontsize=10, va="center")
    ax.text(1, 1.4, "Colour: lane t of the lanes (g, t); row g shown, g + 8 the same", fontsize=10, va="center",
            color=MUTED)

    # The score products 2h and 2h + 1 (column n of product q: token score_token(q, n)).
    a_x = 10.0
    ys = 9.0
    ax.text(1, ys - 4.6, "S = Q Kᵀ: column n of product q is token 2 (q % 2) + 4 (n / 2) + n % 2 of the half",
            fontsize=10.5, fontweight="bold", va="center")
    s_x = {0: a_x, 1: a_x + 8 * cw + 1.0}
    ax.text(a_x - 0.8, ys + ch / 2, "S", ha="right", va="center", fontsize=10)
    for q in range(2):
        ax.text(s_x[q], ys - 1.7, f"product 2h + {q}" if q else "product 2h", va="center", fontsize=10)
        for n in range(8):
            tok = kl.ch10_score_token(q, n)
            lane_t = next(lt for lt in range(4) if any(wm.mma_c_element(lt, i)[1] == n for i in range(2)))
            p = st.cell(ax, s_x[q] + n * cw, ys, cw, ch, fc=WARP[lane_t], ec="white", lw=1.2, gid="s")
            p.set_label(f"{q}:{n}:{tok}:{lane_t}")
            info["s"].append((q, n, tok, lane_t))
            ax.text(s_x[q] + (n + 0.5) * cw, ys + ch / 2, str(tok), ha="center", va="center", fontsize=10.5,
                    color="white", fontweight="bold")
            ax.text(s_x[q] + (n + 0.5) * cw, ys + ch + 1.0, f"n {n}", ha="center", va="center", fontsize=9.4,
                    color=MUTED)
    # P as the A operand: slot k of the P V product's k dimension is token pv_token(k).
    ya = 21.0
    ax.text(a_x - 0.8, ya + ch / 2, "P", ha="right", va="center", fontsize=10)
    for k in range(16):
        tok = kl.ch10_pv_token(k)
        lane_t = next(lt for lt in range(4) if any(wm.mma_a_element(lt, i) == (0, k) for i in range(8)))
        x = a_x + k * cw + (1.0 if k >= 8 else 0.0)
        p = st.cell(ax, x, ya, cw, ch, fc=WARP[lane_t], ec="white", lw=1.2, gid="a")
        p.set_label(f"{k}:{tok}:{lane_t}")
        info["a"].append((k, tok, lane_t))
        ax.text(x + cw / 2, ya + ch / 2, str(tok), ha="center", va="center", fontsize=10.5, color="white",
                fontweight="bold")
        ax.text(x + cw / 2, ya + ch + 1.0, f"k {k}", ha="center", va="center", fontsize=9.4, color=MUTED)
    ax.text(1, ya + ch + 3.3, "P, the A operand of O += P V: the accumulators as they are (slot k = column k)",
            fontsize=10.5, fontweight="bold", va="center")
    ax.text(1, ya + ch + 5.4, "so slot 2t + e is token 4t + e and slot 2t + 8 + e is token 4t + 2 + e: lane t's "
            "four are tokens 4t … 4t + 3", fontsize=10, va="center", color=MUTED)
    # The lane's four accumulators go straight to its A registers (a0 a1, a4 a5 of row g).
    for i in (0, 1, 4, 5):
        q, c = kl.ch10_pv_a_from_scores(i)
        _, n = wm.mma_c_element(lane_shown, c)
        _, k = wm.mma_a_element(lane_shown, i)
        src = (s_x[q] + (n + 0.5) * cw, ys + ch + 1.8)
        dst = (a_x + (k + 0.5) * cw + (1.0 if k >= 8 else 0.0), ya - 0.1)
        _arrow(ax, src, dst, RED, lw=1.4)
        info["arrows"].append((q, n, k))
    ax.text(a_x + 7 * cw, ya - 3.5, f"lane t = {lane_shown}: its own c0, c1\nof both products, four pack2:\n"
            "no shuffle, no shared memory", fontsize=10, color=RED, va="center", ha="center", linespacing=1.15)

    # V: the stage's [half][D][16] rows, tokens in order; lane t reads 4t .. 4t + 3.
    yv = 37.0
    ax.text(1, yv - 2.0, "V's row d = 8n + g: lane t's B slots 2t, 2t + 1, 2t + 8, 2t + 9 are tokens 4t … 4t + 3",
            fontsize=10.5, fontweight="bold", va="center")
    for k, (label, natural) in enumerate((("V", False), ("plain", True))):
        y = yv + k * 7.2
        if natural:
            ax.text(1, y - 2.0, "In the plain order (column k of 2h | 2h + 1 is token k) lane t would read tokens "
                    "2t, 2t + 1, 2t + 8, 2t + 9", fontsize=10, va="center", color=MUTED)
        ax.text(a_x - 0.8, y + ch / 2, label, ha="right", va="center", fontsize=10)
        for tok in range(16):
            if natural:
                lane_t = next(lt for lt in range(4) if any(wm.mma_b_element(lt, i)[0] == tok for i in range(4)))
            else:
                lane_t = next(lt for lt in range(4) if tok in kl.ch10_v_tokens(lt))
            x = a_x + tok * cw + (1.0 if tok >= 8 else 0.0)
            p = st.cell(ax, x, y, cw, ch, fc=LIGHT[WARP[lane_t]] if natural else WARP[lane_t], ec="white", lw=1.2,
                        gid="natural" if natural else "v")
            p.set_label(f"{tok}:{lane_t}")
            info["natural" if natural else "v"].append((tok, lane_t))
            ax.text(x + cw / 2, y + ch / 2, str(tok), ha="center", va="center", fontsize=10.5,
                    color=INK if natural else "white", fontweight="normal" if natural else "bold")
    ax.text(1, 51.0, "Any token order keeps P in registers; this one also puts a lane's four tokens side by "
            "side in V: one 8-byte read.", fontsize=10, color=MUTED, va="center")
    info["ax"] = ax
    return fig, info
