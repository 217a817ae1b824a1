"""The book's explanatory figures, drawn from the reference's own definitions.

    python book/figures/figures.py OUT_DIR        (make book: book/src/generated/figures)

Every layout and every schedule drawn here comes from reference/pa_ref: the pool layouts
(paged.k_pool_index, v_pool_index), the write (reshape_and_cache), the block managers
(BlockManager, build_batch, SharedBlockManager), the kernels' work maps (work_maps),
v2's partitions (decode_partitions, merge_partitions), e4m3 (fp8) and the chapter 10
planner (planner). Each figure function returns (fig, info); info holds what the figure
highlights, read back from the drawn patches, and book/figures/test_figures.py checks
it against the reference's offsets.
"""

import math
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "reference"))
sys.path.insert(0, str(HERE))

import pa_ref  # noqa: E402
from pa_ref import work_maps as wm  # noqa: E402
from pa_ref.paged import blocks_for, token_slot  # noqa: E402
from matplotlib.legend_handler import HandlerTuple  # noqa: E402
from matplotlib.patches import FancyArrowPatch, Rectangle  # noqa: E402

import style as st  # noqa: E402
import appendix_b  # noqa: E402  (Appendix B's figure)
import ch01  # noqa: E402  (chapter 1's figures)
import ch08  # noqa: E402  (chapter 8's figures)
import ch10  # noqa: E402  (chapter 10's kernel figures)
import ch11  # noqa: E402  (chapter 11's figures)
import ch12  # noqa: E402  (chapter 12's figure)
import ch13  # noqa: E402  (chapter 13's figures)
from style import (BLUE, GREEN, GREY, GRID, INK, LIGHT, MUTED, ORANGE, PINK, RED,  # noqa: E402
                   SEQ_COLOURS, SKY)


def arrow(ax, xy_from, xy_to, colour=INK, lw=1.2, style="-|>", rad=0.0, z=5, shrinkA=2, **kw):
    a = FancyArrowPatch(xy_from, xy_to, arrowstyle=style, mutation_scale=11, color=colour,
                        linewidth=lw, connectionstyle=f"arc3,rad={rad}", zorder=z,
                        shrinkA=shrinkA, shrinkB=2, **kw)
    ax.add_patch(a)
    return a


def tagged(ax, tag):
    """The patches of ax that carry gid `tag` (the cells a test reads back)."""
    return [p for p in ax.patches if p.get_gid() == tag]


def cells_of(ax, tag):
    """(x, y) of the lower-left corner of each patch tagged `tag`, as integers."""
    return sorted((int(round(p.get_x())), int(round(p.get_y()))) for p in tagged(ax, tag))


# --------------------------------------------------------------------------- chapter 1/2

def dense_vs_paged(num_rows=6, block_size=16):
    """The first requests of the course's trace in a dense cache and in a paged one."""
    prompts, outputs = pa_ref.synthetic_trace()
    cfg = pa_ref.KVConfig()
    dense = pa_ref.dense_memory_report(prompts, outputs, cfg)
    paged = pa_ref.paged_memory_report(prompts, outputs, cfg, block_size=block_size)
    L = cfg.max_seq_len

    fig = st.figure(4.8)
    axes = []
    for k, (title, top) in enumerate([("Dense: every request reserves max_seq_len = 2048 slots", 0.555),
                                      (f"Paged: blocks of {block_size} slots, taken as the request grows", 0.115)]):
        ax = fig.add_axes([0.13, top, 0.84, 0.32])
        ax.set_xlim(0, L)
        ax.set_ylim(num_rows - 0.4, -0.6)
        ax.set_title(title, loc="left", fontsize=11.5)
        ax.set_yticks(range(num_rows), [f"request {i}" for i in range(num_rows)])
        ax.tick_params(axis="y", length=0)
        for side in ("top", "right", "left"):
            ax.spines[side].set_visible(False)
        ax.set_xticks([0, 512, 1024, 1536, 2048])
        if k == 1:
            ax.set_xlabel("token slots")
        axes.append(ax)
    rows = []
    for i in range(num_rows):
        p, o = int(prompts[i]), int(outputs[i])
        used = p + o
        paged_res = blocks_for(used, block_size) * block_size
        for ax, reserved in ((axes[0], L), (axes[1], paged_res)):
            ax.add_patch(Rectangle((0, i - 0.35), p, 0.7, facecolor=BLUE, gid="prompt"))
            ax.add_patch(Rectangle((p, i - 0.35), o, 0.7, facecolor=SKY, gid="output"))
            ax.add_patch(Rectangle((used, i - 0.35), reserved - used, 0.7, facecolor=ORANGE,
                                   edgecolor=ORANGE, linewidth=0.5, gid="waste"))
        for b in range(1, blocks_for(used, block_size)):  # the block boundaries
            axes[1].plot([b * block_size] * 2, [i - 0.35, i + 0.35], color="white", lw=0.35)
        rows.append({"used": used, "dense_reserved": L, "paged_reserved": paged_res})
    gib = 1 << 30
    box = dict(boxstyle="round,pad=0.35", facecolor="white", edgecolor=GRID)
    axes[0].text(L - 30, num_rows - 1.5,
                 f"whole trace, 256 requests:\n{dense['reserved_bytes'] / gib:.0f} GiB reserved, "
                 f"{dense['used_bytes'] / gib:.1f} GiB used:\n{100 * dense['waste_fraction']:.1f}% never written",
                 ha="right", va="center", fontsize=10.5, color=INK, bbox=box, zorder=6)
    axes[1].text(L - 30, num_rows - 1.5,
                 f"whole trace: {paged['reserved_bytes'] / gib:.1f} GiB reserved,\n"
                 f"{100 * paged['waste_fraction']:.1f}% never written\n(the unfilled ends of last blocks)",
                 ha="right", va="center", fontsize=10.5, color=INK, bbox=box, zorder=6)
    handles = [Rectangle((0, 0), 1, 1, facecolor=c) for c in (BLUE, SKY, ORANGE)]
    fig.legend(handles, ["prompt", "output", "reserved, never written"], loc="upper right",
               ncol=3, frameon=False, bbox_to_anchor=(0.98, 0.995))
    return fig, {"rows": rows, "dense": dense, "paged": paged, "axes": axes}


def slot_lookup(block_list=(7, 2, 11), length=40, position=35, block_size=16, num_blocks=12):
    """Chapter 2's example: position 35 of a sequence whose blocks are [7, 2, 11]."""
    bs = block_size
    logical, offset = divmod(position, bs)
    slot = token_slot(list(block_list), position, bs)
    fig = st.figure(3.9)
    per_row = num_blocks // 2
    width = per_row * (bs + 2)
    ax = st.bare_axes(fig, [0.01, 0.02, 0.97, 0.96], (-17, width), (-1.5, 19.2))
    cw = 1.0  # one token slot
    # The sequence's logical blocks.
    ax.text(-16.5, 0.8, "the sequence,\nlogical blocks", va="center", fontsize=10.5)
    for j in range(len(block_list)):
        x0 = j * (bs + 2) * cw
        ax.text(x0 + bs / 2, -0.5, f"tokens {j * bs}–{j * bs + bs - 1}", ha="center", fontsize=10)
        for o in range(bs):
            t = j * bs + o
            fc = LIGHT[BLUE] if t < length else "white"
            st.cell(ax, x0 + o, 0.3, fc=fc)
        if j == logical:
            st.cell(ax, x0 + offset, 0.3, fc=RED, ec=INK, lw=1.2, z=3, gid="token")
            ax.text(x0 + bs + 0.6, 0.8, f"token {position}", ha="left", va="center", fontsize=10.5,
                    color=RED, fontweight="bold")
    # The block table row.
    ax.text(-16.5, 5.5, "its row of\nblock_table", va="center", fontsize=10.5)
    for j, b in enumerate(block_list):
        x0 = j * (bs + 2) + bs / 2 - 2
        st.cell(ax, x0, 4.8, 4, 1.4, fc=LIGHT[GREY] if j != logical else LIGHT[RED], ec=INK, lw=1)
        ax.text(x0 + 2, 5.5, str(b), ha="center", va="center", fontsize=12, fontweight="bold")
        arrow(ax, (j * (bs + 2) + bs / 2, 1.4), (x0 + 2, 4.8), colour=MUTED, lw=1)
    # The pool: two rows of physical blocks.
    ax.text(-16.5, 13.0, "the pool:\nphysical\nblocks", va="center", fontsize=10.5)
    pos = {}
    for b in range(num_blocks):
        r, c = divmod(b, per_row)
        x0, y0 = c * (bs + 2), 10.2 + r * 5.2
        pos[b] = (x0, y0)
        owned = b in block_list
        ax.text(x0 + bs / 2, y0 - 0.4, f"block {b}", ha="center", fontsize=10,
                fontweight="bold" if owned else "normal", color=INK if owned else MUTED)
        for o in range(bs):
            fc = "white"
            if owned:
                j = block_list.index(b)
                fc = LIGHT[BLUE] if j * bs + o < length else "white"
            st.cell(ax, x0 + o, y0, fc=fc, ec=GRID if not owned else MUTED)
        if owned:
            st.cell(ax, x0, y0, bs, 1, fc="none", ec=BLUE, lw=1.6, z=2)
    for j, b in enumerate(block_list):
        x0, y0 = pos[b]
        arrow(ax, (j * (bs + 2) + bs / 2, 6.2), (x0 + bs / 2, y0 - 1.5),
              colour=RED if j == logical else MUTED, lw=1.6 if j == logical else 1)
    x0, y0 = pos[block_list[logical]]
    st.cell(ax, x0 + offset, y0, fc=RED, ec=INK, lw=1.2, z=3, gid="slot")
    ax.text(x0 + bs, y0 + 2.7,
            f"logical block {position} / {bs} = {logical} → block {block_list[logical]}, offset {position} % {bs} = {offset}:"
            f"  slot = {block_list[logical]} × {bs} + {offset} = {slot}",
            ha="right", fontsize=10.5, color=RED, fontweight="bold")
    return fig, {"ax": ax, "slot_cell": cells_of(ax, "slot"), "pos": pos, "slot": slot,
                 "block_list": list(block_list), "position": position, "block_size": bs}


def kv_layout(block=3, head=1, d=9, offset=5, num_kv_heads=2, head_size=64, block_size=16, x=8):
    """Chapter 2's worked example: block 3 of the K and V pools, element (h 1, d 9) of the
    token at offset 5, each pool drawn as its memory order, 128 elements a row."""
    H, D, bs = num_kv_heads, head_size, block_size
    per_block = H * D * bs
    cols = bs * x                      # 128: one K chunk of every token, a grid row
    rows = per_block // cols
    start = block * per_block
    fig = st.figure(8.0)
    info = {"start": start, "cols": cols}
    for name, index, top in [("K", pa_ref.k_pool_index, 0.535), ("V", pa_ref.v_pool_index, 0.065)]:
        ax = st.bare_axes(fig, [0.17, top, 0.81, 0.40], (0, cols), (-4.2, rows + 3.6))
        args = (H, D, bs, x) if name == "K" else (H, D, bs)
        mine = {index(block, h, dd, offset, *args) - start for h in range(H) for dd in range(D)}
        target = index(block, head, d, offset, *args)
        r, c = divmod(target - start, cols)
        # The grid: one cell per element, a row per `cols` consecutive elements.
        ax.vlines(range(cols + 1), 0, rows, color="#d4d4d4", lw=0.3, zorder=1)
        ax.hlines(range(rows + 1), 0, cols, color="#d4d4d4", lw=0.3, zorder=1)
        for flat in sorted(mine):
            tr, tc = divmod(flat, cols)
            st.cell(ax, tc, tr, fc=LIGHT[ORANGE], ec="none", lw=0, z=0.5, gid="token")
        st.cell(ax, c, r, fc=RED, ec=INK, lw=0.8, z=3, gid="element")
        group = x if name == "K" else bs
        ax.vlines(range(0, cols + 1, group), 0, rows, color=MUTED, lw=0.8, zorder=2)
        ax.hlines([0, rows / 2, rows], 0, cols, color=INK, lw=1.2, zorder=2)
        per_head = rows // H
        for rr in [hh * per_head for hh in range(H)] + [rows - 1]:  # each head's first row, the last
            sub = rr % per_head
            label = f"c {sub}" if name == "K" else f"d {8 * sub}–{8 * sub + 7}"
            ax.text(-0.8, rr + 0.5, label, ha="right", va="center", fontsize=9.6, color=MUTED)
        sub = r % per_head  # the element's row is named in its label, not beside its neighbours'
        where = f"chunk {sub}" if name == "K" else f"row d {8 * sub}–{8 * sub + 7}"
        for hh in range(H):
            ax.text(-17, rows / H * hh + rows / (2 * H), f"head {hh}", ha="center", va="center",
                    fontsize=10.5, fontweight="bold", rotation=90)
        if name == "K":
            ax.set_title(f"K pool, block {block}: [Hkv {H}][D/x {D // x}][bs {bs}][x {x}]", loc="left",
                         fontsize=11.5)
            ax.text(cols, -3.3, f"a row: chunk c (dims 8c..8c+7) of all {bs} tokens, {x} elements each",
                    ha="right", fontsize=10, color=MUTED)
            for o in range(bs):
                ax.text(o * x + x / 2, -0.5, str(o), ha="center", fontsize=9.6)
            ax.text(-0.8, -0.5, "token slot", ha="right", fontsize=9.6, color=MUTED)
        else:
            ax.set_title(f"V pool, block {block}: [Hkv {H}][D {D}][bs {bs}]", loc="left", fontsize=11.5)
            ax.text(cols, -3.3, f"a row: 8 dims, each a run of the {bs} tokens", ha="right",
                    fontsize=10, color=MUTED)
            for j in range(cols // bs):
                ax.text(j * bs + bs / 2, -0.5, f"d+{j}", ha="center", fontsize=9.6)
        ax.annotate(f"{name}[{target}]: head {head}, d {d} ({where}), slot {offset}", xy=(c + 0.5, r + 0.5),
                    xytext=(c + 8, rows + 3.0), fontsize=10.5, color=RED,
                    fontweight="bold", arrowprops=dict(arrowstyle="-|>", color=RED, lw=1.2))
        info[name] = {"ax": ax, "element": cells_of(ax, "element"), "token": cells_of(ax, "token"),
                      "target": target}
    fig.text(0.03, 0.012, f"One block is {H} × {D} × {bs} = {per_block} elements, {cols} a row here; "
             f"block {block} starts at {start}.\nOrange: the token at slot {offset}; red: its element "
             f"(head {head}, d {d}).", fontsize=10, color=INK)
    return fig, info


def reshape_slots(slot_mapping=(21, 22, 23, -1, 5, 30), num_blocks=4, block_size=8):
    """reshape_and_cache: token i's K goes to slot slot_mapping[i] = block * bs + offset.
    The cells drawn are the ones the reference's write fills."""
    bs, H, D, x = block_size, 1, 8, 8
    T = len(slot_mapping)
    k = np.arange(T, dtype=np.float64)[:, None, None] * np.ones((1, H, D))
    k_pool = np.full((num_blocks, H, D // x, bs, x), np.nan)
    v_pool = np.full((num_blocks, H, D, bs), np.nan)
    pa_ref.reshape_and_cache(k, k.copy(), k_pool, v_pool, np.array(slot_mapping))
    written = {}  # token -> (block, offset) where the reference wrote it
    for b in range(num_blocks):
        for o in range(bs):
            val = k_pool[b, 0, 0, o, 0]
            if not np.isnan(val):
                written[int(val)] = (b, o)

    fig = st.figure(3.3)
    ax = st.bare_axes(fig, [0.02, 0.02, 0.96, 0.96], (-1, 30), (-1.6, T * 1.3 + 1.4))
    ax.text(0, -0.9, "new tokens, slot_mapping", fontsize=10.5, fontweight="bold")
    ax.text(15, -0.9, f"the pool: {num_blocks} blocks × {bs} slots", fontsize=10.5,
            fontweight="bold")
    ax.text(15, 7.9, "block = slot / 8, offset = slot % 8; each written\nslot holds the number of its token",
            fontsize=10, color=MUTED, va="top")
    for i, s in enumerate(slot_mapping):
        y = i * 1.3
        colour = SEQ_COLOURS[i % 6] if s >= 0 else GREY
        st.cell(ax, 0, y, 3.2, 1.0, fc=LIGHT.get(colour, "#eee"), ec=colour, lw=1.2)
        ax.text(1.6, y + 0.5, f"token {i}", ha="center", va="center", fontsize=10.5)
        if s >= 0:
            b, o = divmod(s, bs)
            ax.text(3.6, y + 0.5, f"slot {s} = {b} × {bs} + {o}", va="center", fontsize=10.5)
        else:
            ax.text(3.6, y + 0.5, "slot −1: padding, skipped", va="center", fontsize=10.5, color=MUTED)
    by = {}
    for b in range(num_blocks):
        y = b * 1.6 + 0.2
        by[b] = y
        ax.text(14.6, y + 0.5, f"block {b}", ha="right", va="center", fontsize=10.5)
        for o in range(bs):
            st.cell(ax, 15 + o * 1.8, y, 1.8, 1.0, fc="white", ec=GRID)
    for b in range(num_blocks):
        for o in range(bs):
            ax.text(15 + o * 1.8 + 0.9, by[num_blocks - 1] + 1.55, f"{o}", ha="center", fontsize=10,
                    color=MUTED) if b == 0 else None
    ax.text(14.6, by[num_blocks - 1] + 1.55, "offset", ha="right", fontsize=10, color=MUTED)
    for i, (b, o) in sorted(written.items()):
        colour = SEQ_COLOURS[i % 6]
        r = st.cell(ax, 15 + o * 1.8, by[b], 1.8, 1.0, fc=colour, ec=INK, lw=0.8, z=3, gid="written")
        r.set_label(f"{i}")
        ax.text(15 + o * 1.8 + 0.9, by[b] + 0.5, str(i), ha="center", va="center", fontsize=10,
                color="white", fontweight="bold", zorder=4)
    cells = {int(p.get_label()): (int(round((p.get_x() - 15) / 1.8)), [b for b, y in by.items()
             if abs(y - p.get_y()) < 1e-6][0]) for p in tagged(ax, "written")}
    return fig, {"cells": {i: (b, o) for i, (o, b) in cells.items()}, "slot_mapping": list(slot_mapping),
                 "block_size": bs}


def block_table(block_size=16, num_blocks=8):
    """Chapter 3's tour: three sequences, prefill 15, 31 and 16 tokens, then three decode
    steps, through the reference's BlockManager and build_batch; the last step's table."""
    bs = block_size
    m = pa_ref.BlockManager(num_blocks, bs)
    seqs = [100, 101, 102]
    for s in seqs:
        m.add_sequence(s)
    pa_ref.build_batch(m, seqs, [15, 31, 16])
    for _ in range(2):
        pa_ref.build_batch(m, seqs, [1, 1, 1])
    batch = pa_ref.build_batch(m, seqs, [1, 1, 1])
    table, lens, slots = batch["block_table"], batch["context_lens"], batch["slot_mapping"]
    owner, filled = {}, {}
    for i, s in enumerate(seqs):
        for j, b in enumerate(m.block_list(s)):
            owner[b] = i
            filled[b] = min(bs, m.length(s) - j * bs)

    fig = st.figure(4.0)
    ax = st.bare_axes(fig, [0.02, 0.02, 0.96, 0.96], (-0.5, 46), (-2.0, 17.6))
    ax.text(0, -1.0, "block_table", fontsize=11, fontweight="bold")
    rows_y = [2.0 + i * 3.2 for i in range(len(seqs))]
    for i, s in enumerate(seqs):
        y = rows_y[i]
        colour = SEQ_COLOURS[i]
        ax.text(0, y - 0.35, f"seq {s}", fontsize=10.5, color=colour, fontweight="bold")
        ax.text(4.6, y - 0.35, f"context_lens = {int(lens[i])}", fontsize=10.5, color=INK)
        for j in range(table.shape[1]):
            b = int(table[i, j])
            st.cell(ax, j * 3.2, y, 3.0, 1.5, fc=LIGHT[colour] if b >= 0 else "white",
                    ec=colour if b >= 0 else GRID, lw=1.2)
            ax.text(j * 3.2 + 1.5, y + 0.75, str(b), ha="center", va="center", fontsize=11,
                    color=INK if b >= 0 else MUTED)
    ax.text(0, 12.6, "slot_mapping: " + ", ".join(str(int(s)) for s in slots), fontsize=11,
            fontweight="bold")
    ax.text(0, 13.6, "this step's new tokens,\noutlined in the pool", fontsize=10, color=MUTED, va="top")
    # The pool, one row per block.
    cw, x0 = 1.0, 19.5
    pos = {}
    for b in range(num_blocks):
        y0 = b * 2.1
        pos[b] = (x0, y0)
        ax.text(x0 - 0.4, y0 + 0.7, f"block {b}", ha="right", va="center", fontsize=10.5)
        for o in range(bs):
            colour = SEQ_COLOURS[owner[b]] if b in owner else None
            fc = colour if (b in owner and o < filled[b]) else (LIGHT[colour] if b in owner else "white")
            st.cell(ax, x0 + o * cw, y0, cw, 1.4, fc=fc, ec="white" if b in owner else GRID, lw=0.6)
    for s in slots:
        b, o = divmod(int(s), bs)
        st.cell(ax, pos[b][0] + o * cw, pos[b][1], cw, 1.4, fc="none", ec=INK, lw=1.8, z=4, gid="new")
    ax.text(x0, num_blocks * 2.1 + 0.3, f"{bs} slots a block; filled ones in the owner's colour",
            fontsize=10, color=MUTED, va="top")
    for i, sq in enumerate(seqs):
        for j in range(table.shape[1]):
            b = int(table[i, j])
            if b >= 0:
                ax.text(x0 + bs * cw + 0.5, pos[b][1] + 0.7, f"seq {sq}, logical block {j}",
                        va="center", fontsize=10, color=SEQ_COLOURS[i])
    new = [(int(round((p.get_x() - pos[b][0]) / cw)), b) for p in tagged(ax, "new")
           for b in pos if abs(p.get_y() - pos[b][1]) < 1e-6]
    return fig, {"manager": m, "batch": batch, "new_cells": sorted((b, o) for o, b in new), "block_size": bs}


# --------------------------------------------------------------------------- chapter 4

def v1_lanes(context_len=100, block_size=16, head_size=64, x=8):
    """Chapter 4: warps take KV blocks in turn; inside a block, lane (o, g) loads chunks
    g, g + G, ... of token o, so one load instruction of the warp reads 512 contiguous
    bytes; for V, lane l owns output rows l and l + 32."""
    bs, G = block_size, 32 // block_size
    chunks = head_size // x
    nblk = blocks_for(context_len, bs)
    warp_colours = [BLUE, ORANGE, GREEN, PINK]
    fig = st.figure(7.0)
    # (a) the walk
    ax = st.bare_axes(fig, [0.03, 0.80, 0.94, 0.15], (-0.5, nblk * 5.3), (-0.2, 2.6))
    fig.text(0.03, 0.965, f"(a) A sequence of {context_len} tokens in blocks of {bs}: warp w takes "
             f"blocks w, w + 4, ...", fontsize=11, fontweight="bold")
    for j in range(nblk):
        w = wm.v1_warp_of_block(j)
        valid = wm.v1_valid_tokens(j, context_len, bs)
        x0 = j * 5.3
        for o in range(bs):
            fc = warp_colours[w] if o < valid else "white"
            st.cell(ax, x0 + o * 5.0 / bs, 0.0, 5.0 / bs, 1.1, fc=fc, ec="white" if o < valid else GRID,
                    lw=0.4, gid="walk")
        st.cell(ax, x0, 0.0, 5.0, 1.1, fc="none", ec=INK, lw=0.8, z=2)
        ax.text(x0 + 2.5, 1.45, f"block {j}\nwarp {w}" + (f", valid {valid}" if valid < bs else ""),
                ha="center", va="top", fontsize=10)
    # (b) the K loads
    ax = st.bare_axes(fig, [0.12, 0.33, 0.86, 0.365], (0, bs + 6.5), (-0.9, chunks + 0.2))
    fig.text(0.03, 0.745, f"(b) Scores: a block's K as [D/x {chunks}][bs {bs}] chunks of 16 bytes "
             f"(fp16, D {head_size}), in memory\n     order; a cell shows the lane that loads it "
             f"(G = {G} lanes per token)", fontsize=11, fontweight="bold", va="top")
    round_fill = [LIGHT[SKY], "white"]
    for lane in range(32):
        o, g = wm.v1_lane_token(lane, bs)
        for r, c in enumerate(wm.v1_lane_chunks(lane, bs, head_size, x)):
            p = st.cell(ax, o, c, fc=round_fill[r % 2], ec=GRID, lw=0.6, gid="kchunk")
            p.set_label(str(lane))
            ax.text(o + 0.5, c + 0.5, str(lane), ha="center", va="center", fontsize=10,
                    color=BLUE if g == 0 else RED)
    for o in range(bs):
        ax.text(o + 0.5, -0.35, str(o), ha="center", fontsize=10)
    ax.text(-0.3, -0.35, "token", ha="right", fontsize=10, color=MUTED)
    for c in range(chunks):
        ax.text(-0.2, c + 0.5, f"chunk {c}", ha="right", va="center", fontsize=10, color=MUTED)
    for r in range(-(-chunks // G)):
        ax.plot([bs + 0.2, bs + 0.2], [r * G + 0.1, r * G + G - 0.1], color=INK, lw=1.5)
        ax.text(bs + 0.45, r * G + G / 2, f"load {r}: bytes\n{r * 512}–{r * 512 + 511}",
                va="center", fontsize=10)
    # (c) the V rows
    ax = st.bare_axes(fig, [0.12, 0.04, 0.86, 0.17], (0, 32 + 2.9), (-0.3, 2.2))
    fig.text(0.03, 0.265, f"(c) Weighted sum of V: lane l owns output rows d = l and l + 32; row d of the "
             f"block's V\n     is its {bs} tokens side by side (two 16-byte loads)", fontsize=11,
             fontweight="bold", va="top")
    for lane in range(32):
        for k, d in enumerate(wm.v1_lane_rows(lane, head_size)):
            p = st.cell(ax, d % 32, k, fc=LIGHT[GREEN] if k == 0 else LIGHT[PINK], ec=GRID, gid="vrow")
            p.set_label(f"{lane}:{d}")
            ax.text(d % 32 + 0.5, k + 0.5, str(lane), ha="center", va="center", fontsize=9.6)
    ax.text(-0.2, 0.5, "d 0–31", ha="right", va="center", fontsize=10, color=MUTED)
    ax.text(-0.2, 1.5, "d 32–63", ha="right", va="center", fontsize=10, color=MUTED)
    ax.text(32.3, 1.0, "lane", va="center", fontsize=10, color=MUTED)
    axes = fig.axes
    return fig, {
        "walk": [(j, wm.v1_warp_of_block(j)) for j in range(nblk)],
        "kchunks": [(int(p.get_label()), int(round(p.get_x())), int(round(p.get_y())))
                    for p in tagged(axes[1], "kchunk")],
        "vrows": [tuple(int(v) for v in p.get_label().split(":")) for p in tagged(axes[2], "vrow")],
        "block_size": bs, "head_size": head_size, "x": x}


# --------------------------------------------------------------------------- chapter 5

def v2_partitions(context_len=1300, block_size=16, head_size=16, seed=5):
    """Chapter 5: a sequence cut into 512-token partitions, each one thread block's
    (m_p, l_p, o_p) from the reference's decode_partitions, and the merge."""
    P = pa_ref.PARTITION_SIZE
    rng = np.random.default_rng(seed)
    n, bs, D = context_len, block_size, head_size
    nblk = blocks_for(n, bs)
    q = rng.standard_normal((1, 1, D))
    k_dense = rng.standard_normal((nblk * bs, 1, D))
    v_dense = rng.standard_normal((nblk * bs, 1, D))
    # A stretch of keys close to the query: partition 1 holds the largest scores.
    k_dense[700:760, 0] += 0.55 * q[0, 0]
    perm = rng.permutation(nblk + 3)[:nblk]
    x = 8
    k_pool = np.full((nblk + 3, 1, D // x, bs, x), np.nan)
    v_pool = np.full((nblk + 3, 1, D, bs), np.nan)
    slots = [token_slot(list(perm), t, bs) for t in range(n)]
    pa_ref.reshape_and_cache(k_dense[:n], v_dense[:n], k_pool, v_pool, np.array(slots))
    table = np.array([perm], dtype=np.int32)
    scale = 1 / math.sqrt(D)
    m, l, o = pa_ref.decode_partitions(q, k_pool, v_pool, table, [n], scale, bs)
    out = pa_ref.merge_partitions(m, l, o)
    k_read, _ = pa_ref.paged_gather(k_pool, v_pool, table, [n], nblk * bs)
    scores = scale * k_read[0, :n, 0] @ q[0, 0]
    nparts = -(-n // P)
    M = m[0, 0, :nparts].max()
    w = l[0, 0, :nparts] * np.exp(m[0, 0, :nparts] - M)

    sub = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")
    fig = st.figure(5.2)
    ax = fig.add_axes([0.09, 0.42, 0.88, 0.41])
    fills = [LIGHT[BLUE], LIGHT[ORANGE], LIGHT[GREEN], LIGHT[PINK]]
    spans = []
    for p in range(nparts):
        a, b = wm.partition_tokens(p, n, P)
        spans.append((a, b))
        ax.axvspan(a, b, color=fills[p % 4], zorder=0, gid="partition")
        blocks = wm.partition_blocks(p, n, bs, P)
        ax.text((a + b) / 2, 1.02, f"partition {p}\ntokens {a}–{b - 1}\n{len(blocks)} blocks",
                transform=ax.get_xaxis_transform(), ha="center", va="bottom", fontsize=10)
        ax.plot([a, b], [m[0, 0, p]] * 2, color=RED, lw=1.6, ls="--", zorder=3)
        ax.text(b - 8, m[0, 0, p] + 0.1, f"m{p}".translate(sub), color=RED, ha="right", va="bottom",
                fontsize=11, fontweight="bold")
    ax.scatter(np.arange(n), scores, s=2.5, color=INK, zorder=2, linewidths=0)
    ax.set_xlim(0, n)
    ax.set_xlabel("token position (one thread block per partition)")
    ax.set_ylabel("score q·k / √D")
    ax.set_xticks([0, 512, 1024, n])
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    # The merge.
    bx = st.bare_axes(fig, [0.02, 0.02, 0.96, 0.29], (0, 100), (0, 10))
    for p in range(nparts):
        x0 = 1 + p * 20
        st.cell(bx, x0, 0.4, 18.5, 5.6, fc=fills[p % 4], ec=MUTED, lw=0.8)
        i = str(p).translate(sub)
        bx.text(x0 + 9.25, 3.2, f"m{i} = {m[0, 0, p]:.2f}\nl{i} = {l[0, 0, p]:.1f}\nw{i} = {w[p]:.1f}",
                ha="center", va="center", fontsize=10.5)
    bx.plot([1, 1 + 20 * nparts - 1.5], [6.6, 6.6], color=MUTED, lw=1.2)
    arrow(bx, (1 + 20 * nparts - 1.5, 6.6), (63.5, 4.6), colour=MUTED, lw=1.2)
    st.cell(bx, 63.5, 0.4, 35.5, 5.6, fc="white", ec=INK, lw=1.0)
    bx.text(81.25, 3.2, f"M = max m_p = {M:.2f}\nw_p = l_p · e^(m_p − M)\nout = Σ w_p o_p / Σ w_p",
            ha="center", va="center", fontsize=10.5)
    bx.text(1, 8.2, "Each partition's thread block writes m_p, l_p and o_p; the reduce weighs o_p by w_p,\n"
            "its sum l_p moved to the common maximum M.", fontsize=10.5, va="center")
    return fig, {"spans": spans, "m": m[0, 0, :nparts], "l": l[0, 0, :nparts], "w": w, "out": out,
                 "scores": scores, "inputs": (q, k_pool, v_pool, table, [n], scale, bs)}


# --------------------------------------------------------------------------- chapter 6

def e4m3(value=0.3, seed=2, sigma=0.004):
    """Chapter 6: the bits of one e4m3 byte, and where a pool's values land with and
    without a scale (pa_ref.fp8's quantize and dequantize)."""
    byte = int(pa_ref.quantize_e4m3(np.array([value]), 1.0)[0])
    back = float(pa_ref.dequantize_e4m3(np.array([byte], dtype=np.uint8), 1.0)[0])
    bits = [(byte >> (7 - i)) & 1 for i in range(8)]
    s, e, mant = bits[0], int("".join(map(str, bits[1:5])), 2), int("".join(map(str, bits[5:])), 2)
    fig = st.figure(5.6)
    ax = st.bare_axes(fig, [0.03, 0.70, 0.94, 0.27], (0, 40), (0, 6.2))
    colours = [PINK] + [BLUE] * 4 + [GREEN] * 3
    for i, bit in enumerate(bits):
        p = st.cell(ax, 1 + i * 2.2, 1.0, 2.0, 2.0, fc=LIGHT[colours[i]], ec=colours[i], lw=1.5, gid="bit")
        p.set_label(str(bit))
        ax.text(2 + i * 2.2, 2.0, str(bit), ha="center", va="center", fontsize=14, fontweight="bold")
    ax.text(2.0, 0.5, "sign", ha="center", fontsize=10, color=PINK)
    ax.text(1 + 2.2 + 4.3, 0.5, "exponent (bias 7)", ha="center", fontsize=10, color=BLUE)
    ax.text(1 + 5 * 2.2 + 3.2, 0.5, "mantissa", ha="center", fontsize=10, color=GREEN)
    ax.text(19.5, 1.2, f"byte 0x{byte:02X}:  s = {s},  e = {e},  m = {mant}", fontsize=11, fontweight="bold")
    ax.text(19.5, 2.7, f"$(-1)^{{{s}}} \\cdot 2^{{{e} - 7}} \\cdot (1 + {mant}/8) = {back:g}$", fontsize=11.5)
    ax.text(19.5, 4.2, f"{value:g} is stored as {back:g}, the nearest e4m3 value", fontsize=10.5,
            color=MUTED)
    ax.text(1, 4.2, f"one byte: {value:g} quantized with scale 1", fontsize=10.5, color=MUTED)
    # Where values land.
    allbytes = np.arange(1, 0x7F, dtype=np.uint8)
    grid = pa_ref.dequantize_e4m3(allbytes, 1.0)
    rng = np.random.default_rng(seed)
    xs = np.abs(rng.standard_normal(400) * sigma)
    k_scale = float(np.float32(xs.max() / pa_ref.E4M3_MAX))
    ax2 = fig.add_axes([0.2, 0.1, 0.6, 0.47])
    lo, hi = -14, 9.5
    ax2.set_xlim(lo, hi)
    ax2.set_ylim(3.6, -0.7)
    ax2.vlines(np.log2(grid), -0.35, 0.35, color=INK, lw=0.6, gid="grid")
    ax2.axvspan(lo, -6, color=LIGHT[GREY], zorder=0)
    ax2.text(-6.2, 3.5, "subnormal, or 0", ha="right", va="bottom", fontsize=10, color=MUTED)
    errs = []
    for row, (scale, label, colour) in enumerate([(1.0, "scale = 1", RED),
                                                 (k_scale, f"scale =\nmax|x| / 448\n= {k_scale:.3g}", GREEN)]):
        y = 1.3 + row * 1.5
        q = pa_ref.quantize_e4m3(xs, scale)
        back_x = pa_ref.dequantize_e4m3(q, scale)
        stored = back_x / scale
        rel = np.abs(back_x - xs) / xs
        errs.append(float(np.median(rel)))
        zero = stored == 0
        jitter = (rng.random(xs.size) - 0.5) * 0.5
        ax2.scatter(np.log2(xs / scale), y + jitter - 0.3, s=5, color=colour, linewidths=0, alpha=0.8)
        ax2.scatter(np.log2(np.where(zero, 2.0 ** (lo + 0.4), stored)), y + 0.35 + jitter * 0.3, s=5,
                    color=INK, linewidths=0, alpha=0.7)
        ax2.text(hi + 0.3, y, f"{zero.sum()} of {xs.size} → 0\nmedian error\n{100 * errs[-1]:.1f}%",
                 fontsize=10, va="center")
        ax2.text(lo - 0.4, y, label, ha="right", va="center", fontsize=10.5, color=colour)
    ax2.set_yticks([])
    for side in ("left", "right", "top"):
        ax2.spines[side].set_visible(False)
    ticks = list(range(-14, 10, 2))
    ax2.set_xticks(ticks, [f"$2^{{{t}}}$" for t in ticks])
    ax2.set_xlabel("value / scale (log scale): what the byte must hold")
    ax2.text(lo, -0.55, "every positive e4m3 value: 8 per power of two above $2^{-6}$", fontsize=10.5,
             va="bottom", color=INK)
    fig.text(0.03, 0.665, f"What a scale does: {xs.size} values |N(0, {sigma:g})|. Coloured: x / scale; black: "
             "what the byte\ngives back (dequantized, / scale). Values below $2^{-10}$ become 0 (drawn at the left).",
             fontsize=10.5, va="center")
    return fig, {"byte": byte, "bits": [int(p.get_label()) for p in tagged(ax, "bit")], "value": back,
                 "grid": grid, "k_scale": k_scale, "errors": errs}


# --------------------------------------------------------------------------- chapter 7

def cow(block_size=4, num_blocks=5):
    """Chapter 7 through the reference's SharedBlockManager: a prompt, a fork, the copy at
    the first write into the shared, partly filled tail, and a release."""
    bs = block_size
    m = pa_ref.SharedBlockManager(num_blocks, bs)
    content = {}  # (block, offset) -> the sequence whose token is there (-1: both, shared)
    stages = []

    def snap(text):
        stages.append({"text": text, "lists": {s: m.block_list(s) for s in m.sequences()},
                       "lens": {s: m.length(s) for s in m.sequences()},
                       "refcounts": [m.refcount(b) for b in range(num_blocks)],
                       "content": dict(content), "copies": m.take_copies()})

    def write(seq, n):
        for slot in m.append_slots(seq, n):
            content[divmod(slot, bs)] = seq

    m.add_sequence(0)
    write(0, 10)
    snap("seq 0: a prompt of 10 tokens,\nblocks [0, 1, 2]; block 2 is half full")
    m.fork(0, 1)
    for key in list(content):
        content[key] = -1  # now seen by both
    snap("fork(0 → 1): seq 1 shares all three\nblocks; nothing is copied")
    copy_expected = m.needs_copy(1, 1)
    before = m.block_list(1)[-1]
    slots = m.append_slots(1, 1)
    copies = m.take_copies()
    for src, dst in copies:
        for o in range(bs):
            if (src, o) in content:
                content[(dst, o)] = content[(src, o)]
    for slot in slots:
        content[divmod(slot, bs)] = 1
    stages.append({"text": f"seq 1 appends token 10: its tail\n(block {before}) is shared, not full:"
                   f" copy,\nthen write into the copy",
                   "lists": {s: m.block_list(s) for s in m.sequences()},
                   "lens": {s: m.length(s) for s in m.sequences()},
                   "refcounts": [m.refcount(b) for b in range(num_blocks)],
                   "content": dict(content), "copies": copies})
    write(0, 1)
    snap("seq 0 appends token 10: block 2\nhas one owner now: no copy")
    m.release(0)
    for key in [k for k in content if k[0] in range(num_blocks) and m.refcount(k[0]) == 0]:
        del content[key]
    snap("release(seq 0): blocks 0 and 1 drop\nto one owner; block 2 is freed")

    fig = st.figure(1.05 * len(stages) + 0.5)
    ax = st.bare_axes(fig, [0.02, 0.02, 0.96, 0.96], (0, 100), (-1.2, len(stages) * 5.0))
    ax.text(1, -0.4, "operation", fontsize=11, fontweight="bold")
    ax.text(38, -0.4, "block lists", fontsize=11, fontweight="bold")
    ax.text(58, -0.4, "the pool (rc: reference count)", fontsize=11, fontweight="bold")
    seq_c = {0: BLUE, 1: ORANGE, -1: PINK}
    info = []
    for k, stage in enumerate(stages):
        y = k * 5.0 + 0.4
        if k:
            ax.plot([0.5, 99.5], [y - 0.6, y - 0.6], color=GRID, lw=0.6)
        ax.text(1, y + 2.2, stage["text"], va="center", fontsize=10.5)
        for i, (s, blocks) in enumerate(sorted(stage["lists"].items())):
            ax.text(38, y + 1.0 + i * 1.55, f"seq {s}: {blocks}", va="center", fontsize=10.5,
                    color=seq_c[s], fontweight="bold")
        drawn = []
        for b in range(num_blocks):
            x0 = 58 + b * 8.2
            rc = stage["refcounts"][b]
            for o in range(bs):
                who = stage["content"].get((b, o))
                fc = "white" if who is None or rc == 0 else seq_c[who]
                st.cell(ax, x0 + o * 1.7, y + 0.6, 1.7, 1.6, fc=fc, ec=GRID if rc == 0 else MUTED, lw=0.6)
            ax.text(x0 + 3.4, y + 0.2, f"block {b}", ha="center", fontsize=10,
                    color=INK if rc else MUTED)
            badge = ax.text(x0 + 3.4, y + 3.2, f"rc {rc}" if rc else "free", ha="center", fontsize=10.5,
                            fontweight="bold" if rc > 1 else "normal",
                            color=RED if rc > 1 else (INK if rc else MUTED))
            badge.set_gid(f"rc{b}")
            drawn.append(rc)
        for src, dst in stage["copies"]:
            arrow(ax, (58 + src * 8.2 + 3.4, y + 2.3), (58 + dst * 8.2 + 3.4, y + 2.3), colour=RED,
                  lw=1.6, rad=-0.5)
            ax.text(38, y + 3.55, f"copies: [({src}, {dst})]", fontsize=10.5, color=RED,
                    fontweight="bold", va="center")
        info.append({"refcounts": drawn, "copies": stage["copies"], "lists": stage["lists"]})
    ax.text(1, len(stages) * 5.0 - 0.35, "Slots: blue = seq 0's tokens, orange = seq 1's, pink = "
            "tokens both see (written before the fork).", fontsize=10, color=MUTED)
    return fig, {"stages": info, "copy_expected": copy_expected}


# --------------------------------------------------------------------------- chapter 8

SERVE_REQUESTS = (  # name, arrival step, prompt tokens, output tokens, starts with the system prompt
    ("A", 0, 6, 9, False), ("B", 0, 11, 7, True), ("C", 1, 9, 8, False),
    ("D", 3, 10, 5, True), ("E", 5, 5, 4, False))


def serve_schedule(requests=SERVE_REQUESTS, num_blocks=10, block_size=4, prefix_len=8):
    """A tiny scripted schedule in the order of chapter 8's Engine::step, on the reference's
    SharedBlockManager: running requests decode (oldest first; when a block is missing the
    newest running request is preempted, by recompute, to the front of the queue), then
    waiting requests are admitted FIFO while they fit, their whole prompt in one step. The
    system prompt's blocks are kept by a holder sequence (a prefix cache that never evicts),
    and a request that starts with it forks the holder: its 8 tokens are not computed
    again. Returns one record per step."""
    bs, HOLD = block_size, -1
    m = pa_ref.SharedBlockManager(num_blocks, bs)
    names = [r[0] for r in requests]
    st_ = {r[0]: {"arrive": r[1], "prompt": r[2], "output": r[3], "prefix": r[4], "generated": 0,
                  "seq": None, "done": False} for r in requests}
    waiting, running, log, step = [], [], [], 0
    while not all(s["done"] for s in st_.values()) and step < 100:
        waiting += [r[0] for r in requests if r[1] == step]
        ev = {n: "wait" for n in waiting}
        preempted = []
        for n in list(running):
            if n not in running:
                continue
            s = st_[n]
            while m.new_blocks_needed(s["seq"], 1) > m.num_free:
                victim = running.pop()
                m.release(st_[victim]["seq"])
                st_[victim]["seq"] = None
                waiting.insert(0, victim)
                preempted.append(victim)
                ev[victim] = "preempt"
                if victim == n:
                    break
            if n in running:
                m.append_slots(s["seq"], 1)
                ev[n] = "decode"
        while waiting and waiting[0] not in preempted:
            n = waiting[0]
            s = st_[n]
            total = s["prompt"] + s["generated"]  # a recomputed request's tokens so far
            hit = s["prefix"] and HOLD in m.sequences()
            cached = prefix_len if hit else 0
            if blocks_for(total, bs) - cached // bs > m.num_free:
                break
            waiting.pop(0)
            seq = names.index(n)
            if s["prefix"]:
                if not hit:
                    m.add_sequence(HOLD)
                    m.append_slots(HOLD, prefix_len)
                m.fork(HOLD, seq)
                m.append_slots(seq, total - prefix_len)
            else:
                m.add_sequence(seq)
                m.append_slots(seq, total)
            s["seq"] = seq
            running.append(n)
            ev[n] = ("prefill", total - cached, cached)
        owners = {}
        for seq in m.sequences():
            for b in m.block_list(seq):
                owners.setdefault(b, set()).add(seq)
        blocks = {"prefix": 0}
        for b, who in owners.items():
            key = "prefix" if HOLD in who else names[next(iter(who))]
            blocks[key] = blocks.get(key, 0) + 1
        record = {"step": step, "ev": ev, "blocks": blocks, "num_used": m.num_used,
                  "finished": []}
        for n in running:
            st_[n]["generated"] += 1
        for n in list(running):
            if st_[n]["generated"] >= st_[n]["output"]:
                m.release(st_[n]["seq"])
                running.remove(n)
                st_[n]["done"] = True
                record["finished"].append(n)
        log.append(record)
        step += 1
    return log, {n: s["generated"] for n, s in st_.items()}


def serving_timeline(num_blocks=10):
    log, generated = serve_schedule(num_blocks=num_blocks)
    names = [r[0] for r in SERVE_REQUESTS]
    colours = dict(zip(names, [BLUE, ORANGE, GREEN, SKY, RED]))
    steps = len(log)
    fig = st.figure(6.0)
    ax = fig.add_axes([0.1, 0.53, 0.88, 0.37])
    ax.set_xlim(-0.5, steps - 0.5)
    ax.set_ylim(len(names) - 0.45, -0.5)
    ax.set_yticks(range(len(names)), [f"req. {n}" for n in names])
    ax.set_xticks(range(steps))  # the same steps as the panel below
    ax.tick_params(axis="y", length=0)
    ax.set_xlabel("engine step", labelpad=2)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.set_title("Continuous batching: each step, who runs", loc="left", fontsize=11.5)
    drawn = {n: [] for n in names}
    for rec in log:
        t = rec["step"]
        for i, n in enumerate(names):
            e = rec["ev"].get(n)
            if e is None:
                continue
            c = colours[n]
            if e == "wait":
                p = st.cell(ax, t - 0.45, i - 0.3, 0.9, 0.6, fc="white", ec=GREY, lw=0.8, hatch="///")
            elif e == "decode":
                p = st.cell(ax, t - 0.45, i - 0.3, 0.9, 0.6, fc=LIGHT.get(c, c), ec=c, lw=1.0)
            elif e == "preempt":
                p = st.cell(ax, t - 0.45, i - 0.3, 0.9, 0.6, fc="white", ec=RED, lw=1.5)
                ax.text(t, i, "✕", ha="center", va="center", color=RED, fontsize=12, fontweight="bold")
                ax.text(t + 0.5, i + 0.48, "preempted (recompute)", ha="left", va="center",
                        color=RED, fontsize=10)
            else:
                _, new, cached = e
                p = st.cell(ax, t - 0.45, i - 0.3, 0.9, 0.6, fc=c, ec=c, lw=1.0)
                ax.text(t, i, str(new), ha="center", va="center", color="white", fontsize=10,
                        fontweight="bold")
                if cached:
                    ax.text(t - 0.5, i + 0.48, f"prefix hit: {cached} tokens from the cache, {new} computed",
                            ha="right", va="center", color=INK, fontsize=10)
                elif n == "B":
                    ax.text(t + 0.5, i + 0.48, "computes the 8-token system prompt; its 2 blocks stay cached",
                            ha="left", va="center", color=INK, fontsize=10)
            p.set_gid(f"{n}:{e if isinstance(e, str) else e[0]}")
            drawn[n].append((t, e if isinstance(e, str) else e[0]))
        for n in rec["finished"]:
            ax.text(t + 0.5, names.index(n), "✓", ha="left", va="center", color=GREEN, fontsize=12)
    handles = [Rectangle((0, 0), 1, 1, facecolor="white", edgecolor=GREY, hatch="///"),
               Rectangle((0, 0), 1, 1, facecolor=BLUE), Rectangle((0, 0), 1, 1, facecolor=LIGHT[BLUE],
                                                                   edgecolor=BLUE)]
    fig.legend(handles, ["waiting", "prefill (tokens computed)", "decode (one token)"], loc="upper right",
               ncol=3, frameon=False, bbox_to_anchor=(0.99, 0.995))
    # Blocks in use.
    bx = fig.add_axes([0.1, 0.08, 0.88, 0.29])
    bottom = np.zeros(steps)
    kinds = ["prefix"] + names
    for k in kinds:
        vals = np.array([rec["blocks"].get(k, 0) for rec in log], dtype=float)
        colour = PINK if k == "prefix" else colours[k]
        bx.bar(range(steps), vals, 0.8, bottom=bottom, color=colour, edgecolor="white", lw=0.6,
               label="system prompt (shared, cached)" if k == "prefix" else None, gid=f"blocks:{k}")
        bottom += vals
    bx.axhline(num_blocks, color=RED, lw=1.2, ls="--")
    bx.text(steps - 0.5, num_blocks + 0.3, f"pool: {num_blocks} blocks", ha="right", va="bottom",
            color=RED, fontsize=10)
    bx.set_xlim(-0.5, steps - 0.5)
    bx.set_ylim(0, num_blocks + 2)
    bx.set_xticks(range(steps))
    bx.set_xlabel("engine step")
    bx.set_ylabel("blocks in use")
    bx.set_title("Blocks in use (each request's in its colour)", loc="left", fontsize=11.5)
    bx.legend(loc="upper left", frameon=False)
    for side in ("top", "right"):
        bx.spines[side].set_visible(False)
    totals = [float(b) for b in bottom]
    return fig, {"log": log, "drawn": drawn, "totals": totals, "generated": generated}


# --------------------------------------------------------------------------- chapter 9

def ring(count=6, stages=3):
    """Chapter 9's ring: a warp's `stages` slots, stages - 1 blocks in flight while it
    attends one (pa_ref.work_maps.ring_schedule, the kernel's order)."""
    steps = wm.ring_schedule(count, stages)
    held = {}       # slot -> (block, "flight" | "attend")
    columns = []    # per column: {slot: (block, status)}
    label = ["prologue"]
    for action, i, slot in steps:
        if action == "issue":
            held[slot] = (i, "flight" if i < count else "empty")
        else:
            held[slot] = (i, "attend")
            columns.append(dict(held))
            label.append(f"i = {i}")
            held[slot] = (i, "done")
        if len(columns) == 0 and action == "issue" and i == stages - 2:
            columns.append(dict(held))
    fig = st.figure(3.0)
    ncol = len(columns)
    ax = st.bare_axes(fig, [0.02, 0.03, 0.96, 0.94], (-1.3, ncol * 1.1), (-0.8, stages * 1.0 + 1.3))
    drawn = []
    for c, state in enumerate(columns):
        x0 = c * 1.1
        ax.text(x0 + 0.5, -0.35, label[c], ha="center", fontsize=10, fontweight="bold")
        for slot in range(stages):
            block, status = state.get(slot, (None, None))
            if status == "attend":
                p = st.cell(ax, x0, slot, 1.0, 0.86, fc=GREEN, ec=GREEN, gid="attend")
                ax.text(x0 + 0.5, slot + 0.43, f"attend\nblock {block}", ha="center", va="center",
                        fontsize=10, color="white", fontweight="bold")
            elif status == "flight":
                p = st.cell(ax, x0, slot, 1.0, 0.86, fc=LIGHT[BLUE], ec=BLUE, gid="flight")
                ax.text(x0 + 0.5, slot + 0.43, f"block {block}\nin flight", ha="center", va="center",
                        fontsize=10)
            elif status == "empty":
                p = st.cell(ax, x0, slot, 1.0, 0.86, fc="white", ec=GREY, hatch="///", gid="empty")
                ax.text(x0 + 0.5, slot + 0.43, "empty\ngroup", ha="center", va="center", fontsize=10,
                        color=MUTED, bbox=dict(facecolor="white", edgecolor="none", pad=0.5))
            else:
                p = st.cell(ax, x0, slot, 1.0, 0.86, fc="white", ec=GRID)
            if block is not None:
                p.set_label(f"{c}:{slot}:{block}:{status}")
                drawn.append((c, slot, block, status))
    for slot in range(stages):
        ax.text(-0.15, slot + 0.43, f"slot {slot}", ha="right", va="center", fontsize=10.5)
    ax.text(-1.25, stages + 0.7, f"One warp, {count} blocks, stages = {stages}. Iteration i issues block "
            f"i + {stages - 1} into slot (i + {stages - 1}) % {stages},\nwaits for block i "
            f"(cp_async_wait<{stages - 1}>) and attends it in slot i % {stages}. A commit past the\n"
            "last block copies nothing: an empty group, which keeps the count in step.",
            fontsize=10.5, va="center")
    return fig, {"drawn": drawn, "columns": columns, "count": count, "stages": stages}


def mma_fragment(lane=6):
    """One mma.sync.m16n8k16: which lane holds which element of A, B and C (the PTX ISA's
    fragment layout, pa_ref.work_maps), lane `lane` outlined."""
    fig = st.figure(5.4)
    ax = st.bare_axes(fig, [0.02, 0.02, 0.96, 0.96], (-1.2, 35.5), (-4.0, 18.6), equal=True)
    reg_colours = [LIGHT[BLUE], LIGHT[ORANGE], LIGHT[GREEN], LIGHT[PINK]]
    info = {"A": [], "B": [], "C": []}
    specs = [("A", 16, 0, wm.mma_a_element, 8, "A: 16 × 16 (rows × k)"),
             ("B", 8, 18, wm.mma_b_element, 4, "B: 16 × 8 (k × cols)"),
             ("C", 8, 27.5, wm.mma_c_element, 4, "C: 16 × 8, fp32")]
    for name, ncols, x0, fn, per_lane, title in specs:
        ax.text(x0, -1.0, title, fontsize=11, fontweight="bold")
        for ln in range(32):
            for i in range(per_lane):
                r, c = fn(ln, i)
                reg = i // 2 if name != "C" else i // 2
                p = st.cell(ax, x0 + c, r, fc=reg_colours[reg if name == "A" else reg], ec="white", lw=0.8,
                            gid=name)
                p.set_label(f"{ln}:{i}")
                info[name].append((ln, i, r, c))
                mine = ln == lane
                ax.text(x0 + c + 0.5, r + 0.52, str(ln), ha="center", va="center", fontsize=9.4,
                        color=RED if mine else INK, fontweight="bold" if mine else "normal")
                if mine:
                    st.cell(ax, x0 + c, r, fc="none", ec=RED, lw=1.8, z=3, gid=f"{name}-lane")
        for c in range(ncols):
            ax.text(x0 + c + 0.5, -0.15, str(c), ha="center", va="bottom", fontsize=9.4, color=MUTED)
    for r in range(16):
        ax.text(-0.15, r + 0.5, str(r), ha="right", va="center", fontsize=9.4, color=MUTED)
    g, t = lane // 4, lane % 4
    ax.text(-1.2, -2.9, "Each cell: the lane that holds it (g = lane / 4, t = lane % 4). Colour: the register, "
            "two 16-bit\nelements each: blue a[0], orange a[1], green a[2], pink a[3]; blue b[0] / c[0..1], "
            "orange b[1] / c[2..3].", fontsize=10.5, va="center")
    ax.text(-1.2, 17.0, f"Lane {lane} (g = {g}, t = {t}), outlined: A[{g}][{2 * t}, {2 * t + 1}], "
            f"A[{g + 8}][{2 * t}, {2 * t + 1}], A[{g}][{2 * t + 8}, {2 * t + 9}], A[{g + 8}][{2 * t + 8}, "
            f"{2 * t + 9}];\nB[{2 * t}, {2 * t + 1}][{g}], B[{2 * t + 8}, {2 * t + 9}][{g}]; "
            f"C[{g}][{2 * t}, {2 * t + 1}], C[{g + 8}][{2 * t}, {2 * t + 1}]", fontsize=10.5, va="top")
    info["lane"] = lane
    info["ax"] = ax
    return fig, info


# --------------------------------------------------------------------------- chapter 10

def varlen_tiles(prefix=600, new=40, num_q_heads=8, num_kv_heads=2, grid=16):
    """Chapter 10: one prefill chunk's rows (new token i, query head h) -> 64-row tiles ->
    work items (a tile over a chunk of its KV, per KV head), from pa_ref.planner."""
    from pa_ref import planner
    G = num_q_heads // num_kv_heads
    seq_len = prefix + new
    plan = planner.make_plan([seq_len], [0, new], num_q_heads, num_kv_heads, grid)
    tiles = plan["tiles"]
    tile_colours = [BLUE, ORANGE, GREEN, PINK]
    fig = st.figure(5.6)
    ax = st.bare_axes(fig, [0.06, 0.60, 0.92, 0.33], (-1.5, new + 0.5), (-1.4, G + 1.6))
    fig.text(0.03, 0.955, f"(a) Rows: {new} new tokens i × G = {G} query heads h (one KV head's); "
             f"row i·G + h", fontsize=11, fontweight="bold")
    row_tile = {}
    for k, (seq, row0, rows, kv_needed, by_warp, chunks) in enumerate(tiles):
        for r in range(row0, row0 + rows):
            row_tile[r] = k
    for i in range(new):
        for h in range(G):
            k = row_tile[i * G + h]
            p = st.cell(ax, i, h, fc=LIGHT[tile_colours[k % 4]], ec="white", lw=0.6, gid="row")
            p.set_label(f"{i}:{h}:{k}")
    for h in range(G):
        ax.text(-0.3, h + 0.5, f"h {h}", ha="right", va="center", fontsize=10)
    for i in range(0, new, 4):
        ax.text(i + 0.5, -0.2, str(i), ha="center", va="bottom", fontsize=10, color=MUTED)
    ax.text(-0.3, -0.2, "i", ha="right", va="bottom", fontsize=10, color=MUTED)
    for k, (seq, row0, rows, kv_needed, by_warp, chunks) in enumerate(tiles):
        first, last = row0 // G, (row0 + rows - 1) // G
        ax.text((first + last + 1) / 2, G + 0.7, f"tile {k}: rows {row0}–{row0 + rows - 1}",
                ha="center", va="center", fontsize=10.5, color=tile_colours[k % 4], fontweight="bold")
    # (b) items over the KV.
    bx = fig.add_axes([0.17, 0.09, 0.80, 0.37])
    fig.text(0.03, 0.535, f"(b) Items: a tile, for one KV head, over a chunk of the KV it needs "
             f"({prefix} tokens cached,\n     {new} new); the plan's {len(plan['items'])} items, and the "
             f"thread block each is dealt to (grid {grid})", fontsize=11, fontweight="bold", va="center")
    ylabels, drawn = [], []
    y = 0
    for k, (seq, row0, rows, kv_needed, by_warp, chunks) in enumerate(tiles):
        for hkv in range(num_kv_heads):
            items = [it for it in plan["items"] if it[2] == row0 and it[1] == hkv]
            for it in items:
                begin, end = it[3], it[4]
                p = Rectangle((begin, y - 0.35), end - begin, 0.7, facecolor=tile_colours[k % 4],
                              edgecolor="white", linewidth=1.5, gid="item")
                p.set_label(f"{k}:{hkv}:{begin}:{end}")
                bx.add_patch(p)
                idx = plan["items"].index(it)
                block = max(c for c in range(grid) if plan["cta_start"][c] <= idx)
                bx.text((begin + end) / 2, y, f"{begin}–{end}: thread block {block}", ha="center", va="center",
                        fontsize=10, color="white", fontweight="bold")
                drawn.append((k, hkv, begin, end))
            bx.plot([kv_needed, kv_needed], [y - 0.45, y + 0.45], color=INK, lw=1.2)
            if hkv == 0:
                bx.text(kv_needed + 4, y - 0.1, f"{kv_needed}", va="center", fontsize=9.6, color=INK)
            ylabels.append(f"tile {k}, KV head {hkv}")
            y += 1
    bx.axvline(prefix, color=MUTED, lw=1.0, ls="--")
    bx.text(prefix, -0.55, "cached | new", ha="center", va="bottom", fontsize=10, color=MUTED)
    bx.set_ylim(y - 0.4, -1.0)
    bx.set_xlim(0, seq_len + 45)
    bx.set_yticks(range(y), ylabels)
    bx.tick_params(axis="y", length=0)
    bx.set_xlabel("KV position; a bar ends at its tile's kv_needed (its last row's position + 1)")
    for side in ("top", "right", "left"):
        bx.spines[side].set_visible(False)
    return fig, {"plan": plan, "rows": [tuple(int(v) for v in p.get_label().split(":"))
                                        for p in tagged(ax, "row")],
                 "items": drawn, "args": ([seq_len], [0, new], num_q_heads, num_kv_heads, grid)}


PLAN_BATCH_SEED = 3


def plan_batch():
    """A ragged decode batch: one 16K-token conversation, 14 short ones and a 64-token
    prefill chunk over 960 cached tokens."""
    rng = np.random.default_rng(PLAN_BATCH_SEED)
    lens = [16384] + [int(v) for v in rng.integers(64, 1500, 14)] + [1024]
    new = [1] * 15 + [64]
    qsl = [0] + [int(v) for v in np.cumsum(new)]
    return lens, qsl


def varlen_plan(num_q_heads=8, num_kv_heads=2, grid=8):
    """Chapter 10: the plan dealt to thread blocks, as a timeline in item_cost units: the
    tiles whole (longest first, to the least-loaded block) against make_plan's chunks."""
    from pa_ref import planner
    lens, qsl = plan_batch()
    G = num_q_heads // num_kv_heads
    tiles = planner.tiles_of(lens, qsl, G, False)
    before = planner.cut_and_deal(tiles, [1] * len(tiles), num_kv_heads, grid, 0)
    after = planner.make_plan(lens, qsl, num_q_heads, num_kv_heads, grid)
    fig = st.figure(6.0)
    kinds = {0: RED, len(lens) - 1: GREEN}
    out = {}
    top = max(max(before["loads"]), max(after["loads"]))
    for k, (plan, title, y0) in enumerate([(before, "Tiles whole: one thread block walks each KV "
                                            "head of the long sequence", 0.545),
                                           (after, "make_plan: the long tiles cut into chunks, every "
                                            "item dealt longest first", 0.12)]):
        ax = fig.add_axes([0.16, y0, 0.81, 0.29])
        bars = []
        for c, items in enumerate(plan["blocks"]):
            t = 0.0
            for it in items:
                seq, begin, end, rows, by_warp = it[0], it[3], it[4], None, it[9]
                rows = planner.tile_rows(qsl[seq + 1] - qsl[seq], G, it[2])
                cost = planner.item_cost(end - begin, rows, bool(by_warp))
                colour = kinds.get(seq, SKY if seq % 2 else BLUE)
                p = Rectangle((t, c - 0.38), cost, 0.76, facecolor=colour, edgecolor="white",
                              linewidth=0.8, gid="item")
                p.set_label(f"{c}:{seq}:{begin}:{end}")
                ax.add_patch(p)
                bars.append((c, seq, begin, end, cost))
                t += cost
            # Each load in a column right of every bar and of the dashed line, which crosses no text.
            ax.text(top * 1.025, c, f"{t:,.0f}", va="center", fontsize=9.6, color=MUTED)
        makespan = max(plan["loads"])
        ax.axvline(makespan, color=INK, lw=1.2, ls="--")
        ax.text(makespan + (-0.01 if k == 0 else 0.07) * top, grid - 1.5, f"the step ends: {makespan:,.0f}",
                ha="right" if k == 0 else "left", va="center", fontsize=10.5, fontweight="bold",
                bbox=dict(facecolor="white", edgecolor="none", pad=1.0))
        ax.set_xlim(0, top * 1.1)
        ax.set_ylim(grid - 0.5, -0.9)
        ax.set_yticks(range(grid), [f"thread block {c}" for c in range(grid)])
        ax.tick_params(axis="y", length=0)
        ax.set_title(title, loc="left", fontsize=11.5)
        for side in ("top", "right", "left"):
            ax.spines[side].set_visible(False)
        if k == 1:
            ax.set_xlabel("work, in item_cost units (KV tokens of a decode tile, item start included)")
        out["before" if k == 0 else "after"] = {"bars": bars, "loads": plan["loads"]}
    handles = [Rectangle((0, 0), 1, 1, facecolor=RED),
               (Rectangle((0, 0), 1, 1, facecolor=BLUE), Rectangle((0, 0), 1, 1, facecolor=SKY)),
               Rectangle((0, 0), 1, 1, facecolor=GREEN)]
    fig.legend(handles, [f"the {lens[0]:,}-token sequence", "14 short decodes (two shades)",
                         f"a {qsl[-1] - qsl[-2]}-token prefill chunk"], loc="upper left", ncol=3,
               frameon=False, bbox_to_anchor=(0.01, 0.995), handler_map={tuple: HandlerTuple(ndivide=None, pad=0)})
    fig.text(0.02, 0.925, f"A ragged step: {num_q_heads} query heads over {num_kv_heads} KV heads, "
             f"a grid of {grid} thread blocks (an H100 runs 264).", fontsize=10.5, color=MUTED, va="center")
    return fig, {**out, "args": (lens, qsl, num_q_heads, num_kv_heads, grid)}


FIGURES = {
    "dense-slab": ch01.dense_slab,  # book/figures/ch01.py
    "dense-warps": ch01.dense_warps,
    "online-rescale": ch01.online_rescale,
    "warp-merge": ch01.warp_merge,
    "dense-vs-paged": dense_vs_paged,
    "slot-lookup": slot_lookup,
    "kv-layout": kv_layout,
    "reshape-slots": reshape_slots,
    "block-table": block_table,
    "v1-lanes": v1_lanes,
    "v2-partitions": v2_partitions,
    "e4m3": e4m3,
    "cow": cow,
    "serving-timeline": serving_timeline,
    "hash-chain": ch08.hash_chain,  # book/figures/ch08.py
    "fork-sharing": ch08.fork_sharing,
    "cascade-merge": ch08.cascade_merge,
    "ring": ring,
    "mma-fragment": mma_fragment,
    "varlen-tiles": varlen_tiles,
    "varlen-plan": varlen_plan,
    "varlen-ring": ch10.varlen_ring,  # book/figures/ch10.py
    "varlen-p-registers": ch10.p_in_registers,
    "mla-cache": ch11.mla_cache,  # book/figures/ch11.py
    "mla-absorbed": ch11.mla_absorbed,
    "mla-block-shapes": ch11.mla_block_shapes,
    "mla-key-halves": ch11.mla_key_halves,
    "mla-fp8-row": ch11.mla_fp8_row,
    "hybrid-window": ch12.hybrid_window,  # book/figures/ch12.py
    "window-mask": ch12.window_mask,
    "hopper-pipeline": ch13.pipeline_timeline,  # book/figures/ch13.py
    "hopper-stage-layout": ch13.stage_layout,
    "wgmma-fragments": ch13.wgmma_fragments,
    "stale-table": appendix_b.stale_table,  # book/figures/appendix_b.py
}


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: figures.py OUT_DIR")
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for name, draw in FIGURES.items():
        fig, _ = draw()
        st.save(fig, str(out / f"{name}.svg"))
    print(f"figures.py: {len(FIGURES)} figures in {out}")


if __name__ == "__main__":
    main(sys.argv)
