"""Chapter 8's figures: forked sequences sharing blocks (parallel samples and a beam step),
the prefix cache's hash chain and its lookup, and cascade attention's two passes and merge.

Every block id, count and copy comes from the reference's SharedBlockManager (pa_ref.cow);
every hash and hit from pa_ref.prefix_cache (block_hash, chain_hashes, PrefixCache: the
C++ CachingBlockManager's spec); the groups and the merge from pa_ref.cascade.plan_cascade,
decode_partitions and merge_partitions. Each function returns (fig, info), info read back
from the drawn patches; book/figures/test_ch08_figures.py checks it against the reference.
"""

import numpy as np
from matplotlib.patches import FancyArrowPatch

import pa_ref
from pa_ref import cascade, prefix_cache
from pa_ref.paged_attention import decode_partitions, merge_partitions
from pa_ref.trace import SplitMix64, uniform_int

import style as st
from style import BLUE, GREEN, GREY, GRID, INK, LIGHT, MUTED, ORANGE, PINK, RED, SKY

SEQ = [BLUE, ORANGE, GREEN, SKY]
UNIT_IN = 0.0737  # inches per data unit of a 0..100 wide panel on an 8-inch figure


def _arrow(ax, a, b, colour=INK, lw=1.1, rad=0.0):
    ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=10, color=colour, linewidth=lw,
                                 connectionstyle=f"arc3,rad={rad}", zorder=5, shrinkA=1, shrinkB=1))


def _panel(height_units):
    """An 8-inch figure whose one axes spans 0..100 across, height_units down, square units."""
    fig = st.figure(height_units * UNIT_IN / 0.96)
    return fig, st.bare_axes(fig, [0.02, 0.02, 0.96, 0.96], (0, 100), (0, height_units))


def _labelled(ax, tag):
    """The labels of ax's patches tagged `tag`, split at ':' into ints."""
    return [tuple(int(v) for v in p.get_label().split(":")) for p in ax.patches if p.get_gid() == tag]


# --------------------------------------------------------------------------- forks and beams

def fork_sharing(prompt_len=6, block_size=4, num_blocks=6):
    """n = 3 samples of one prompt, their first tokens, a beam step and the next tokens, on the
    reference's SharedBlockManager, in the engine's order (appends in batch order)."""
    bs = block_size
    m = pa_ref.SharedBlockManager(num_blocks, bs)
    content = {}  # (block, offset) -> the sequence that wrote it (-1: the prompt, before the forks)
    stages = []

    def write(seq, n, who):
        slots = m.append_slots(seq, n)
        copies = m.take_copies()
        for src, dst in copies:  # copy_blocks runs before the model writes
            for o in range(bs):
                if (src, o) in content:
                    content[(dst, o)] = content[(src, o)]
        for s in slots:
            content[divmod(s, bs)] = who
        return copies

    def snap(caption, copies=(), freed=()):
        stages.append({"caption": caption, "lists": {s: m.block_list(s) for s in m.sequences()},
                       "lens": {s: m.length(s) for s in m.sequences()},
                       "rc": [m.refcount(b) for b in range(num_blocks)], "content": dict(content),
                       "copies": list(copies), "freed": list(freed)})

    m.add_sequence(0)
    write(0, prompt_len, -1)
    snap(f"the prompt: {prompt_len}\ntokens in blocks\n{m.block_list(0)}")
    m.fork(0, 1)
    m.fork(0, 2)
    snap("n = 3 samples:\nfork 0→1, 0→2;\nnothing copied")
    copies = []
    for s in (0, 1, 2):
        copies += write(s, 1, s)
    snap("first tokens: the\nshared tail, copied\nn − 1 = 2 times", copies)
    held = {b for s in m.sequences() for b in m.block_list(s)}
    m.release(1)  # the beam step: beam 1 is not chosen, beam 0 twice
    m.fork(0, 3)
    freed = sorted(held - {b for s in m.sequences() for b in m.block_list(s)})
    snap("beam step: 1 dies,\n0 is chosen twice\n(fork 0→3)", freed=freed)
    copies = []
    for s in (0, 2, 3):
        copies += write(s, 1, s)
    snap("next tokens: 0, 3\nshare a tail: one\ncopy; 2 writes alone", copies)

    H = 31.4
    fig, ax = _panel(H)
    col_w, x0, top = 18.0, 9.5, 7.4
    blk_w, gap, blk_h, row_h = 5.0, 0.6, 2.4, 3.1
    for s in range(4):
        ax.text(0.5, top + s * row_h + blk_h / 2, f"seq {s}", va="center", fontsize=10.5, fontweight="bold",
                color=SEQ[s])
    y_pool = top + 4 * row_h + 0.6
    ax.text(0.5, y_pool + 1.3, "pool rc", va="center", fontsize=10, color=MUTED)
    ax.text(0.5, y_pool + 3.9, "copies", va="center", fontsize=10, color=MUTED)
    for k, stage in enumerate(stages):
        cx = x0 + k * col_w
        ax.text(cx, 0.3, stage["caption"], va="top", fontsize=9.8, linespacing=1.15)
        if k:
            ax.plot([cx - 0.9, cx - 0.9], [0.3, y_pool + 5.0], color=GRID, lw=0.6)
        for s, blocks in sorted(stage["lists"].items()):
            y = top + s * row_h
            for i, b in enumerate(blocks):
                bx = cx + i * (blk_w + gap)
                filled = min(bs, stage["lens"][s] - i * bs)
                for o in range(bs):
                    who = stage["content"].get((b, o)) if o < filled else None
                    fc = "white" if who is None else LIGHT[GREY if who == -1 else SEQ[who]]
                    st.cell(ax, bx + o * blk_w / bs, y, blk_w / bs, blk_h, fc=fc, ec=GRID, lw=0.4)
                rc = stage["rc"][b]
                frame = st.cell(ax, bx, y, blk_w, blk_h, fc="none", ec=PINK if rc > 1 else MUTED,
                                lw=2.2 if rc > 1 else 0.9, z=3)
                frame.set_gid("block")
                frame.set_label(f"{k}:{s}:{i}:{b}:{rc}")
                ax.text(bx + blk_w / 2, y + blk_h / 2, str(b), ha="center", va="center", fontsize=10,
                        fontweight="bold", zorder=4)
        pw = col_w / num_blocks - 0.3
        for b in range(num_blocks):
            rc = stage["rc"][b]
            c = st.cell(ax, cx + b * (pw + 0.3), y_pool, pw, 2.6, fc=LIGHT[PINK] if rc > 1 else "white",
                        ec=MUTED if rc else GRID, lw=0.7)
            c.set_gid("pool")
            c.set_label(f"{k}:{b}:{rc}")
            ax.text(cx + b * (pw + 0.3) + pw / 2, y_pool + 1.3, str(rc) if rc else "·", ha="center",
                    va="center", fontsize=10, color=INK if rc else MUTED)
        note = ", ".join(f"{a}→{b}" for a, b in stage["copies"]) or "none"
        if stage["freed"]:
            note = "freed: " + ", ".join(map(str, stage["freed"]))
        ax.text(cx, y_pool + 3.9, note, va="center", fontsize=10,
                color=RED if stage["copies"] else MUTED, fontweight="bold" if stage["copies"] else "normal")
    ax.text(0.5, H - 2.6, "Slots: grey = the prompt's tokens, written once before the forks; colour = "
            "a sequence's own.", fontsize=10, color=MUTED)
    ax.text(0.5, H - 0.6, "Pink frame: a shared block (reference count > 1). Block 0 is full: never "
            "copied, shared to the end.", fontsize=10, color=MUTED)
    drawn = {}
    for k, s, i, b, rc in _labelled(ax, "block"):
        drawn.setdefault(k, {}).setdefault(s, []).append((i, b, rc))
    info = {"stages": [{"lists": {s: [b for _, b, _ in sorted(v)] for s, v in drawn[k].items()},
                        "rc": {b: rc for s, v in drawn[k].items() for _, b, rc in v},
                        "pool": [rc for kk, _, rc in sorted(_labelled(ax, "pool")) if kk == k],
                        "copies": stages[k]["copies"], "freed": stages[k]["freed"]}
                       for k in range(len(stages))],
            "args": (prompt_len, bs, num_blocks)}
    return fig, info


# --------------------------------------------------------------------------- the prefix cache

def _tokens(n, seed):
    rng = SplitMix64(seed)
    return [int(uniform_int(rng, 0, 127)) for _ in range(n)]


def hash_chain(block_size=4, seed=8):
    """Request A's prompt is computed and committed; request B shares A's first two blocks,
    differs in its third and repeats A's fourth. match_prefix walks B's chain to the miss."""
    bs = block_size
    a = _tokens(4 * bs + 1, seed)
    b = a[:2 * bs] + list(a[2 * bs:3 * bs])
    b[2 * bs + 1] = (b[2 * bs + 1] + 1) % 128  # one token of B's third block differs
    b += a[3 * bs:4 * bs] + _tokens(2, seed + 1)
    m = pa_ref.SharedBlockManager(10, bs)
    m.add_sequence(1)  # another request holds the pool's first blocks
    m.append_slots(1, 2 * bs)
    m.add_sequence(0)
    m.append_slots(0, len(a))
    cache = prefix_cache.PrefixCache(bs)
    cache.commit(m.block_list(0), a, len(a))  # all of A is computed: its 4 full blocks register
    hit = cache.match_prefix(b, len(b) - 1)  # the last token is always computed
    ha, hb = prefix_cache.chain_hashes(a, bs), prefix_cache.chain_hashes(b, bs)

    H = 35.8
    fig, ax = _panel(H)
    tok_w, blk_gap, x0, tok_h = 4.0, 1.6, 12.5, 2.6
    bx = [x0 + i * (bs * tok_w + blk_gap) for i in range(5)]
    hw = bs * tok_w - 1.0

    def tokens_row(y, toks, who, diff=()):
        for i, t in enumerate(toks):
            blk, o = divmod(i, bs)
            x = bx[blk] + o * tok_w
            st.cell(ax, x, y, tok_w, tok_h, fc=LIGHT[RED] if i in diff else "white", ec=GRID, lw=0.5)
            ax.text(x + tok_w / 2, y + tok_h / 2, str(t), ha="center", va="center", fontsize=10)
        for blk in range(-(-len(toks) // bs)):
            full = (blk + 1) * bs <= len(toks)
            frame = st.cell(ax, bx[blk], y, bs * tok_w, tok_h, fc="none", ec=INK if full else GRID,
                            lw=1.1 if full else 0.6, z=3)
            frame.set_gid(f"tokens-{who}")

    def hash_row(y, hashes, who, status):
        root = st.cell(ax, 1.0, y, 8.0, tok_h, fc=LIGHT[GREY], ec=MUTED, lw=0.8)
        root.set_gid("root")
        ax.text(5.0, y + tok_h / 2, "root", ha="center", va="center", fontsize=10)
        prev = (9.0, y + tok_h / 2)
        for i, h in enumerate(hashes):
            s = status[i]
            colour = {"hit": GREEN, "miss": RED, "stored": BLUE, "unread": GREY}[s]
            c = st.cell(ax, bx[i] + 0.5, y, hw, tok_h, fc=LIGHT[colour], ec=colour, lw=1.3 if s != "unread" else 0.8)
            c.set_gid(f"hash-{who}")
            c.set_label(f"{i}:{h}:{['stored', 'hit', 'miss', 'unread'].index(s)}")
            ax.text(bx[i] + 0.5 + hw / 2, y + tok_h / 2, f"{h:016x}"[:6] + "…", ha="center", va="center",
                    fontsize=10, family="DejaVu Sans Mono", color=MUTED if s == "unread" else INK)
            _arrow(ax, prev, (bx[i] + 0.5, y + tok_h / 2), colour=MUTED if s == "unread" else INK)
            prev = (bx[i] + 0.5 + hw, y + tok_h / 2)
            # Each block's tokens feed its hash.
            _arrow(ax, (bx[i] + bs * tok_w / 2, y - 1.4), (bx[i] + bs * tok_w / 2, y), colour=GRID, lw=0.9)

    # Request A and the cache it leaves.
    ax.text(1.0, 1.2, "request A", fontsize=10.5, fontweight="bold", va="center", color=BLUE)
    ax.text(x0, 1.2, f"{len(a)} tokens, all computed. Block i's name: hᵢ = block_hash(hᵢ₋₁, its tokens)",
            fontsize=10, va="center")
    tokens_row(2.8, a, "A")
    ax.text(1.0, 2.8 + tok_h / 2, "tokens", fontsize=10, va="center", color=MUTED)
    hash_row(6.8, ha, "A", ["stored"] * len(ha))
    y_cache = 11.4
    ax.text(1.0, y_cache + 1.3, "the cache", fontsize=10, va="center", color=MUTED)
    for h, (block, parent, _) in cache.entries.items():
        i = ha.index(h)
        c = st.cell(ax, bx[i] + 0.5, y_cache, hw, tok_h, fc="white", ec=BLUE, lw=1.0)
        c.set_gid("cached")
        c.set_label(f"{i}:{block}")
        ax.text(bx[i] + 0.5 + hw / 2, y_cache + tok_h / 2, f"→ block {block}", ha="center", va="center",
                fontsize=10, color=BLUE, fontweight="bold")
    # Request B's lookup.
    ax.plot([0.5, 99.5], [16.0, 16.0], color=GRID, lw=0.6)
    y_b = 18.6
    ax.text(1.0, y_b - 1.0, "request B", fontsize=10.5, fontweight="bold", va="center", color=ORANGE)
    ax.text(x0, y_b - 1.0, f"{len(b)} tokens: match_prefix(B, {len(b) - 1}) walks its chain",
            fontsize=10.5, va="center")
    diff = [i for i in range(len(hb) * bs) if a[i] != b[i]]  # in B's full blocks
    tokens_row(y_b + 0.6, b, "B", diff)
    ax.text(1.0, y_b + 0.6 + tok_h / 2, "tokens", fontsize=10, va="center", color=MUTED)
    looked = min(len(hit) + 1, (len(b) - 1) // bs)
    status = ["hit"] * len(hit) + ["miss"] * (looked - len(hit)) + ["unread"] * (len(hb) - looked)
    y_h = y_b + 4.6
    hash_row(y_h, hb, "B", status)
    for i, s in enumerate(status):
        cx = bx[i] + 0.5 + hw / 2
        text = {"hit": f"hit: block {hit[i]}" if i < len(hit) else "",
                "miss": "miss: stop", "unread": "not looked up"}[s]
        ax.text(cx, y_h + 4.2, ("✓ " if s == "hit" else "✗ " if s == "miss" else "") + text, ha="center",
                va="center", fontsize=10, color={"hit": GREEN, "miss": RED, "unread": MUTED}[s],
                fontweight="normal" if s == "unread" else "bold")
    same = [i for i in range(len(hb)) if b[i * bs:(i + 1) * bs] == a[i * bs:(i + 1) * bs] and hb[i] != ha[i]]
    y_t = y_h + 7.2
    ax.text(1.0, y_t, f"B's block {diff[0] // bs} differs in one token (red): its hash is not in the cache, "
            "and the walk stops there.", fontsize=10, color=MUTED, va="center")
    ax.text(1.0, y_t + 2.0, f"B's block {same[0]} holds A's block {same[0]}'s tokens, but after another past: "
            "another hash, never a hit.", fontsize=10, color=MUTED, va="center")
    ax.text(1.0, y_t + 4.0, f"B takes blocks {hit} ({len(hit) * bs} tokens) from the cache and computes its "
            f"other {len(b) - len(hit) * bs}.", fontsize=10, color=MUTED, va="center")
    info = {"a": a, "b": b, "block_size": bs,
            "hashes": {who: [h for _, h, _ in sorted((i, h, s) for i, h, s in _labelled(ax, f"hash-{who}"))]
                       for who in ("A", "B")},
            "status": [("stored", "hit", "miss", "unread")[s] for _, _, s in sorted(_labelled(ax, "hash-B"))],
            "cached": dict(sorted(_labelled(ax, "cached"))),
            "hit": hit, "same_tokens_other_hash": same}
    return fig, info


# --------------------------------------------------------------------------- cascade attention

CASCADE_TABLE = ([7, 2, 9, 4, -1], [7, 2, 9, 11, -1], [7, 2, 9, 5, 12], [3, 8, -1, -1, -1])
CASCADE_LENS = (15, 13, 18, 7)


def cascade_merge(block_size=4, num_kv_heads=1, num_q_heads=2, head_size=8, seed=3):
    """Four sequences, three of them behind the same three blocks: plan_cascade's group, the
    blocks each pass reads, and the merge of one row's two partial states."""
    bs = block_size
    table, lens = np.array(CASCADE_TABLE), np.array(CASCADE_LENS)
    groups, prefix_lens = cascade.plan_cascade(table, lens, bs)
    rng = np.random.default_rng(seed)
    num_blocks = int(table.max()) + 1
    k_pool = rng.standard_normal((num_blocks, num_kv_heads, head_size // 4, bs, 4))
    v_pool = rng.standard_normal((num_blocks, num_kv_heads, head_size, bs))
    q = rng.standard_normal((len(lens), num_q_heads, head_size)) * 1.5
    scale = 1.0 / np.sqrt(head_size)
    prefix = int(groups[0][1])
    out = cascade.cascade_decode_attention(q, k_pool, v_pool, table, lens, scale, bs, chunk_tokens=prefix)
    # Sequence 0's two partial states are chapter 5's partitions cut at the prefix's end.
    m, l, o = decode_partitions(q[:1], k_pool, v_pool, table[:1], lens[:1], scale, bs, partition_size=prefix)
    m, l, o = m[0, 0, :2], l[0, 0, :2], o[0, 0, :2]
    M = m.max()
    w = l * np.exp(m - M)

    H = 37.5
    fig, ax = _panel(H)
    cw, ch, x0, top, row_h = 6.0, 2.6, 14.0, 3.4, 3.5
    ax.text(1.0, 1.2, "block tables", fontsize=10.5, fontweight="bold", va="center")
    ax.text(x0 + 5 * cw + 2.0, 1.2, "what each pass reads", fontsize=10.5, fontweight="bold", va="center")
    members = groups[0][0]
    for s in range(len(lens)):
        y = top + s * row_h
        ax.text(1.0, y + ch / 2, f"seq {s} ({lens[s]})", va="center", fontsize=10.5, color=SEQ[s], fontweight="bold")
        for i in range(-(-int(lens[s]) // bs)):
            shared = i * bs < prefix_lens[s]
            filled = min(bs, int(lens[s]) - i * bs)
            x = x0 + i * cw
            st.cell(ax, x, y, filled / bs * (cw - 0.4), ch, fc=LIGHT[PINK] if shared else LIGHT[SEQ[s]],
                    ec="none", lw=0)  # the slots the block's tokens fill
            c = st.cell(ax, x, y, cw - 0.4, ch, fc="none", ec=PINK if shared else SEQ[s],
                        lw=1.6 if shared else 0.9, z=3)
            c.set_gid("prefix" if shared else "suffix")
            c.set_label(f"{s}:{i}:{table[s, i]}")
            ax.text(x + (cw - 0.4) / 2, y + ch / 2, str(table[s, i]), ha="center", va="center", fontsize=10,
                    fontweight="bold", zorder=4)
    # What is read: the group's prefix once, every suffix by its own sequence.
    xr = x0 + 5 * cw + 2.0
    y0, y1 = top + members[0] * row_h, top + members[-1] * row_h + ch
    ax.plot([xr, xr + 0.8, xr + 0.8, xr], [y0, y0, y1, y1], color=PINK, lw=1.6)
    pref_blocks = [int(v) for v in table[members[0], :prefix // bs]]
    ax.text(xr + 1.8, (y0 + y1) / 2 - 3.2, "1. prefix pass:", fontsize=10.5, fontweight="bold", color=INK,
            va="center")
    ax.text(xr + 1.8, (y0 + y1) / 2 - 1.4, f"blocks {', '.join(map(str, pref_blocks))} read once for",
            fontsize=10, va="center")
    ax.text(xr + 1.8, (y0 + y1) / 2 + 0.4, f"the {len(members)} sequences' query rows", fontsize=10, va="center")
    ax.text(xr + 1.8, (y0 + y1) / 2 + 2.6, "2. suffix pass: each sequence", fontsize=10.5, fontweight="bold",
            va="center")
    ax.text(xr + 1.8, (y0 + y1) / 2 + 4.4, "reads its own blocks after it", fontsize=10, va="center")
    ax.text(xr + 1.8, top + 3 * row_h + ch / 2, "no group: chapter 5's path", fontsize=10, va="center", color=MUTED)
    per_seq = int(sum(-(-int(n) // bs) for n in lens))
    read = len(pref_blocks) + per_seq - len(members) * len(pref_blocks)
    y = top + len(lens) * row_h + 0.8
    ax.text(1.0, y, f"Blocks read, per head: {per_seq} by chapter 5 (every sequence its whole table), "
            f"{read} by cascade.", fontsize=10, va="center")
    # The merge of sequence 0's first query head.
    y = y + 3.2
    ax.plot([0.5, 99.5], [y - 1.4, y - 1.4], color=GRID, lw=0.6)
    ax.text(1.0, y, "3. merge, for seq 0's query head 0 (chapter 5's merge_partitions):", fontsize=10.5,
            fontweight="bold", va="center")
    names = (f"prefix (tokens 0-{prefix - 1})", f"suffix (tokens {prefix}-{lens[0] - 1})")
    for p in range(2):
        yy = y + 2.4 + p * 2.6
        ax.text(1.0, yy, f"{names[p]}:  m = {m[p]:.3f},  l = {l[p]:.3f},  w = l·exp(m − M) = {w[p]:.3f}",
                fontsize=10, va="center", family="DejaVu Sans Mono")
    yb = y + 7.6
    bar_x, bar_w = 1.0, 98.0
    share = w / w.sum()
    x = bar_x
    for p, colour in enumerate((PINK, SEQ[0])):
        c = st.cell(ax, x, yb, bar_w * share[p], 2.8, fc=LIGHT[colour], ec=colour, lw=1.2)
        c.set_gid("weight")
        c.set_label(f"{p}")
        ax.text(x + bar_w * share[p] / 2, yb + 1.4, f"{'prefix' if p == 0 else 'suffix'}: {share[p]:.0%} of the "
                "weight", ha="center", va="center", fontsize=10, fontweight="bold")
        x += bar_w * share[p]
    ref = pa_ref.paged_decode_attention(q, k_pool, v_pool, table, lens, scale, bs)
    merged = merge_partitions(m[None, None], l[None, None], o[None, None])[0, 0]
    gap = float(np.abs(out - ref).max())
    ax.text(1.0, yb + 4.4, f"M = max(m) = {M:.3f};  out = (w₁·o₁ + w₂·o₂) / (w₁ + w₂). Every sequence's "
            "output", fontsize=10, va="center")
    ax.text(1.0, yb + 6.2, "equals attention over its whole context to within 1e-12: softmax over two key sets "
            "is their merge.", fontsize=10, va="center")
    bars = sorted((int(p.get_label()), p.get_width()) for p in ax.patches if p.get_gid() == "weight")
    info = {"table": table, "lens": lens, "block_size": bs, "groups": groups, "prefix_lens": prefix_lens,
            "prefix": {s: [blk for ss, _, blk in _labelled(ax, "prefix") if ss == s] for s in range(len(lens))},
            "suffix": {s: [blk for ss, _, blk in _labelled(ax, "suffix") if ss == s] for s in range(len(lens))},
            "reads": (per_seq, read), "m": m, "l": l, "w": w, "bar_share": [b / bar_w for _, b in bars],
            "merged": merged, "out": out, "ref": ref, "gap": gap}
    return fig, info
