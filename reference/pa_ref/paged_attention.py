"""Decode attention read straight from paged pools: the spec of the v1 and v2 kernels.

v1 (paged_decode_attention) is, by definition, "gather the pages into a dense
cache, then run dense decode attention". Nothing new is computed here: the
point is that a page-walking kernel must agree with that composition.

v2 (partitioned_decode_attention) splits each sequence into partitions of
partition_size tokens. One pass computes, per partition p,

    m_p = max of the partition's scores          (max_logits)
    l_p = sum of exp(score - m_p)                (exp_sums)
    o_p = sum of exp(score - m_p) * v / l_p      (partial_out, a normalized output)

and a reduce pass merges them with the rescaling rule

    M = max_p m_p,   w_p = l_p * exp(m_p - M),   out = sum_p w_p o_p / sum_p w_p.

Both steps are spelled out below (decode_partitions, merge_partitions) because
they are what v2's two kernels compute.
"""

import numpy as np

from .attention import decode_attention
from .paged import paged_gather, pool_dims

# vLLM's v2 partition: 512 tokens, a multiple of every block size it supports.
PARTITION_SIZE = 512


def _gather(k_pool, v_pool, block_table, context_lens, block_size):
    """Check block_size against the pools and gather to [B, M * block_size, Hkv, D]."""
    _, _, _, pool_block_size, _ = pool_dims(k_pool, v_pool)
    if block_size != pool_block_size:
        raise ValueError(f"block_size {block_size} does not match the pools' {pool_block_size}")
    block_table = np.asarray(block_table)
    if block_table.ndim != 2:
        raise ValueError(f"block_table must be [B, M], got shape {block_table.shape}")
    max_seq_len = block_table.shape[1] * block_size
    return paged_gather(k_pool, v_pool, block_table, context_lens, max_seq_len)


def paged_decode_attention(q, k_pool, v_pool, block_table, context_lens, scale, block_size):
    """Decode attention over paged pools (the v1 kernel's spec): [B, Hq, D] float64.

    q [B, Hq, D]; k_pool [num_blocks, Hkv, D // x, block_size, x];
    v_pool [num_blocks, Hkv, D, block_size]; block_table [B, M] (entries past a
    sequence's last block are padding and never read); context_lens [B].
    Query head h reads KV head h // (Hq // Hkv); context_len 0 gives zeros.
    """
    k_dense, v_dense = _gather(k_pool, v_pool, block_table, context_lens, block_size)
    return decode_attention(q, k_dense, v_dense, np.asarray(context_lens), scale)


def decode_partitions(q, k_pool, v_pool, block_table, context_lens, scale, block_size,
                      partition_size=PARTITION_SIZE):
    """v2's first pass: per partition, (max_logits, exp_sums, partial_out).

    Returns max_logits [B, Hq, P], exp_sums [B, Hq, P], partial_out [B, Hq, P, D],
    float64, with P = ceil(M * block_size / partition_size). Partition p holds
    tokens [p * partition_size, (p + 1) * partition_size) of the sequence; a
    partition with no tokens (p * partition_size >= context_len) gets
    max_logits = -inf, exp_sums = 0 and partial_out = 0, which the merge ignores.
    """
    if partition_size <= 0:
        raise ValueError(f"partition_size must be positive, got {partition_size}")
    q = np.asarray(q, dtype=np.float64)
    context_lens = np.asarray(context_lens)
    k_dense, v_dense = _gather(k_pool, v_pool, block_table, context_lens, block_size)
    batch, num_heads, head_size = q.shape
    group = num_heads // k_dense.shape[2]
    num_partitions = -(-k_dense.shape[1] // partition_size)

    max_logits = np.full((batch, num_heads, num_partitions), -np.inf)
    exp_sums = np.zeros((batch, num_heads, num_partitions))
    partial_out = np.zeros((batch, num_heads, num_partitions, head_size))
    for b in range(batch):
        n = int(context_lens[b])
        for p in range(-(-n // partition_size)):
            start, end = p * partition_size, min((p + 1) * partition_size, n)
            # Same arithmetic as decode_attention, on this partition's tokens only.
            keys = np.repeat(k_dense[b, start:end], group, axis=1)  # [n_p, Hq, D]
            values = np.repeat(v_dense[b, start:end], group, axis=1)
            scores = scale * np.einsum("hd,nhd->hn", q[b], keys)  # [Hq, n_p]
            m = scores.max(axis=-1)
            e = np.exp(scores - m[:, None])
            l = e.sum(axis=-1)
            max_logits[b, :, p] = m
            exp_sums[b, :, p] = l
            partial_out[b, :, p] = np.einsum("hn,nhd->hd", e, values) / l[:, None]
    return max_logits, exp_sums, partial_out


def merge_partitions(max_logits, exp_sums, partial_out):
    """v2's reduce: out = sum_p w_p o_p / sum_p w_p with w_p = l_p * exp(m_p - max_p m_p).

    Shapes as decode_partitions returns them; the result is [B, Hq, D] float64.
    A row whose partitions are all empty (context_len 0) gives zeros.
    """
    max_logits = np.asarray(max_logits, dtype=np.float64)
    exp_sums = np.asarray(exp_sums, dtype=np.float64)
    partial_out = np.asarray(partial_out, dtype=np.float64)
    out = np.zeros(partial_out.shape[:2] + partial_out.shape[3:])
    for b, h in np.ndindex(*max_logits.shape[:2]):
        m = max_logits[b, h]
        if not np.isfinite(m).any():
            continue  # an empty sequence
        # Rescale every partition's sum to the global max; an empty one weighs 0.
        w = exp_sums[b, h] * np.exp(m - m.max())
        out[b, h] = w @ partial_out[b, h] / w.sum()
    return out


def partitioned_decode_attention(q, k_pool, v_pool, block_table, context_lens, scale, block_size,
                                 partition_size=PARTITION_SIZE):
    """The v2 kernel's spec: partition, then merge. Equals paged_decode_attention."""
    parts = decode_partitions(q, k_pool, v_pool, block_table, context_lens, scale, block_size,
                              partition_size)
    return merge_partitions(*parts)
