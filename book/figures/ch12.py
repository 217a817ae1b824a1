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
from style import BLUE, GREY, GRID, INK, LIGHT, MUTED, ORANGE, RED


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
