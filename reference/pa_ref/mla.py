"""Multi-head latent attention (MLA): the latent KV cache, computed two ways.

MLA (DeepSeek-V2/V3, Kimi K2) caches per token and layer one compressed latent
c_kv (d_c = 512 wide) and one decoupled RoPE key k_rope (d_r = 64 wide), shared by
every query head. A head's key and value are up-projections of the latent:

    k_h = [ c_kv @ W_UK[h]  |  k_rope ]        (d_nope + d_r wide)
    v_h =   c_kv @ W_UV[h]                     (d_v wide)

and a query head is q_h = [q_nope_h | q_rope_h]. Two ways to compute the same output:

    naive     decompress K and V for every head, then ordinary attention (MHA);
    absorbed  fold W_UK into the query, q'_h = q_nope_h @ W_UK[h]^T (d_c wide), score
              every cached token with q'_h . c_kv + q_rope_h . k_rope, take the
              softmax-weighted sum of the latents themselves, and only then apply
              W_UV[h]. Each cached token is read once, for all heads: attention
              becomes multi-query (MQA) with a (d_c + d_r)-wide key and a d_c-wide
              value, over a cache of d_c + d_r numbers per token.

The two agree because (q_nope_h @ W_UK[h]^T) . c_kv = q_nope_h . (c_kv @ W_UK[h]) and
the weighted sum commutes with W_UV[h]. Both use the scale 1 / sqrt(d_nope + d_r) of
the decompressed head.

Paged, the cache is one pool of blocks, each holding block_size tokens' [c_kv | k_rope]
rows (no per-head axis: every head shares them):

    latent_pool: [num_blocks, block_size, d_c + d_r]
"""

import numpy as np

from .attention import softmax

D_C, D_ROPE = 512, 64  # DeepSeek-V3's latent and RoPE widths


def check_weights(w_uk, w_uv):
    """Return (H, d_c, d_nope, d_v) of up-projections W_UK [H, d_c, d_nope], W_UV [H, d_c, d_v]."""
    if w_uk.ndim != 3 or w_uv.ndim != 3 or w_uk.shape[:2] != w_uv.shape[:2]:
        raise ValueError(f"W_UK must be [H, d_c, d_nope] and W_UV [H, d_c, d_v], got {w_uk.shape} and {w_uv.shape}")
    heads, d_c, d_nope = w_uk.shape
    return heads, d_c, d_nope, w_uv.shape[2]


def mla_scale(d_nope, d_rope):
    return 1.0 / np.sqrt(d_nope + d_rope)


def causal_limits(num_queries, length):
    """Query i of a sequence's last num_queries tokens sees keys 0 .. length - num_queries + i."""
    if not 0 < num_queries <= length:
        raise ValueError(f"{num_queries} new tokens for a sequence of {length}")
    return [length - num_queries + i + 1 for i in range(num_queries)]


def mla_naive(q_nope, q_rope, c_kv, k_rope, w_uk, w_uv):
    """Decompress every head's K and V, then attention. One sequence; float64.

    q_nope [S, H, d_nope], q_rope [S, H, d_r]: the sequence's last S tokens' queries;
    c_kv [L, d_c], k_rope [L, d_r]: its cache (the S new tokens included, last).
    Returns [S, H, d_v].
    """
    heads, d_c, d_nope, d_v = check_weights(w_uk, w_uv)
    q_nope, q_rope = np.asarray(q_nope, np.float64), np.asarray(q_rope, np.float64)
    c_kv, k_rope = np.asarray(c_kv, np.float64), np.asarray(k_rope, np.float64)
    k_nope = np.einsum("lc,hcn->lhn", c_kv, w_uk)                       # [L, H, d_nope]
    k = np.concatenate([k_nope, np.broadcast_to(k_rope[:, None, :], (len(c_kv), heads, k_rope.shape[1]))], axis=2)
    v = np.einsum("lc,hcv->lhv", c_kv, w_uv)                            # [L, H, d_v]
    q = np.concatenate([q_nope, q_rope], axis=2)                        # [S, H, d_nope + d_r]
    scale = mla_scale(d_nope, k_rope.shape[1])
    out = np.zeros((len(q), heads, d_v))
    for i, end in enumerate(causal_limits(len(q), len(c_kv))):
        p = softmax(scale * np.einsum("hd,lhd->hl", q[i], k[:end]))
        out[i] = np.einsum("hl,lhv->hv", p, v[:end])
    return out


def absorb_query(q_nope, q_rope, w_uk):
    """The absorbed query [S, H, d_c + d_r]: q_nope_h @ W_UK[h]^T, then q_rope_h."""
    q_lat = np.einsum("shn,hcn->shc", np.asarray(q_nope, np.float64), w_uk)
    return np.concatenate([q_lat, np.asarray(q_rope, np.float64)], axis=2)


def latent_attention(q_abs, latent, scale, d_c):
    """MQA over latent rows: q_abs [S, H, d_c + d_r], latent [L, d_c + d_r] -> [S, H, d_c].

    Scores use the whole row (latent and RoPE part); the value is the latent part
    alone. Causal over the last S tokens, as in mla_naive.
    """
    q_abs, latent = np.asarray(q_abs, np.float64), np.asarray(latent, np.float64)
    out = np.zeros((len(q_abs), q_abs.shape[1], d_c))
    for i, end in enumerate(causal_limits(len(q_abs), len(latent))):
        p = softmax(scale * q_abs[i] @ latent[:end].T)                 # [H, end]
        out[i] = p @ latent[:end, :d_c]
    return out


def mla_absorbed(q_nope, q_rope, c_kv, k_rope, w_uk, w_uv):
    """The same output as mla_naive, computed the way a server does: [S, H, d_v]."""
    _, d_c, d_nope, _ = check_weights(w_uk, w_uv)
    latent = np.concatenate([np.asarray(c_kv, np.float64), np.asarray(k_rope, np.float64)], axis=1)
    o_lat = latent_attention(absorb_query(q_nope, q_rope, w_uk), latent,
                             mla_scale(d_nope, np.asarray(k_rope).shape[1]), d_c)
    return np.einsum("shc,hcv->shv", o_lat, w_uv)


# ---- The paged latent cache ------------------------------------------------------------

def latent_pool_index(block, slot, e, block_size, width):
    """Flat index of element e of the token at offset `slot` of `block`: rows are contiguous."""
    return (block * block_size + slot) * width + e


def reshape_and_cache_latent(c_kv, k_rope, latent_pool, slot_mapping):
    """Write token i's [c_kv[i] | k_rope[i]] into slot slot_mapping[i] (< 0: a padding token)."""
    num_blocks, block_size, width = latent_pool.shape
    c_kv, k_rope = np.asarray(c_kv), np.asarray(k_rope)
    if c_kv.shape[0] != k_rope.shape[0] or c_kv.shape[1] + k_rope.shape[1] != width:
        raise ValueError(f"c_kv {c_kv.shape} and k_rope {k_rope.shape} do not fill rows of {width}")
    flat = latent_pool.reshape(num_blocks * block_size, width)
    for i, slot in enumerate(np.asarray(slot_mapping, dtype=np.int64)):
        if slot < 0:
            continue
        if slot >= num_blocks * block_size:
            raise ValueError(f"slot_mapping[{i}] = {slot} is outside the pool of {num_blocks} x {block_size}")
        flat[slot, :c_kv.shape[1]] = c_kv[i]
        flat[slot, c_kv.shape[1]:] = k_rope[i]
    return latent_pool


def gather_latent(latent_pool, block_table_row, length):
    """A sequence's first `length` latent rows, in order, from its blocks: [length, width]."""
    _, block_size, width = latent_pool.shape
    out = np.zeros((length, width), dtype=np.float64)
    for pos in range(length):
        out[pos] = latent_pool[block_table_row[pos // block_size], pos % block_size]
    return out


def paged_mla_decode(q_abs, latent_pool, block_table, seq_lens, query_start_loc, scale, d_c):
    """The decode kernel's contract: absorbed queries [T, H, d_c + d_r] of a varlen batch
    (sequence b's new tokens are rows query_start_loc[b] .. [b + 1] - 1, its last ones)
    over the paged latent cache -> latent outputs [T, H, d_c]. Sequences with no new
    token contribute no row."""
    q_abs = np.asarray(q_abs, np.float64)
    query_start_loc, seq_lens = np.asarray(query_start_loc), np.asarray(seq_lens)
    if query_start_loc.shape != (len(seq_lens) + 1,) or query_start_loc[0] != 0 or query_start_loc[-1] != len(q_abs):
        raise ValueError(f"query_start_loc {query_start_loc} does not match {len(seq_lens)} sequences "
                         f"and {len(q_abs)} query rows")
    out = np.zeros((len(q_abs), q_abs.shape[1], d_c))
    for b, length in enumerate(seq_lens):
        start, end = int(query_start_loc[b]), int(query_start_loc[b + 1])
        if end > start:
            out[start:end] = latent_attention(q_abs[start:end], gather_latent(latent_pool, block_table[b], int(length)),
                                              scale, d_c)
    return out


def paged_mla_scores(q_abs, latent_pool, block_table, seq_lens, query_start_loc, scale, keys, kv_end=None):
    """The scores the decode kernel's softmax starts from, for keys 0 .. keys - 1 of each
    sequence: [T, H, keys], in base 2 (q_abs . row * scale * log2(e), the kernel's unit), and
    -inf where the row does not attend the key: past its own position (causal), past the
    sequence, or at or past kv_end (a chunk that stops there). Rows of sequences with no new
    token do not exist (as in paged_mla_decode)."""
    q_abs = np.asarray(q_abs, np.float64)
    out = np.full((len(q_abs), q_abs.shape[1], keys), -np.inf)
    for b, length in enumerate(seq_lens):
        start, end = int(query_start_loc[b]), int(query_start_loc[b + 1])
        if end == start:
            continue
        seen = min(int(length), keys)
        lat = gather_latent(latent_pool, block_table[b], seen)
        for i, limit in enumerate(causal_limits(end - start, int(length))):
            e = min(limit, keys, kv_end if kv_end is not None else keys)
            out[start + i, :, :e] = scale * np.log2(np.e) * (q_abs[start + i] @ lat[:e].T)
    return out


# ---- What a token costs ----------------------------------------------------------------

def mla_bytes_per_token(d_c=D_C, d_rope=D_ROPE, elem_bytes=2):
    """One layer's cache per token: the latent and the RoPE key, once for all heads."""
    return (d_c + d_rope) * elem_bytes


def mla_fp8_bytes_per_token(d_c=D_C, d_rope=D_ROPE, tile=128):
    """The fp8 latent: d_c e4m3 bytes, one fp32 scale per tile of d_c, the RoPE part in 16 bits."""
    if d_c % tile:
        raise ValueError(f"d_c {d_c} is not a multiple of the scale tile {tile}")
    return d_c + 4 * (d_c // tile) + 2 * d_rope


def kv_bytes_per_token(num_kv_heads, head_size, elem_bytes=2):
    """One layer's K and V per token for GQA/MHA (chapter 1's cache)."""
    return 2 * num_kv_heads * head_size * elem_bytes


def flops_per_token(num_query_rows, d_c=D_C, d_rope=D_ROPE):
    """Multiply-adds x 2 that one cached token costs a decode step: QK over d_c + d_r, PV over d_c,
    for every query row (heads x new tokens)."""
    return 2 * num_query_rows * ((d_c + d_rope) + d_c)


# ---- The fp8 latent cache --------------------------------------------------------------
#
# A row of FP8_ROW_BYTES = 656 bytes a token (DeepSeek-V3.2's format, as FlashMLA's FP8
# cache stores it):
#
#     bytes 0 .. 511     c_kv as e4m3, value c of tile t = c // 128 being
#                        e4m3(saturate(float32(c_kv[c]) / scale[t])), round to nearest even
#     bytes 512 .. 527   scale[0 .. 3], float32 (little-endian): scale[t] = float32(amax of
#                        tile t) / 448 in float32, or 1 for a tile whose quotient is 0 (all zeros)
#     bytes 528 .. 655   k_rope, 64 values in the query's 16-bit type (fp16 or bf16)
#
# Pool: uint8 [num_blocks, block_size, 656]. Chapter 6's quantizer (fp8.quantize_e4m3) does
# each value, so the bytes are bit-exact with the kernel's __nv_cvt_float_to_fp8.

FP8_TILE = 128                                        # c_kv values that share one scale
FP8_SCALES = D_C // FP8_TILE                          # 4
FP8_SCALES_AT = D_C                                   # byte offset of the scales: 512
FP8_ROPE_AT = D_C + 4 * FP8_SCALES                    # byte offset of k_rope: 528
FP8_ROW_BYTES = FP8_ROPE_AT + 2 * D_ROPE              # 656


def _sixteen_bit(dtype_name):
    import ml_dtypes
    if dtype_name == "fp16":
        return np.dtype("<f2")
    if dtype_name == "bf16":
        return np.dtype(ml_dtypes.bfloat16)
    raise ValueError(f"the fp8 latent row keeps k_rope in fp16 or bf16, not {dtype_name!r}")


def fp8_tile_scales(c_kv):
    """float32 [n, 4]: each 128-value tile's amax / 448 in float32 (1 where that is 0)."""
    from .fp8 import amax_scales
    c = np.asarray(c_kv, dtype=np.float32)
    return amax_scales(c.reshape(len(c), FP8_SCALES, FP8_TILE), axis=2)


def quantize_latent_fp8(c_kv, k_rope, dtype_name):
    """Token rows [c_kv | k_rope] (values exact in dtype_name) -> uint8 [n, 656]."""
    from .fp8 import quantize_e4m3
    c_kv, k_rope = np.asarray(c_kv, np.float64), np.asarray(k_rope, np.float64)
    if c_kv.shape[1:] != (D_C,) or k_rope.shape != (len(c_kv), D_ROPE):
        raise ValueError(f"c_kv {c_kv.shape} and k_rope {k_rope.shape} are not [n, {D_C}] and [n, {D_ROPE}]")
    n = len(c_kv)
    scales = fp8_tile_scales(c_kv)
    rows = np.zeros((n, FP8_ROW_BYTES), dtype=np.uint8)
    for t in range(FP8_SCALES):
        tile = slice(t * FP8_TILE, (t + 1) * FP8_TILE)
        for i in range(n):
            rows[i, tile] = quantize_e4m3(c_kv[i, tile], scales[i, t])
    rows[:, FP8_SCALES_AT:FP8_ROPE_AT] = scales.astype("<f4").view(np.uint8).reshape(n, 4 * FP8_SCALES)
    rows[:, FP8_ROPE_AT:] = k_rope.astype(_sixteen_bit(dtype_name)).view(np.uint8).reshape(n, 2 * D_ROPE)
    return rows


def dequantize_latent_fp8(rows, dtype_name):
    """uint8 [..., 656] -> float64 [..., 576]: e4m3 value x its tile's scale, exactly (float64),
    and the RoPE part as stored. NaN bytes (unwritten slots) give NaN."""
    import ml_dtypes
    rows = np.asarray(rows, dtype=np.uint8)
    lead = rows.shape[:-1]
    flat = rows.reshape(-1, FP8_ROW_BYTES)
    values = flat[:, :D_C].view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    scales = np.ascontiguousarray(flat[:, FP8_SCALES_AT:FP8_ROPE_AT]).view("<f4").astype(np.float64)
    c_kv = values * np.repeat(scales, FP8_TILE, axis=1)
    rope = np.ascontiguousarray(flat[:, FP8_ROPE_AT:]).view(_sixteen_bit(dtype_name)).astype(np.float64)
    return np.concatenate([c_kv, rope], axis=1).reshape(*lead, D_C + D_ROPE)


def reshape_and_cache_latent_fp8(c_kv, k_rope, pool_bytes, slot_mapping, dtype_name):
    """The quantizing writer: token i's row (quantize_latent_fp8) to slot slot_mapping[i] of
    pool_bytes (uint8 [num_blocks, block_size, 656]); slots < 0 are padding, skipped."""
    num_blocks, block_size, width = pool_bytes.shape
    if width != FP8_ROW_BYTES:
        raise ValueError(f"an fp8 latent row is {FP8_ROW_BYTES} bytes, the pool's are {width}")
    rows = quantize_latent_fp8(c_kv, k_rope, dtype_name)
    flat = pool_bytes.reshape(num_blocks * block_size, width)
    for i, slot in enumerate(np.asarray(slot_mapping, dtype=np.int64)):
        if slot < 0:
            continue
        if slot >= num_blocks * block_size:
            raise ValueError(f"slot_mapping[{i}] = {slot} is outside the pool of {num_blocks} x {block_size}")
        flat[slot] = rows[i]
    return pool_bytes
