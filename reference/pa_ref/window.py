"""Sliding-window paged attention with attention sinks and a logit soft-cap (chapter 12).

The batch is chapter 10's varlen batch (prefill.py): new token i of sequence b (n_b new
tokens) sits at position p = seq_lens[b] - n_b + i. With a window W it sees the keys
[max(0, p - W + 1), p] -- W keys, its own included -- and never a key after p. The block
table may name a null block (all NaN) for the blocks no row of the step sees: they are never
read here (only the keys a row sees are gathered into its softmax).

Per query head h, with scores s_k = scale * q.k_k over the keys the row sees:
    soft-cap c:  s_k = c * tanh(s_k / c)            (Gemma 2; before the mask)
    sink z_h:    out = sum_k e^(s_k - m) v_k / (e^(z_h - m) + sum_k e^(s_k - m))
                 (m = max(z_h, max_k s_k)): the sink joins the denominator only.
"""

import numpy as np

from .paged import paged_gather, pool_dims


def first_key(pos, window):
    """The first key a row at position pos sees (0 without a window)."""
    return 0 if window is None else max(0, pos - window + 1)


def window_attention(q, k_pool, v_pool, block_table, seq_lens, query_start_loc, scale,
                     window=None, sinks=None, softcap=None):
    """[T, Hq, D] float64: every new token's attention over the keys its window sees."""
    q = np.asarray(q, dtype=np.float64)
    seq_lens = np.asarray(seq_lens)
    query_start_loc = np.asarray(query_start_loc)
    block_table = np.asarray(block_table)
    _, num_kv_heads, head_size, block_size, _ = pool_dims(k_pool, v_pool)
    if window is not None and window <= 0:
        raise ValueError(f"window must be positive, got {window}")
    num_heads = q.shape[1]
    if sinks is not None:
        sinks = np.asarray(sinks, dtype=np.float64)
        if sinks.shape != (num_heads,):
            raise ValueError(f"sinks must be one per query head ({num_heads}), got {sinks.shape}")
    if softcap is not None and not softcap > 0:
        raise ValueError(f"softcap must be positive, got {softcap}")
    group = num_heads // num_kv_heads
    k_dense, v_dense = paged_gather(k_pool, v_pool, block_table, seq_lens,
                                    block_table.shape[1] * block_size)
    out = np.zeros(q.shape)
    for b in range(block_table.shape[0]):
        start, end = int(query_start_loc[b]), int(query_start_loc[b + 1])
        n_new, length = end - start, int(seq_lens[b])
        for i in range(n_new):
            pos = length - n_new + i
            lo = first_key(pos, window)
            keys = np.repeat(k_dense[b, lo:pos + 1], group, axis=1)  # [n, Hq, D]
            values = np.repeat(v_dense[b, lo:pos + 1], group, axis=1)
            scores = scale * np.einsum("hd,nhd->hn", q[start + i], keys)
            if softcap is not None:
                scores = softcap * np.tanh(scores / softcap)
            m = scores.max(axis=1)
            if sinks is not None:
                m = np.maximum(m, sinks)
            e = np.exp(scores - m[:, None])
            denom = e.sum(axis=1)
            if sinks is not None:
                denom = denom + np.exp(sinks - m)
            out[start + i] = np.einsum("hn,nhd->hd", e, values) / denom[:, None]
    return out
