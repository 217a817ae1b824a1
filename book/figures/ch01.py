"""Chapter 1's figures: the dense cache's slabs, the decode kernel's warps and lanes, the online
softmax's rescale, and the merge of the warps' states.

The layout and the work split come from pa_ref.work_maps (dense_offset, dense_kv_head,
dense_warp_tokens, dense_lane_dims: the mapping of solutions/01-dense-kv/decode_attention.cu);
the numbers of the rescale and of the merge from pa_ref.attention (online_softmax,
warp_softmax_states, merge_softmax_states), which reproduce decode_attention.
book/figures/test_ch01_figures.py reads the drawn patches back and checks them against these.
"""

import math

import numpy as np
from matplotlib.patches import FancyArrowPatch, Rectangle

from pa_ref import decode_attention, softmax
from pa_ref import work_maps as wm
from pa_ref.attention import merge_softmax_states, online_softmax, warp_softmax_states

import style as st
from style import BLUE, GREEN, GREY, GRID, INK, LIGHT, MUTED, ORANGE, PINK, RED

WARP_COLOURS = [BLUE, ORANGE, GREEN, PINK]
SUB = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


def tagged(ax, tag):
    return [p for p in ax.patches if p.get_gid() == tag]


def _arrow(ax, a, b, colour=INK, lw=1.2, rad=0.0):
    ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=11, color=colour, linewidth=lw,
                                 connectionstyle=f"arc3,rad={rad}", zorder=5, shrinkA=2, shrinkB=2))


def _spines(ax, keep=("bottom",)):
    for side in ("top", "right", "left", "bottom"):
        ax.spines[side].set_visible(side in keep)


# --------------------------------------------------------------------------- the slab layout

def dense_slab(num_seqs=2, max_seq_len=6, num_kv_heads=2, head_size=8, context_lens=(5, 3),
               num_q_heads=4, head=2, element=(1, 2, 1, 3)):
    """k_cache [B][L][Hkv][D] in memory order, a row per token slot (Hkv * D values): the
    slots written so far, the ones reserved and never written, what the thread block of
    (query head `head`, the element's sequence) reads, and one element's offset."""
    B, L, H, D = num_seqs, max_seq_len, num_kv_heads, head_size
    row = H * D
    seq_c = [BLUE, ORANGE]
    fig = st.figure(3.75)
    ax = st.bare_axes(fig, [0.02, 0.02, 0.96, 0.95], (-6.9, 31.0), (-4.1, B * L + 1.0))

    def at(off):  # (x, y) of flat offset `off` in the drawing: a row per token slot
        r, c = divmod(off, row)
        return c, r

    ax.text(-6.3, -3.4, f"k_cache [B {B}][L {L}][Hkv {H}][D {D}], in memory order: a row per token slot",
            fontsize=11, fontweight="bold", va="center")
    for g in range(H):
        ax.text(g * D + D / 2, -1.75, f"KV head g = {g}", ha="center", va="center", fontsize=10.5,
                fontweight="bold")
        for d in range(D):
            ax.text(g * D + d + 0.5, -0.5, str(d), ha="center", va="center", fontsize=9.6, color=MUTED)
    ax.text(-0.25, -0.5, "d", ha="right", va="center", fontsize=9.6, color=MUTED)
    ax.text(-2.5, -0.5, "offset", ha="center", va="center", fontsize=9.6, color=MUTED)
    written = []
    for b in range(B):
        for t in range(L):
            y = b * L + t
            ax.text(-2.5, y + 0.5, str(wm.dense_offset(b, t, 0, 0, L, H, D)), ha="center", va="center",
                    fontsize=9.6, color=MUTED)
            ax.text(-0.25, y + 0.5, f"t {t}", ha="right", va="center", fontsize=9.6, color=INK)
            for g in range(H):
                for d in range(D):
                    x, yy = at(wm.dense_offset(b, t, g, d, L, H, D))
                    if t < context_lens[b]:
                        st.cell(ax, x, yy, fc=LIGHT[seq_c[b]], ec="white", lw=0.6, gid=f"written-{b}")
                        written.append((b, t, g, d))
                    else:
                        st.cell(ax, x, yy, fc="white", ec=GRID, lw=0.5, hatch="///", gid="reserved")
        ax.plot([0, row], [b * L, b * L], color=INK, lw=1.4, zorder=4)
        ax.text(-5.6, b * L + L / 2, f"seq {b}, len {context_lens[b]}", rotation=90, ha="center",
                va="center", fontsize=10.5, fontweight="bold", color=seq_c[b])
    ax.plot([0, row], [B * L, B * L], color=INK, lw=1.4, zorder=4)
    for g in range(1, H):
        ax.plot([g * D, g * D], [0, B * L], color=INK, lw=1.0, zorder=4)

    # What one thread block reads: its KV head's D values of every slot below len.
    b, t, g, d = element
    kv = wm.dense_kv_head(head, num_q_heads, num_kv_heads)
    x0, y0 = at(wm.dense_offset(b, 0, kv, 0, L, H, D))
    box = Rectangle((x0, y0), D, context_lens[b], facecolor="none", edgecolor=INK, linewidth=2.4, zorder=6,
                    gid="read")
    ax.add_patch(box)
    off = wm.dense_offset(b, t, g, d, L, H, D)
    ex, ey = at(off)
    st.cell(ax, ex, ey, fc=RED, ec=INK, lw=0.8, z=7, gid="element")

    # The explanations, right of the grid.
    xr = row + 1.2
    ax.text(xr, -0.2, f"a row: one token slot, Hkv·D = {row}\nvalues; slot t + 1 starts {row} after\n"
            "slot t (the token stride)", fontsize=10.5, va="top")
    ax.text(xr, 3.3, f"a slab: one sequence, L·Hkv·D = {L * row}\nvalues, however short it is.\n"
            "Hatched: reserved, never written\n(NaN in the tests)", fontsize=10.5, va="top")
    ax.text(xr, 7.7, f"k_cache[{b}][{t}][{g}][{d}]: offset\n(({b}·{L} + {t})·{H} + {g})·{D} + {d} = {off}",
            fontsize=10.5, va="top", color=RED, fontweight="bold")
    _arrow(ax, (xr - 0.1, 8.3), (ex + 1.0, ey + 0.5), colour=RED)
    ax.text(xr, 10.1, f"outlined: what the thread block of\nquery head {head}, seq {b} reads: KV head\n"
            f"{head} / ({num_q_heads} / {num_kv_heads}) = {kv}, slots 0 to {context_lens[b] - 1}",
            fontsize=10.5, va="top")
    return fig, {"ax": ax, "row": row, "shape": (B, L, H, D), "context_lens": list(context_lens),
                 "element": element, "head": head, "num_q_heads": num_q_heads,
                 "element_cell": [(int(round(p.get_x())), int(round(p.get_y()))) for p in tagged(ax, "element")],
                 "read_box": (int(round(box.get_x())), int(round(box.get_y())), int(round(box.get_width())),
                              int(round(box.get_height())))}


# --------------------------------------------------------------------------- warps and lanes

def dense_warps(context_len=11, slots=14, head_size=80):
    """The chapter 1 decode kernel's split of one (query head, sequence): warp w takes slots
    w, w + 4, ...; lane l holds dims l, l + 32, l + 64 of the head vector (D = 80)."""
    W, D = wm.DENSE_WARPS, head_size
    per_lane = wm.dense_per_lane(D)
    fig = st.figure(4.35)
    ax = st.bare_axes(fig, [0.01, 0.01, 0.98, 0.98], (-4.6, 33.0), (-2.6, 16.4))
    # (a) the slots of the sequence, a row per warp.
    sw = 1.5
    ax.text(-4.4, -1.9, f"(a) One thread block, {W} warps: warp w takes slots w, w + {W}, w + {2 * W}, ...",
            fontsize=11, fontweight="bold", va="center")
    for t in range(slots):
        ax.text(t * sw + sw / 2, -0.5, str(t), ha="center", va="center", fontsize=9.6,
                color=INK if t < context_len else MUTED)
    ax.text(-0.25, -0.5, "slot t", ha="right", va="center", fontsize=9.6, color=MUTED)
    for w in range(W):
        mine = wm.dense_warp_tokens(w, context_len, W)
        for t in range(slots):
            if t >= context_len:
                st.cell(ax, t * sw, w, sw, 0.86, fc="white", ec=GRID, lw=0.5, hatch="///")
            elif t in mine:
                p = st.cell(ax, t * sw, w, sw, 0.86, fc=WARP_COLOURS[w], ec="white", lw=0.6, gid="token")
                p.set_label(f"{w}:{t}")
            else:
                st.cell(ax, t * sw, w, sw, 0.86, fc=LIGHT[GREY], ec="white", lw=0.6)
        ax.text(-0.25, w + 0.43, f"warp {w}", ha="right", va="center", fontsize=10.5, color=WARP_COLOURS[w],
                fontweight="bold")
        ax.text(slots * sw + 0.5, w + 0.43, "slots " + ", ".join(map(str, mine)), va="center", fontsize=10.5)
    ax.text(0, 4.6, f"len = {context_len}: slots {context_len} and up are never read (hatched)", fontsize=10,
            color=MUTED, va="center")
    # (b) the lanes of a warp and the dims they hold.
    y0 = 8.2
    ax.text(-4.4, y0 - 2.2, f"(b) Inside a warp, D = {D}: lane l holds dims l, l + 32, l + 64 of q, k, v and "
            f"acc\n     (kPerLane = ceil(D / 32) = {per_lane}); a cell shows the dim", fontsize=11,
            fontweight="bold", va="center")
    for lane in range(32):
        if lane % 4 == 0 or lane == 31:
            ax.text(lane + 0.5, y0 - 0.45, str(lane), ha="center", va="center", fontsize=9.6, color=MUTED)
        dims = wm.dense_lane_dims(lane, D)
        for i in range(per_lane):
            if i < len(dims):
                p = st.cell(ax, lane, y0 + i, fc=LIGHT[[BLUE, GREEN, ORANGE][i % 3]], ec="white", lw=0.6,
                            gid="dim")
                p.set_label(f"{lane}:{i}:{dims[i]}")
                ax.text(lane + 0.5, y0 + i + 0.5, str(dims[i]), ha="center", va="center", fontsize=9.4)
            else:
                st.cell(ax, lane, y0 + i, fc="white", ec=GRID, lw=0.5, hatch="///", gid="skipped")
    ax.text(-0.25, y0 - 0.45, "lane", ha="right", va="center", fontsize=9.6, color=MUTED)
    for i in range(per_lane):
        ax.text(-0.25, y0 + i + 0.5, "d = l" if i == 0 else f"l + {32 * i}", ha="right", va="center",
                fontsize=10, color=INK)
    ax.text(-4.4, y0 + per_lane + 0.9, f"Hatched: l + {32 * (per_lane - 1)} ≥ {D}, no element there; every "
            "access is guarded by d < D.\nA score: each lane multiplies its elements of q and k, and "
            "warp_sum's five shuffles\nadd the 32 partial sums. Every lane gets the total and updates its "
            "own elements of acc.", fontsize=10.5, va="top")
    return fig, {"ax": ax, "context_len": context_len, "head_size": D,
                 "tokens": sorted(tuple(int(v) for v in p.get_label().split(":")) for p in tagged(ax, "token")),
                 "dims": sorted(tuple(int(v) for v in p.get_label().split(":")) for p in tagged(ax, "dim")),
                 "skipped": len(tagged(ax, "skipped"))}


# --------------------------------------------------------------------------- the online softmax

SCORES = (0.4, 1.5, 0.8, 2.6, 1.9, 0.2, 3.3, 1.1)  # scores s_t of one warp's tokens, in order
VALUES = (0.9, 1.6, 0.5, 1.2, 2.0, 0.7, 1.4, 0.8)  # one dimension of their v_t


def online_rescale(scores=SCORES, values=VALUES):
    """pa_ref.attention.online_softmax over eight tokens: the running max m, and l and acc
    (one dimension) before the rescale, after it, and with the new token's term."""
    s = np.asarray(scores, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)[:, None]
    states = online_softmax(s, v)
    n = len(s)
    fig = st.figure(6.4)
    tt = np.arange(n)
    axes = [fig.add_axes([0.1, y, 0.86, h]) for y, h in ((0.665, 0.2), (0.37, 0.2), (0.08, 0.2))]
    a, bl, bacc = axes
    # (a) scores and the running max.
    a.scatter(tt, s, s=36, color=INK, zorder=3, label="score s_t")
    ms = [st_["m"] for st_ in states]
    xs, ys = [], []
    for t, m in enumerate(ms):
        xs += [t - 0.5, t + 0.5]
        ys += [m, m]
    line, = a.plot(xs, ys, color=RED, lw=2.0, label="running max m", gid="m")
    grew = []
    a.text(0, ms[0] + 0.3, "c = 0", ha="center", va="bottom", fontsize=10, color=RED, fontweight="bold")
    for t in range(1, n):
        c = states[t]["c"]
        if c < 1.0:
            grew.append(t)
            a.text(t, ms[t] + 0.3, f"c = {c:.2f}", ha="center", va="bottom", fontsize=10, color=RED,
                   fontweight="bold")
    a.set_ylim(0, max(s) + 1.3)
    a.set_ylabel("score")
    a.set_title("(a) Tokens arrive; where the max grows, c = exp(m_old − m_new) < 1", loc="left",
                fontsize=11.5)
    a.legend(loc="upper left", frameon=False, ncol=2, bbox_to_anchor=(0.0, 1.02))
    drawn = {"l": [], "acc": []}
    for key, ax, colour, title in (("l", bl, BLUE, "(b) l = l·c + p: the sum so far is rescaled, then "
                                    "p = exp(s_t − m) is added"),
                                   ("acc", bacc, GREEN, "(c) acc = acc·c + p·v_t (one of its D dims): the "
                                    "same rescale")):
        prev = 0.0
        for t, st_ in enumerate(states):
            c, p = st_["c"], st_["p"]
            new = p if key == "l" else p * v[t, 0]
            kept = prev * c
            if t:  # the value before this token, beside what the token makes of it
                ax.add_patch(Rectangle((t - 0.4, 0), 0.34, prev, facecolor=LIGHT[GREY], edgecolor=MUTED, lw=0.8,
                                       zorder=2, gid=f"{key}-before"))
            r1 = Rectangle((t - 0.04, 0), 0.44, kept, facecolor=LIGHT[colour], edgecolor=colour, lw=0.8,
                           zorder=3, gid=f"{key}-kept")
            r2 = Rectangle((t - 0.04, kept), 0.44, new, facecolor=colour, edgecolor=colour, lw=0.8, zorder=3,
                           gid=f"{key}-new")
            ax.add_patch(r1)
            ax.add_patch(r2)
            drawn[key].append((kept, new))
            prev = float(st_[key] if key == "l" else st_[key][0])
        top = max(k + nn for k, nn in drawn[key])
        ax.set_ylim(0, top * 1.3)
        ax.set_ylabel(key)
        ax.set_title(title, loc="left", fontsize=11.5)
    handles = [Rectangle((0, 0), 1, 1, facecolor=LIGHT[GREY], edgecolor=MUTED),
               Rectangle((0, 0), 1, 1, facecolor=LIGHT[BLUE], edgecolor=BLUE),
               Rectangle((0, 0), 1, 1, facecolor=BLUE, edgecolor=BLUE)]
    bl.legend(handles, ["before the token", "kept, × c", "the token's term"], loc="upper left",
              frameon=False, ncol=3, bbox_to_anchor=(0.0, 1.03))
    for ax in axes:
        ax.set_xlim(-0.6, n - 0.4)
        ax.set_xticks(tt, [] if ax is not bacc else [str(t) for t in tt])
        _spines(ax, ("bottom", "left"))
    bacc.set_xlabel("token t (in the order the warp reads them)")
    last = states[-1]
    out = float(last["acc"][0] / last["l"])
    exact = float(softmax(s) @ v[:, 0])
    fig.text(0.03, 0.965, f"One warp's {n} tokens. At the end, out = acc / l = {out:.4f}, the same as "
             f"softmax(s)·v = {exact:.4f}.", fontsize=10.5, va="center")
    return fig, {"states": states, "scores": s, "values": v, "drawn": drawn, "grew": grew,
                 "m_line": list(line.get_ydata()[::2]), "out": out}


# --------------------------------------------------------------------------- the warps' merge

def warp_merge(context_len=11, head_size=16, seed=10, empty_len=3):
    """Chapter 1's merge: each warp's (m_w, l_w, acc_w) over its slots, then M, f_w, L and
    out (pa_ref.attention.warp_softmax_states and merge_softmax_states)."""
    W, D = wm.DENSE_WARPS, head_size
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(D)
    k = rng.standard_normal((context_len, D))
    v = rng.standard_normal((context_len, D))
    scale = 1 / math.sqrt(D)
    s = scale * k @ q
    m, l, acc = warp_softmax_states(s, v, W)
    M, f, L, out = merge_softmax_states(m, l, acc)
    want = decode_attention(q[None, None], k[None, :, None], v[None, :, None], np.array([context_len]),
                            scale)[0, 0]
    gap = float(np.max(np.abs(out - want)))
    em, el, eacc = warp_softmax_states(s[:empty_len], v[:empty_len], W)
    _, ef, _, _ = merge_softmax_states(em, el, eacc)

    fig = st.figure(6.0)
    # (a) the scores, coloured by warp, each warp's max outlined.
    a = fig.add_axes([0.1, 0.625, 0.86, 0.27])
    bars = []
    for w in range(W):
        tokens = wm.dense_warp_tokens(w, context_len, W)
        best = tokens[int(np.argmax(s[tokens]))]
        for t in tokens:
            r = Rectangle((t - 0.38, 0), 0.76, s[t], facecolor=WARP_COLOURS[w], edgecolor=INK if t == best else
                          "white", lw=1.6 if t == best else 0.5, zorder=3, gid="score")
            r.set_label(f"{w}:{t}")
            a.add_patch(r)
            bars.append((w, t, float(s[t])))
        a.text(best, s[best] + (0.08 if s[best] >= 0 else -0.08), f"m{w}".translate(SUB), ha="center",
               va="bottom" if s[best] >= 0 else "top", fontsize=11, fontweight="bold", color=WARP_COLOURS[w])
    a.axhline(M, color=RED, lw=1.2, ls="--")
    a.text(-0.5, M + 0.06, "M = the largest m_w", ha="left", va="bottom", fontsize=10.5, color=RED,
           fontweight="bold")
    a.axhline(0, color=MUTED, lw=0.8)
    a.set_xlim(-0.6, context_len - 0.4)
    lo, hi = float(min(s.min(), 0)), float(s.max())
    a.set_ylim(lo - 0.2, hi + 0.6)
    a.set_xticks(range(context_len))
    a.set_xlabel("slot t", labelpad=2)
    a.set_ylabel("score s_t")
    _spines(a, ("bottom", "left"))
    a.spines["bottom"].set_visible(False)
    a.tick_params(axis="x", length=0)
    fig.text(0.02, 0.955, f"(a) The scores of {context_len} slots by warp; each warp ends with its own "
             "(m_w, l_w, acc_w)", fontsize=11, fontweight="bold", va="center")
    # (b) the four states and the weights.
    bx = st.bare_axes(fig, [0.02, 0.02, 0.96, 0.5], (0, 100), (0, 30))
    bx.text(0, 1.0, "(b) Warp 0 merges them, through shared memory, against the largest max M:",
            fontsize=11, fontweight="bold", va="center")
    for w in range(W):
        x0 = w * 25
        st.cell(bx, x0 + 0.3, 2.6, 24.0, 8.2, fc=LIGHT[WARP_COLOURS[w]], ec=WARP_COLOURS[w], lw=1.2)
        i = str(w).translate(SUB)
        bx.text(x0 + 12.3, 6.7, f"warp {w}: slots {', '.join(map(str, wm.dense_warp_tokens(w, context_len, W)))}\n"
                f"m{i} = {m[w]:.2f},  l{i} = {l[w]:.2f}\nf{i} = exp(m{i} − M) = {f[w]:.2f}", ha="center",
                va="center", fontsize=10, linespacing=1.45)
    bx.text(0, 13.2, f"L = Σ l_w·f_w = {L:.2f}: each warp's sum, moved to the common max", fontsize=10.5,
            va="center")
    x, parts = 0.0, []
    width = 97.0 / L
    for w in range(W):
        part = l[w] * f[w]
        r = Rectangle((0.3 + x * width, 14.8), part * width, 3.0, facecolor=WARP_COLOURS[w], edgecolor="white",
                      lw=1.0, gid="L-part")
        r.set_label(str(w))
        bx.add_patch(r)
        i = str(w).translate(SUB)
        label = f"l{i}·f{i} = {part:.2f}" if part * width > 13 else (f"{part:.2f}" if part * width > 5 else "")
        bx.text(0.3 + (x + part / 2) * width, 16.3, label, ha="center", va="center", fontsize=10, color="white",
                fontweight="bold")
        parts.append((w, float(part)))
        x += part
    bound = 1e-15
    assert gap < bound, gap  # the caption's claim
    bx.text(0, 20.4, "out = Σ f_w·acc_w / L: decode_attention's output (in float64 they differ by under "
            f"{bound:.0e}).", fontsize=10.5, va="center")
    bx.text(0, 23.6, f"A warp that saw no slot (len = {empty_len}: warp 3) keeps m = −∞ and l = 0, so "
            f"f₃ = {ef[3]:g} and it adds\nnothing. Its own acc / l would be 0 / 0 = NaN: merge the raw "
            "states, never normalised ones.", fontsize=10.5, va="top", color=INK)
    return fig, {"scores": s, "bars": sorted(bars), "parts": parts, "m": m, "l": l, "f": f, "L": L, "M": M,
                 "out": out, "want": want, "gap": gap, "empty_f": ef, "context_len": context_len}
