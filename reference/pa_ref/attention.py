"""Decode attention on a dense KV cache: the float64 reference.

One new token per sequence attends to that sequence's first context_len keys.
This is the function every kernel in the course is checked against.
"""

import numpy as np


def check_shapes(q, k, v, context_lens):
    """Validate the shapes of decode_attention's inputs; return (B, Hq, Hkv, D, L)."""
    if q.ndim != 3:
        raise ValueError(f"q must be [B, Hq, D], got shape {q.shape}")
    if k.ndim != 4 or k.shape != v.shape:
        raise ValueError(
            f"k and v must both be [B, max_seq_len, Hkv, D], got {k.shape} and {v.shape}"
        )
    batch, num_heads, head_size = q.shape
    kv_batch, max_seq_len, num_kv_heads, kv_head_size = k.shape
    if kv_batch != batch or kv_head_size != head_size:
        raise ValueError(f"q {q.shape} and k {k.shape} disagree on batch or head size")
    if num_kv_heads == 0 or num_heads % num_kv_heads != 0:
        raise ValueError(
            f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})"
        )
    if context_lens.shape != (batch,):
        raise ValueError(f"context_lens must be [B] = [{batch}], got {context_lens.shape}")
    if np.any(context_lens < 0) or np.any(context_lens > max_seq_len):
        raise ValueError(f"context_lens must lie in [0, {max_seq_len}], got {context_lens}")
    return batch, num_heads, num_kv_heads, head_size, max_seq_len


def softmax(scores):
    """Softmax over the last axis; subtracting the max keeps exp() from overflowing."""
    shifted = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(shifted)
    return weights / weights.sum(axis=-1, keepdims=True)


def decode_attention(q, k, v, context_lens, scale):
    """out[b, h] = softmax(scale * q[b, h] . k[b, :n, g]) @ v[b, :n, g].

    Shapes: q [B, Hq, D]; k, v [B, max_seq_len, Hkv, D]; context_lens [B].
    n = context_lens[b], and query head h reads KV head g = h // (Hq // Hkv)
    (GQA; Hkv == 1 is MQA, Hkv == Hq is plain multi-head attention).
    A sequence with n == 0 gets an all-zero output. Returns [B, Hq, D] float64.
    """
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    context_lens = np.asarray(context_lens)
    batch, num_heads, num_kv_heads, head_size, _ = check_shapes(q, k, v, context_lens)
    group = num_heads // num_kv_heads

    out = np.zeros((batch, num_heads, head_size))
    for b in range(batch):
        n = int(context_lens[b])
        if n == 0:
            continue
        # Slice, never mask: positions >= n may hold NaN, and 0 * NaN is NaN.
        keys = k[b, :n]  # [n, Hkv, D]
        values = v[b, :n]
        # Repeat each KV head `group` times, so column h of the result is KV head h // group.
        keys = np.repeat(keys, group, axis=1)  # [n, Hq, D]
        values = np.repeat(values, group, axis=1)
        scores = scale * np.einsum("hd,nhd->hn", q[b], keys)  # [Hq, n]
        out[b] = np.einsum("hn,nhd->hd", softmax(scores), values)
    return out
