"""Prefill over paged KV: causal attention of a chunk of new tokens per sequence.

A step of a serving loop hands each sequence a chunk of new tokens (a whole prompt,
a piece of one in chunked prefill, or the rest of a prompt after a prefix-cache
hit). Their K and V are first written to the pool (reshape_and_cache); then every
new token attends, causally, to everything its sequence has in the pool up to and
including itself: the cached prefix and the chunk's earlier tokens.

The batch is "varlen": the new tokens of all sequences are stacked,

    q                [num_tokens, Hq, D]
    query_start_loc  [B + 1]   sequence b's new tokens are rows
                               query_start_loc[b] .. query_start_loc[b + 1] - 1
    context_lens     [B]       tokens of sequence b in the pool, the new ones included

so new token i of sequence b (n_b new tokens) sits at position
context_lens[b] - n_b + i and sees positions 0 .. that position.
"""

import numpy as np

from .attention import softmax
from .paged import paged_gather, pool_dims


def paged_prefill_attention(q, k_pool, v_pool, block_table, context_lens, query_start_loc, scale,
                            kv_limit=None):
    """Causal attention of every new token over its sequence's paged K/V: [T, Hq, D] float64.

    kv_limit: also cut every row's keys at the sequence's first kv_limit tokens (what a work
    item [0, kv_limit) of its tile must give)."""
    q = np.asarray(q, dtype=np.float64)
    context_lens = np.asarray(context_lens)
    query_start_loc = np.asarray(query_start_loc)
    _, num_kv_heads, head_size, block_size, _ = pool_dims(k_pool, v_pool)
    block_table = np.asarray(block_table)
    batch = block_table.shape[0]
    if query_start_loc.shape != (batch + 1,) or query_start_loc[0] != 0:
        raise ValueError(f"query_start_loc must be [B + 1] starting at 0, got {query_start_loc}")
    if q.ndim != 3 or q.shape[0] != query_start_loc[-1] or q.shape[2] != head_size:
        raise ValueError(f"q must be [{query_start_loc[-1]}, Hq, {head_size}], got {q.shape}")
    num_heads = q.shape[1]
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads {num_heads} is not a multiple of num_kv_heads {num_kv_heads}")
    group = num_heads // num_kv_heads
    k_dense, v_dense = paged_gather(k_pool, v_pool, block_table, context_lens,
                                    block_table.shape[1] * block_size)
    out = np.zeros(q.shape)
    for b in range(batch):
        start, end = int(query_start_loc[b]), int(query_start_loc[b + 1])
        n_new, length = end - start, int(context_lens[b])
        if not 0 <= n_new <= length:
            raise ValueError(f"sequence {b}: {n_new} new tokens but context_len {length}")
        for i in range(n_new):
            pos = length - n_new + i
            seen = pos + 1 if kv_limit is None else min(pos + 1, kv_limit)
            keys = np.repeat(k_dense[b, :seen], group, axis=1)  # [seen, Hq, D]
            values = np.repeat(v_dense[b, :seen], group, axis=1)
            scores = scale * np.einsum("hd,nhd->hn", q[start + i], keys)
            out[start + i] = np.einsum("hn,nhd->hd", softmax(scores), values)
    return out
