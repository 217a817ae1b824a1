"""Hybrid models: sliding-window layers, attention sinks and logit soft-capping.

Chapter 12's reference. A sliding-window layer's query at position p sees only the keys
at positions [p - window + 1, p] (window counts the query's own key); a full layer sees
[0, p]. An attention sink is a learned logit per query head that joins the softmax's
denominator and contributes no value: out = sum_j e^(s_j - m) v_j / (e^(sink - m) +
sum_j e^(s_j - m)), so a head can put weight "nowhere". A soft cap (Gemma 2) bends every
scaled score into (-cap, cap): s -> cap * tanh(s / cap).

What a window means for memory: once no current or future query can see a block, the
block can go back to the pool. The sequence's next query sits at position next_pos (the
first token not yet computed); it and every later one see nothing left of
next_pos - window + 1, so every whole block before that position is dead.

The batch is varlen, as in chapter 10: q [T, Hq, D], sequence b's new tokens are rows
query_start_loc[b] .. query_start_loc[b + 1] - 1, the last of its seq_lens[b] tokens.
"""

import numpy as np

from .paged import paged_gather, pool_dims


def visible_range(pos, window=None):
    """The key positions [first, last] a query at `pos` sees: [pos - window + 1, pos] clipped at 0."""
    if window is not None and window <= 0:
        raise ValueError(f"window must be positive, got {window}")
    return (0 if window is None else max(0, pos - window + 1)), pos


def capped(scores, softcap=None):
    if softcap is None:
        return scores
    if softcap <= 0:
        raise ValueError(f"softcap must be positive, got {softcap}")
    return softcap * np.tanh(scores / softcap)


def attend(q_row, keys, values, scale, sink=None, softcap=None):
    """One query row [H, D] over keys/values [n, H, D] (already repeated per query head)."""
    scores = capped(scale * np.einsum("hd,nhd->hn", q_row, keys), softcap)   # [H, n]
    m = scores.max(axis=1) if scores.shape[1] else np.full(scores.shape[0], -np.inf)
    if sink is not None:
        m = np.maximum(m, sink)
    weights = np.exp(scores - m[:, None])
    denom = weights.sum(axis=1) + (np.exp(sink - m) if sink is not None else 0.0)
    return np.einsum("hn,nhd->hd", weights, values) / denom[:, None]


def hybrid_attention(q, k_pool, v_pool, block_table, seq_lens, query_start_loc, scale,
                     window=None, sinks=None, softcap=None):
    """Causal varlen attention with an optional window, per-head sinks [Hq] and soft cap:
    [T, Hq, D] float64. A sequence with no new tokens owns no row."""
    q = np.asarray(q, dtype=np.float64)
    seq_lens, query_start_loc = np.asarray(seq_lens), np.asarray(query_start_loc)
    _, num_kv_heads, head_size, block_size, _ = pool_dims(k_pool, v_pool)
    block_table = np.asarray(block_table)
    batch = block_table.shape[0]
    if query_start_loc.shape != (batch + 1,) or query_start_loc[0] != 0 or query_start_loc[-1] != len(q):
        raise ValueError(f"query_start_loc {query_start_loc} does not match {batch} sequences and {len(q)} rows")
    num_heads = q.shape[1]
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads {num_heads} is not a multiple of num_kv_heads {num_kv_heads}")
    if sinks is not None:
        sinks = np.asarray(sinks, dtype=np.float64)
        if sinks.shape != (num_heads,):
            raise ValueError(f"sinks must be [Hq] = [{num_heads}], got {sinks.shape}")
    group = num_heads // num_kv_heads
    # Dead blocks (a window's freed entries point at a NaN-filled null block) are gathered
    # too, and never used: every row takes only its visible range.
    k_dense, v_dense = paged_gather(k_pool, v_pool, block_table, seq_lens, block_table.shape[1] * block_size)
    out = np.zeros(q.shape)
    for b in range(batch):
        start, end = int(query_start_loc[b]), int(query_start_loc[b + 1])
        n_new, length = end - start, int(seq_lens[b])
        if not 0 <= n_new <= length:
            raise ValueError(f"sequence {b}: {n_new} new tokens but seq_len {length}")
        for i in range(n_new):
            first, last = visible_range(length - n_new + i, window)
            keys = np.repeat(k_dense[b, first:last + 1], group, axis=1)
            values = np.repeat(v_dense[b, first:last + 1], group, axis=1)
            out[start + i] = attend(q[start + i], keys, values, scale, sinks, softcap)
    return out


# ---- Which blocks a window still needs ------------------------------------------------

def first_needed_block(next_pos, window, block_size):
    """The first logical block that a query at position >= next_pos can still see; blocks
    before it are dead (no current or future query reads them). A full layer needs all."""
    if window is None:
        return 0
    first, _ = visible_range(next_pos, window)
    return first // block_size


def blocks_held(length, window, block_size):
    """Blocks a sequence of `length` computed tokens holds in a layer group: every block for a
    full layer; for a window, the live ones, from the first block the next query can see to
    the last written one."""
    total = -(-length // block_size)
    return total - min(first_needed_block(length, window, block_size), total)


def hybrid_kv_blocks(length, block_size, pattern):
    """Blocks held for one sequence over a layer pattern, e.g. [1024] * 5 + [None] (Gemma 3's
    five sliding layers per full one): the sum over the layers of blocks_held."""
    return sum(blocks_held(length, w, block_size) for w in pattern)


# ---- Prefix caching per group type ---------------------------------------------------

def prefix_hit_blocks(cached, windows, block_size, max_blocks):
    """The longest prefix, in whole blocks, that every layer group can serve from its cache.

    cached[g][i]: block i of the prompt's prefix is cached in group g; windows[g] is None for
    a full group. A prefix of P blocks needs, in a full group, every block 0 .. P-1 (every
    later query sees them all); in a sliding group only the blocks that the first query
    after it (position P * block_size) can see, first_needed_block(P * block_size) .. P - 1:
    the earlier ones are dead, and their entries can be the null block. A sliding group's
    condition is not monotone in P (a block missing early does not stop a longer hit), so
    every P is tried, longest first. At most max_blocks, and at most the blocks known."""
    limit = min([max_blocks] + [len(c) for c in cached])
    for p in range(limit, 0, -1):
        if all(all(c[i] for i in range(first_needed_block(p * block_size, w, block_size), p))
               for c, w in zip(cached, windows)):
            return p
    return 0
