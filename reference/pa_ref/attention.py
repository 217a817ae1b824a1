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


# The chapter 1 kernel's way to the same output: one pass per warp with an online softmax,
# then a merge of the warps' states. decode_attention_by_warps must equal decode_attention;
# the book's figures of the rescale and of the merge are drawn from these functions.

def online_softmax(scores, values):
    """One warp's pass over its tokens, in order; returns the state after each token.

    scores [n], values [n, D]. Starting from m = -inf, l = 0, acc = 0, token t does
        m_new = max(m, s_t);  c = exp(m - m_new);  p = exp(s_t - m_new)
        l = l * c + p;  acc = acc * c + p * v_t;  m = m_new
    Each state is a dict with m, c, p, l and acc (float64) after that token; acc / l of
    the last one is softmax(scores) @ values. c is 0 on the first token (exp(-inf)).
    """
    scores = np.asarray(scores, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    m, l, acc = -np.inf, 0.0, np.zeros(values.shape[1:])
    states = []
    for s, v in zip(scores, values):
        m_new = max(m, s)
        c = np.exp(m - m_new)
        p = np.exp(s - m_new)
        l = l * c + p
        acc = acc * c + p * v
        m = m_new
        states.append({"m": m, "c": c, "p": p, "l": l, "acc": acc.copy()})
    return states


def warp_softmax_states(scores, values, num_warps=4):
    """Each warp's final (m, l, acc) over its tokens t = w, w + num_warps, ... (the chapter 1
    kernel's split); a warp that saw no token keeps m = -inf, l = 0, acc = 0.
    Returns (m [W], l [W], acc [W, D])."""
    from .work_maps import dense_warp_tokens

    values = np.asarray(values, dtype=np.float64)
    m, l = np.full(num_warps, -np.inf), np.zeros(num_warps)
    acc = np.zeros((num_warps,) + values.shape[1:])
    for w in range(num_warps):
        tokens = dense_warp_tokens(w, len(scores), num_warps)
        if tokens:
            last = online_softmax(np.asarray(scores)[tokens], values[tokens])[-1]
            m[w], l[w], acc[w] = last["m"], last["l"], last["acc"]
    return m, l, acc


def merge_softmax_states(m, l, acc):
    """Merge raw online-softmax states (not normalised by their own l):
        M = max_w m_w,  f_w = exp(m_w - M) (0 for m_w = -inf),  L = sum_w l_w f_w,
        out = sum_w f_w acc_w / L.
    Returns (M, f [W], L, out); every state empty gives out = 0."""
    m = np.asarray(m, dtype=np.float64)
    l = np.asarray(l, dtype=np.float64)
    acc = np.asarray(acc, dtype=np.float64)
    M = m.max()
    if M == -np.inf:
        return M, np.zeros_like(m), 0.0, np.zeros(acc.shape[1:])
    f = np.where(m == -np.inf, 0.0, np.exp(m - M))
    L = float(l @ f)
    return M, f, L, (f @ acc) / L


def decode_attention_by_warps(q, k, v, context_lens, scale, num_warps=4):
    """decode_attention computed as the chapter 1 kernel computes it: per (sequence, query
    head), warp_softmax_states then merge_softmax_states. Same shapes and result."""
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    context_lens = np.asarray(context_lens)
    batch, num_heads, num_kv_heads, head_size, _ = check_shapes(q, k, v, context_lens)
    out = np.zeros((batch, num_heads, head_size))
    for b, h in np.ndindex(batch, num_heads):
        n = int(context_lens[b])
        g = h // (num_heads // num_kv_heads)
        scores = scale * (k[b, :n, g] @ q[b, h])
        out[b, h] = merge_softmax_states(*warp_softmax_states(scores, v[b, :n, g], num_warps))[3]
    return out
