"""Chapter 12's figure: a sliding window moving over a block table, freeing blocks to the
null block, beside a full layer's table, over one pool.

Every freed entry comes from pa_ref.hybrid.first_needed_block, the blocks from the
reference's BlockAllocator (block 0 reserved as the null block, as in the C++ manager),
in the C++ manager's order: a step first frees what its queries cannot see, then each
group (full first) takes its new blocks; after the step, what the next query cannot see
is freed. book/figures/test_figures.py reads the null cells back from the drawn patches.
"""

from pa_ref import BlockAllocator
from pa_ref.hybrid import first_needed_block, visible_range

import style as st
from style import BLUE, GREY, GRID, INK, LIGHT, MUTED, ORANGE, PINK, RED


def _blocks(n, bs):
    return -(-n // bs)


def hybrid_window(window=6, block_size=4, chunks=(9, 3, 4, 4, 4), num_blocks=16):
    """One sequence in a full group and a sliding group (window `window`); a row per step."""
    bs, null = block_size, 0
    pool = BlockAllocator(num_blocks)
    assert pool.allocate() == null  # a fresh pool hands out block 0 first: reserved
    tables = {"full": [], "sliding": []}
    rows, length = [], 0

    def free_dead(next_pos):
        t = tables["sliding"]
        for i in range(min(first_needed_block(next_pos, window, bs), len(t))):
            if t[i] != null:
                pool.free(t[i])
                t[i] = null

    for n in chunks:
        free_dead(length)  # this step's queries start at `length`
        length += n
        taken = []
        for name in ("full", "sliding"):
            while len(tables[name]) < _blocks(length, bs):
                tables[name].append(pool.allocate())
                taken.append((name, tables[name][-1]))
        free_dead(length)  # after the step: the next query is at `length`
        rows.append({"length": length, "full": list(tables["full"]), "sliding": list(tables["sliding"]),
                     "taken": taken, "free": pool.num_free})

    tok_w, gap = 1.35, 0.45
    x_full, x_slide = 13.0, 56.0
    row_h = 4.2
    fig = st.figure(0.62 * len(rows) + 2.6)
    ax = st.bare_axes(fig, [0.02, 0.02, 0.96, 0.96], (0, 100), (-2.2, len(rows) * row_h + 8.4))
    ax.text(1, -1.0, "tokens", fontsize=10.5, fontweight="bold")
    ax.text(x_full, -1.0, "full group: its table", fontsize=10.5, fontweight="bold", color=BLUE)
    ax.text(x_slide, -1.0, f"sliding group (window {window}): its table", fontsize=10.5, fontweight="bold",
            color=ORANGE)
    info = []
    for r, row in enumerate(rows):
        y = r * row_h + 0.6
        L = row["length"]
        ax.text(1, y + 1.0, f"{L}", fontsize=10.5, va="center")
        first, last = visible_range(L, window)  # what the next query (position L) sees
        drawn = {}
        for name, x0, colour in (("full", x_full, BLUE), ("sliding", x_slide, ORANGE)):
            nulls = []
            for i, b in enumerate(row[name]):
                bx = x0 + i * (bs * tok_w + gap)
                dead = b == null
                for o in range(bs):
                    p = i * bs + o
                    fc = "white" if p >= L else (LIGHT[GREY] if dead else LIGHT[colour])
                    st.cell(ax, bx + o * tok_w, y, tok_w, 2.0, fc=fc, ec=GRID, lw=0.5)
                frame = st.cell(ax, bx, y, bs * tok_w, 2.0, fc="none", ec=MUTED if dead else colour, lw=1.2, z=3)
                if dead:
                    frame.set_gid(f"null-{name}-{r}")
                    nulls.append(i)
                ax.text(bx + bs * tok_w / 2, y + 1.0, "0" if dead else str(b), ha="center", va="center",
                        fontsize=10, color=MUTED if dead else INK, fontweight="normal" if dead else "bold", zorder=4)
            drawn[name] = nulls
            # The next query's window: positions first .. L (L is the token the next step writes).
            lo = first if name == "sliding" else 0
            xa = x0 + (lo // bs) * (bs * tok_w + gap) + (lo % bs) * tok_w
            xb = x0 + (L // bs) * (bs * tok_w + gap) + (L % bs + 1) * tok_w
            ax.plot([xa, xb], [y + 2.45, y + 2.45], color=RED if name == "sliding" else MUTED, lw=1.6)
            ax.plot([xb - tok_w, xb - tok_w, xb, xb, xb - tok_w], [y, y + 2.0, y + 2.0, y, y],
                    color=RED, lw=0.8, ls=(0, (2, 1.5)))
        info.append({"length": L, "null_full": drawn["full"], "null_sliding": drawn["sliding"],
                     "window": (first, last), "full": row["full"], "sliding": row["sliding"]})
    # The pool after the last step: one allocator for both groups.
    y = len(rows) * row_h + 0.7
    last = rows[-1]
    owner = {b: "full" for b in last["full"]}
    owner.update({b: "sliding" for b in last["sliding"] if b != null})
    ax.text(1, y + 1.0, "the pool", fontsize=10.5, va="center", fontweight="bold")
    pool_cells = []
    for b in range(num_blocks):
        x = x_full + b * 2.9
        who = "null" if b == null else owner.get(b, "free")
        fc = {"null": GREY, "full": LIGHT[BLUE], "sliding": LIGHT[ORANGE], "free": "white"}[who]
        c = st.cell(ax, x, y, 2.6, 2.0, fc=fc, ec=MUTED, lw=0.7)
        c.set_gid(f"pool-{who}")
        pool_cells.append(who)
        ax.text(x + 1.3, y + 1.0, str(b), ha="center", va="center", fontsize=10,
                color="white" if who == "null" else INK)
    # A block the sliding group gave back and the full group took later (the one pool).
    reused = next(((b, r2["length"]) for r1, row1 in enumerate(rows) for b in set(row1["sliding"]) - {null}
                   for r2 in rows[r1 + 1:] if b in r2["full"] and b not in row1["full"]), None)
    y += 3.2
    ax.text(1, y + 0.3, "The line under a table spans the keys the next query (the dashed cell) sees. Grey:",
            fontsize=10, color=MUTED)
    ax.text(1, y + 2.0, "dead entries, pointing at the null block 0 (never read); their blocks went back to",
            fontsize=10, color=MUTED)
    ax.text(1, y + 3.7, "the pool, which hands them to either group" +
            (f" (block {reused[0]} is the full group's at {reused[1]} tokens)" if reused else "") +
            f". {last['free']} free.", fontsize=10, color=MUTED)
    return fig, {"rows": info, "window": window, "block_size": bs, "free": rows[-1]["free"],
                 "num_blocks": num_blocks, "pool": pool_cells, "reused": reused}


def window_mask(window=16, seq_len=44, new=6, group=2, piece=16):
    """A tile of query rows (new tokens x the G query heads of one KV head, row i * G + h)
    over a sequence's keys: which keys each row sees with a sliding window (pa_ref.window.
    first_key, causal on the right), the sink every row adds to its softmax's denominator,
    and the 16-key pieces the kernel loads (those no row sees are never read)."""
    from pa_ref.window import first_key

    rows = [(i, h, seq_len - new + i) for i in range(new) for h in range(group)]
    fig = st.figure(4.3)
    ax = st.bare_axes(fig, [0.02, 0.02, 0.96, 0.96], (0, 100), (0, 46))
    ax.text(1, 1.5, f"A tile of {len(rows)} rows ({new} new tokens × {group} heads) over {seq_len} keys, "
            f"window {window}, with sinks", fontsize=10.5, fontweight="bold", va="center")
    x_sink, x0, kw, rh, y0 = 15.0, 20.0, 1.75, 2.0, 7.0
    ax.text(1, y0 - 1.6, "row", fontsize=9.6, color=MUTED, va="center")
    ax.text(13.6, y0 - 1.6, "pos", fontsize=9.6, color=MUTED, va="center", ha="right")
    ax.text(x_sink + 1.4, y0 - 1.6, "sink", fontsize=9.6, ha="center", va="center", color=MUTED)
    for k in range(0, seq_len, 4):
        ax.text(x0 + (k + 0.5) * kw, y0 - 1.6, str(k), ha="center", va="center", fontsize=9.4, color=MUTED)
    info = {"rows": [], "pieces": [], "window": window, "seq_len": seq_len, "new": new, "group": group}
    for r, (i, h, pos) in enumerate(rows):
        y = y0 + r * rh
        ax.text(1, y + rh / 2, f"{r}: t{i} h{h}", fontsize=9.6, va="center")
        ax.text(13.6, y + rh / 2, str(pos), fontsize=9.6, va="center", ha="right")
        p = st.cell(ax, x_sink, y, 2.8, rh, fc=PINK, ec="white", lw=0.8, gid="sink")
        p.set_label(f"{r}:{h}")
        ax.text(x_sink + 1.4, y + rh / 2, f"z{h}", ha="center", va="center", fontsize=9.4, color="white",
                fontweight="bold")
        lo = first_key(pos, window)
        seen = []
        for k in range(seq_len):
            if lo <= k <= pos:
                fc, gid = BLUE, "seen"
                seen.append(k)
            elif k < lo:
                fc, gid = LIGHT[GREY], "left"
            else:
                fc, gid = "white", "future"
            c = st.cell(ax, x0 + k * kw, y, kw, rh, fc=fc, ec="white" if gid != "future" else GRID, lw=0.5, gid=gid)
            c.set_label(f"{r}:{k}")
        info["rows"].append({"row": r, "token": i, "head": h, "pos": pos, "seen": seen})
    # The pieces of 16 keys the loads move in: what the tile's rows see of each.
    yp = y0 + len(rows) * rh + 0.8
    union = {k for row in info["rows"] for k in row["seen"]}
    for p0 in range(0, seq_len, piece):
        p1 = min(p0 + piece, seq_len)
        seen = [k for k in range(p0, p1) if k in union]
        if not seen:
            kind, fc, text = "unread", "white", "never loaded"
        elif all(all(k in row["seen"] or k > row["pos"] for k in range(p0, p1)) for row in info["rows"]):
            kind, fc, text = "causal", LIGHT[BLUE], "the causal edge"
        else:
            kind, fc, text = "cut", LIGHT[ORANGE], "cut by the window"
        c = st.cell(ax, x0 + p0 * kw, yp, (p1 - p0) * kw, 2.4, fc=fc, ec=INK, lw=1.0,
                    hatch="///" if kind == "unread" else None, gid=f"piece-{kind}")
        c.set_label(f"{p0}:{p1}")
        info["pieces"].append((p0, p1, kind))
        ax.text(x0 + (p0 + p1) / 2 * kw, yp + 1.2, f"{p0}–{p1 - 1}: {text}", ha="center", va="center",
                fontsize=9.4, bbox=dict(facecolor="white", edgecolor="none", pad=0.4) if kind == "unread" else None)
        ax.plot([x0 + p0 * kw] * 2, [y0 - 0.5, yp + 2.4], color=INK, lw=0.9, zorder=5)
    ax.text(x_sink - 0.6, yp + 1.2, "pieces", ha="right", va="center", fontsize=9.6, color=MUTED)
    yt = yp + 5.2
    texts = [f"Blue: the keys a row sees, [pos − {window - 1}, pos], its own included; grey: left of its window; "
             "white: its",
             "future. A token's rows (its heads) share a position, so the window's edge moves one key every "
             f"{group} rows.",
             "Pink: the row's head's sink z_h, one more logit in the softmax's denominator, with no value:",
             "out = Σ e^(s_k − m) v_k / (e^(z_h − m) + Σ e^(s_k − m)). Split over chunks, it joins one of them."]
    for j, t in enumerate(texts):
        ax.text(1, yt + 2.2 * j, t, fontsize=9.6, va="center", color=MUTED)
    info["ax"] = ax
    return fig, info
