"""Appendix B's figure: a stale block table. Sequence 0's row is kept across its release, its
blocks go to sequence 1, and attention with the kept row reads sequence 1's keys and values.

The blocks come from the reference's BlockManager (chapter 3's allocation policy: a LIFO free
list, a sequence's blocks freed first to last), run through the same steps as
demo/lying_block_table.cpp's `stale` mode; what each slot holds follows the manager's slots,
and what the kept row reads follows paged.token_slot. book/figures/test_ch01_figures.py checks
the drawn segments against a replay, and the blocks against the demo's recorded output.
"""

from pa_ref import BlockManager
from pa_ref.paged import token_slot

import style as st
from style import BLUE, GREY, GRID, INK, LIGHT, MUTED, ORANGE, RED

SEQ_C = {0: BLUE, 1: ORANGE}


def stale_replay(num_blocks=64, block_size=16, length=40):
    """The demo's steps on the reference: returns the kept row, sequence 1's blocks and, after
    each step, what every slot of the kept blocks holds: {slot: (seq, token)}."""
    m = BlockManager(num_blocks, block_size)
    held = {}
    m.add_sequence(0)
    for p, slot in enumerate(m.append_slots(0, length)):
        held[slot] = (0, p)
    kept = m.block_list(0)  # the table row that outlives the sequence
    steps = [dict(held)]
    m.release(0)
    steps.append(dict(held))  # freed: the data stays until someone writes over it
    m.add_sequence(1)
    for p, slot in enumerate(m.append_slots(1, length)):
        held[slot] = (1, p)
    steps.append(dict(held))
    return kept, m.block_list(1), steps


def _runs(cells):
    """Group a block's slots (offset -> (seq, token) or None) into runs of one writer's
    consecutive tokens: (first offset, count, seq, first token)."""
    runs = []
    for o, who in enumerate(cells):
        if runs and who is not None and runs[-1][2] is not None:
            o0, n, seq, tok = runs[-1]
            if seq == who[0] and tok + n == who[1]:
                runs[-1] = (o0, n + 1, seq, tok)
                continue
        if runs and who is None and runs[-1][2] is None:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1, None, None)
            continue
        runs.append((o, 1, None, None) if who is None else (o, 1, who[0], who[1]))
    return runs


def stale_table(num_blocks=64, block_size=16, length=40):
    bs = block_size
    kept, seq1_blocks, steps = stale_replay(num_blocks, bs, length)
    cols = sorted(kept)  # the pool's blocks that the figure shows, one column each
    gap = 1.6
    xcol = {b: 0.6 + i * (bs + gap) for i, b in enumerate(cols)}
    right = xcol[cols[-1]] + bs + 1.2
    stage_h = 4.2
    fig = st.figure(5.3)
    ax = st.bare_axes(fig, [0.02, 0.02, 0.96, 0.96], (0, right + 17.5), (-2.6, 4 * stage_h + 5.4))
    ax.text(0.6, -1.9, "The pool's blocks " + ", ".join(map(str, cols)) + f" ({bs} slots each); a bar: "
            "the tokens a sequence wrote there", fontsize=10.5, va="center", fontweight="bold")
    for b in cols:
        ax.text(xcol[b] + bs / 2, -0.5, f"block {b}", ha="center", va="center", fontsize=10.5)

    def bar(y, b, cells, gid, faded=False):
        for o0, n, seq, tok in _runs(cells):
            x = xcol[b] + o0
            if seq is None:
                st.cell(ax, x, y, n, 1.7, fc="white", ec=GRID, lw=0.6)
                continue
            colour = SEQ_C[seq]
            fc = LIGHT[GREY] if faded else LIGHT[colour]
            r = st.cell(ax, x, y, n, 1.7, fc=fc, ec=MUTED if faded else colour, lw=1.2, z=2, gid=gid)
            r.set_label(f"{b}:{o0}:{n}:{seq}:{tok}")
            ax.text(x + n / 2, y + 0.85, f"{tok}–{tok + n - 1}", ha="center", va="center", fontsize=10,
                    color=MUTED if faded else INK, fontweight="normal" if faded else "bold", zorder=4)

    def pool(step):
        return {b: [steps[step].get(b * bs + o) for o in range(bs)] for b in cols}

    texts = [f"1. Sequence 0 writes {length} tokens into blocks {kept}; its block table row is kept.",
             f"2. release(0) frees them, first to last: the free list will hand out {list(reversed(kept))}.",
             f"3. Sequence 1 writes {length} tokens of its own: it gets blocks {seq1_blocks}.",
             f"4. Attention with the kept row {kept}, context_len {length}: what each position reads."]
    side = [f"seq 0's row\n{kept}", "free; the data\nstays in place", f"seq 1's row\n{seq1_blocks}",
            f"seq 0's old\nrow {kept}"]
    drawn = {}
    for k in range(4):
        y = k * stage_h
        ax.text(0.6, y + 0.55, texts[k], fontsize=10.5, va="center")
        yb = y + 1.3
        if k < 3:
            cells = pool(k)
            for b in cols:
                bar(yb, b, cells[b], f"stage{k}", faded=(k == 1))
        else:  # position p reads slot token_slot(kept, p): logical block j is in column kept[j]
            after = steps[2]
            for j, b in enumerate(kept):
                cells = [after.get(token_slot(kept, j * bs + o, bs)) if j * bs + o < length else None
                         for o in range(bs)]
                bar(yb, b, cells, "read")
                ax.text(xcol[b] + bs / 2, yb + 2.25, f"positions {j * bs}–{min(length, (j + 1) * bs) - 1}",
                        ha="center", va="center", fontsize=10, color=MUTED)
        ax.text(right, yb + 0.85, side[k], fontsize=10.5, va="center", color=INK if k != 3 else RED,
                fontweight="bold" if k == 3 else "normal")
        drawn[k] = [tuple(int(v) if v.lstrip("-").isdigit() else v for v in p.get_label().split(":"))
                    for p in ax.patches if p.get_gid() == ("read" if k == 3 else f"stage{k}")]
    reads = drawn[3]
    theirs = sum(n for _, _, n, seq, _ in reads if seq == 1)
    ours = sum(n for _, _, n, seq, _ in reads if seq == 0)
    y = 4 * stage_h + 1.1
    ax.text(0.6, y, f"Blue: sequence 0's keys and values; orange: sequence 1's. Of the {length} positions, "
            f"{theirs} read\nsequence 1's tokens, and {ours} read sequence 0's own, left in a block that "
            "sequence 1 did not fill.\nEvery id is in range and every slot read was written: nothing faults, "
            "nothing is NaN,\nand no sanitizer can tell. Only the ownership rules prevent it.", fontsize=10.5,
            va="top")
    return fig, {"kept": kept, "seq1_blocks": seq1_blocks, "drawn": drawn, "block_size": bs, "length": length,
                 "num_blocks": num_blocks, "theirs": theirs, "ours": ours}
