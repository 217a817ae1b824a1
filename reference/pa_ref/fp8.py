"""An fp8 (e4m3) KV cache: one byte per element, plus one float scale per pool.

Chapter 6 stores K and V as e4m3 bytes. A token's value x is written as

    byte = e4m3(float32(x) / float32(scale))        (quantize_e4m3)

and read back as e4m3_value(byte) * scale           (dequantize_e4m3).

The quantizer is bit-exact with CUDA's
__nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE, __NV_E4M3):

- the division is done in float32, as the kernel does it, and rounded once to
  float32 before the conversion rounds again (so the result can differ from
  rounding the exact quotient: see tests/test_fp8.py);
- the conversion rounds to nearest, ties to even, subnormals included;
- a finite quotient beyond +-448 (the largest e4m3 value) saturates to +-448,
  and so do +-inf: e4m3fn has no infinity;
- NaN, of either sign, gives 0x7F. (CUDA canonicalizes every NaN input to a
  positive NaN first. The other NaN byte, 0xFF, is never produced, which is why
  the tests can poison pools with it.)

The pools keep chapter 2's layouts with x = 16 one-byte elements per 16-byte
chunk of K:

    k_pool: uint8 [num_blocks, num_kv_heads, head_size // 16, block_size, 16]
    v_pool: uint8 [num_blocks, num_kv_heads, head_size, block_size]

Attention over an fp8 cache is, by definition, attention over the dequantized
cache: the scales are applied when a value is read, nothing else changes.
"""

import ml_dtypes
import numpy as np

from .paged import reshape_and_cache
from .paged_attention import paged_decode_attention, partitioned_decode_attention

# Largest finite e4m3 value: 1.75 * 2^8. There is no infinity in this format.
E4M3_MAX = 448.0
# The byte a NaN input quantizes to (CUDA's canonical e4m3 NaN: S.1111.111 with S = 0).
E4M3_NAN = 0x7F
# Elements per 16-byte chunk of an fp8 K pool.
FP8_X = 16


def _check_scale(scale):
    scale = np.float32(scale)
    if not (np.isfinite(scale) and scale > 0):
        raise ValueError(f"an fp8 scale must be finite and > 0, got {scale}")
    return scale


def quantize_e4m3(x, scale):
    """e4m3 bytes (uint8, x's shape) of float32(x) / float32(scale); see the module doc."""
    scale = _check_scale(scale)
    # x reaches the kernel as a float32 (from fp16, bf16 or fp32 activations), and
    # float32 / float32 in NumPy is IEEE division rounded to float32, as on the GPU.
    with np.errstate(over="ignore", invalid="ignore"):
        quotient = np.asarray(x, dtype=np.float32) / scale
    # np.clip leaves NaN alone and saturates everything else, +-inf included.
    clipped = np.clip(quotient, np.float32(-E4M3_MAX), np.float32(E4M3_MAX))
    # ml_dtypes casts float32 straight to e4m3 with one round-to-nearest-even. (It casts
    # float64 through float32, so the float32 step above is also what it would do.)
    data = clipped.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    # ml_dtypes keeps a NaN's sign (-NaN -> 0xFF); CUDA does not.
    return np.where(np.isnan(quotient), np.uint8(E4M3_NAN), data)


def amax_scales(x, axis=-1):
    """Per-group scales for e4m3: float32(max |x| over `axis`) / 448, divided in float32, and 1
    for a group whose quotient is 0 (all zeros), so that quantize_e4m3 accepts every scale.

    The group's largest magnitude then quantizes to exactly +-448. Chapter 11's latent tiles
    (mla.fp8_tile_scales) and chapter 14's indexer keys and queries (dsa) are scaled this way.
    """
    amax = np.abs(np.asarray(x, dtype=np.float32)).max(axis=axis)
    scale = amax / np.float32(E4M3_MAX)
    return np.where(scale > 0, scale, np.float32(1.0)).astype(np.float32)


def dequantize_e4m3(data, scale):
    """e4m3 bytes read as values, times scale, in float64 (exact). NaN bytes give NaN."""
    data = np.asarray(data, dtype=np.uint8)
    return data.view(ml_dtypes.float8_e4m3fn).astype(np.float64) * np.float64(_check_scale(scale))


def reshape_and_cache_fp8(k, v, k_pool, v_pool, slot_mapping, k_scale, v_scale):
    """Quantize token i's K and V with k_scale, v_scale and write them to slot slot_mapping[i].

    k_pool and v_pool are uint8 pools in the layouts above; slots < 0 are
    padding and are skipped. The pools are modified in place and returned.
    """
    if k_pool.dtype != np.uint8 or v_pool.dtype != np.uint8:
        raise ValueError(f"fp8 pools hold uint8 bytes, got {k_pool.dtype} and {v_pool.dtype}")
    if k_pool.shape[-1] != FP8_X:
        raise ValueError(f"an fp8 K pool packs x = {FP8_X} elements per chunk, got {k_pool.shape[-1]}")
    return reshape_and_cache(quantize_e4m3(k, k_scale), quantize_e4m3(v, v_scale),
                             k_pool, v_pool, slot_mapping)


def dequantize_pools(k_pool, v_pool, k_scale, v_scale):
    """Both fp8 pools as float64 pools of the same shape (what a kernel reads)."""
    return dequantize_e4m3(k_pool, k_scale), dequantize_e4m3(v_pool, v_scale)


def paged_decode_attention_fp8(q, k_pool, v_pool, block_table, context_lens, scale, block_size,
                               k_scale, v_scale):
    """paged_decode_attention over the dequantized pools: [B, Hq, D] float64."""
    k, v = dequantize_pools(k_pool, v_pool, k_scale, v_scale)
    return paged_decode_attention(q, k, v, block_table, context_lens, scale, block_size)


def partitioned_decode_attention_fp8(q, k_pool, v_pool, block_table, context_lens, scale,
                                     block_size, k_scale, v_scale, **kwargs):
    """The v2 split over the dequantized pools; equals paged_decode_attention_fp8."""
    k, v = dequantize_pools(k_pool, v_pool, k_scale, v_scale)
    return partitioned_decode_attention(q, k, v, block_table, context_lens, scale, block_size,
                                        **kwargs)
