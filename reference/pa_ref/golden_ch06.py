"""Chapter 6's golden cases: an fp8 (e4m3) KV cache.

quant_<dtype>_bs<BS>_... cases test the cache write, reshape_and_cache with
quantization:
  k, v          float32 [T, Hkv, D]   values exact in dtype (NaN and +-inf included)
  slot_mapping  int64   [T]           -1 = padding
  k_scale       float32 0-d
  v_scale       float32 0-d
  k_pool        uint8   [num_blocks, Hkv, D // 16, BS, 16]   expected
  v_pool        uint8   [num_blocks, Hkv, D, BS]             expected
The expected pools start as all 0xFF, the byte the C++ test fills them with
first: a negative NaN, which the quantizer never produces (a NaN input gives
0x7F), so a byte the kernel fails to write, or writes to the wrong place, shows.

decode_fp8_<dtype>_d<D>_bs<BS>_g<group>_<tag> cases test decode attention
over an fp8 cache (chapter 4's cases with fp8 pools):
  q             float32 [B, Hq, D]     N(0,1) rounded to dtype (the activations)
  k_pool        uint8   [num_blocks, Hkv, D // 16, BS, 16]
  v_pool        uint8   [num_blocks, Hkv, D, BS]
  k_scale       float32 0-d
  v_scale       float32 0-d
  block_table   int32   [B, M]         randomly permuted physical ids, -1 padding
  unowned_block int32   0-d            a block of 0x7F (NaN) bytes that no sequence owns
  context_lens  int32   [B]
  scale         float64 0-d            1 / sqrt(D)
  expected      float64 [B, Hq, D]     attention over the dequantized cache
  expected_unquantized float64 [B, Hq, D]  attention over the values before quantization
The pools hold N(0,1) values (rounded to dtype) quantized with the scales;
0x7F (NaN) fills the unused slots of each last block and every unowned block.
`expected` is compared with the dtype's tolerance (atol, rtol), like chapter 4.
`expected_unquantized` shows what fp8 costs: an honest kernel stays within
fp8_atol + fp8_rtol * |expected_unquantized| of it (see FP8_ATOL and FP8_RTOL).
"""

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from .dtypes import round_to
from .fp8 import (
    E4M3_MAX,
    FP8_X,
    paged_decode_attention_fp8,
    quantize_e4m3,
    reshape_and_cache_fp8,
)
from .golden_ch04 import PagedDecodeCase, random_paged_cache
from .golden_io import TOLERANCES, case_seed, write_case
from .paged_attention import PARTITION_SIZE, paged_decode_attention

# The byte the C++ test fills a pool with before the kernel runs (a negative NaN).
UNWRITTEN = 0xFF

# Bound on |out - expected_unquantized| <= FP8_ATOL + FP8_RTOL * |expected_unquantized|.
#
# e4m3 keeps 3 mantissa bits: rounding a normal value changes it by at most half
# an ulp, 2^-4 of its size; a subnormal one (|x / scale| < 2^-6) by at most
# 2^-10 * scale. On N(0,1) data the rms error is ~0.027 whatever the scale.
# The output is sum_i p_i v_i with softmax weights p_i.
# - V's error enters as sum_i p_i dv_i. With one token the output IS one value
#   of v, whose relative error reaches 2^-4: hence FP8_RTOL. With many tokens the
#   dv_i (independent, mean 0) average out.
# - K's error moves each score by scale * q . dk, ~N(0, 0.027^2) (scale = 1/sqrt(D)
#   cancels the sqrt(D) of the dot product); |ds| reaches ~0.1 among a few
#   thousand tokens. exp(ds) ~ 1 + ds reweights the values, so the output moves
#   by up to ~max|ds_i - ds_j| * sum_i p_i |v_i - out|: ~0.1 when a few tokens
#   dominate (short contexts), much less over long ones: hence FP8_ATOL = 2^-3.
# Measured on the cases below: the exact fp8 reference (`expected`) uses at most
# 0.44 of this bound (short contexts, 15-17 tokens, are the worst; 1025 tokens use
# 0.08), and so does a kernel with fp32 arithmetic rounded to the dtype; a kernel
# that forgets both scales exceeds it 4.7 to 1000 times. tests/test_fp8.py keeps
# the 2x margin. Correctness is checked against `expected`, with the dtype's
# tolerance; this bound only shows the price of fp8.
FP8_ATOL, FP8_RTOL = 0.125, 2.0**-4


# ---------------------------------------------------------------- quantized writes


@dataclass(frozen=True)
class QuantCase:
    name: str
    dtype: str
    block_size: int
    head_size: int
    num_kv_heads: int
    num_blocks: int
    num_tokens: int
    num_padding: int
    k_scale: float
    v_scale: float
    edges: str  # "values": special values; "division": values whose f32 quotient is a tie
    note: str


CH06_QUANT = [
    QuantCase("quant_fp16_bs16_d128_h2_edges", "fp16", 16, 128, 2, 8, 12, 2, 0.0625, 0.03125,
              "values", "0, -0, subnormals, ties to even, +-448 * scale, saturation, NaN and +-inf"),
    QuantCase("quant_fp16_bs8_d64_h1_division", "fp16", 8, 64, 1, 6, 10, 2, 0.45, 0.9,
              "division", "scales that are not powers of two; fp16 values whose float32 quotient "
              "is exactly an e4m3 tie, so rounding the exact quotient or multiplying by 1 / scale differs"),
    QuantCase("quant_bf16_bs32_d64_h4_range", "bf16", 32, 64, 4, 4, 20, 3, 2.0, 0.25,
              "values", "bf16 values spread from e4m3 subnormals to saturation, plus the special values"),
    QuantCase("quant_fp32_bs16_d80_h2_division", "fp32", 16, 80, 2, 6, 10, 2, 0.3, 0.1,
              "division", "fp32 values whose float32 quotient lands exactly on an e4m3 tie (the exact "
              "quotient does not); head size 80"),
]

# Special values, as multiples of the scale (exact in fp16 for a power-of-two scale):
_EDGE_MULTIPLES = [
    0.0, -0.0,
    2.0**-9, -(2.0**-9), 2.0**-8, 7 * 2.0**-9,  # subnormals: k * 2^-9, k = 1..7
    2.0**-10, 3 * 2.0**-10, 5 * 2.0**-10,  # subnormal ties: -> 0, 2, 2 (even)
    15 * 2.0**-10, 2.0**-6,  # the tie between the largest subnormal and 2^-6; 2^-6
    1.0625, 1.1875, -1.0625, 1.0625 + 2.0**-10,  # ties -> 1, 1.25, -1; past the tie -> 1.125
    17.0, 19.0, 248.0,  # ties -> 16, 20, 256
    E4M3_MAX, -E4M3_MAX, 464.0, 480.0, 1000.0, -1000.0,  # 448 and saturation
]
# ... and values taken as they are.
_EDGE_ABSOLUTE = [61440.0, -61440.0, np.inf, -np.inf, np.nan, float(np.copysign(np.nan, -1.0))]


def edge_values(scale, dtype):
    """The special values for `scale`, exact in dtype (only those that survive rounding)."""
    values = np.concatenate([np.array(_EDGE_MULTIPLES) * np.float64(np.float32(scale)),
                             _EDGE_ABSOLUTE])
    with np.errstate(over="ignore"):
        exact = (round_to(values, dtype) == values) | ~np.isfinite(values)
    return values[exact]


def division_values(scale, dtype, rng, count=32):
    """Values of dtype whose float32 quotient by scale is exactly halfway between two
    e4m3 values while the exact quotient is not. Those where float32 division then
    round-to-nearest-even disagrees with rounding the exact quotient, or with
    multiplying by 1 / scale, come first: only the spec's rule gets them all right."""
    table = np.arange(0x7F, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    ties = (table[:-1] + table[1:]) / 2
    s32 = np.float32(scale)
    if dtype == "fp32":  # float32 values next to tie * scale
        near = (ties * np.float64(s32)).astype(np.float32)
        candidates = np.concatenate([near, np.nextafter(near, np.float32(np.inf)),
                                     np.nextafter(near, np.float32(0))])
    else:  # every positive finite value of the 16-bit format
        fmt = np.float16 if dtype == "fp16" else ml_dtypes.bfloat16
        candidates = np.arange(1, 0x7C00 if dtype == "fp16" else 0x7F80, dtype=np.uint16)
        candidates = candidates.view(fmt).astype(np.float32)
    with np.errstate(over="ignore"):
        quotient = candidates / s32
    exact = candidates.astype(np.float64) / np.float64(s32)  # never a tie when quotient is
    keep = np.isin(quotient.astype(np.float64), ties) & (exact != quotient) & (quotient < E4M3_MAX)
    candidates, exact = candidates[keep], exact[keep]
    right = quantize_e4m3(candidates, s32)
    rounded_exact = np.abs(exact[:, None] - table[None, :]).argmin(axis=1)
    by_reciprocal = quantize_e4m3(candidates * (np.float32(1) / s32), 1.0)
    telling = (rounded_exact != right) | (by_reciprocal != right)
    order = np.concatenate([rng.permutation(np.flatnonzero(telling)),
                            rng.permutation(np.flatnonzero(~telling))])
    chosen = np.sort(candidates[order[:count]]).astype(np.float64)
    assert telling.sum() >= 8, (scale, dtype)
    return chosen * np.where(np.arange(chosen.size) % 2 == 0, 1.0, -1.0)


def random_values(rng, shape, scale, dtype):
    """N(0,1) times 2^U(-12, 10) times scale: from e4m3 subnormals to saturation."""
    magnitude = 2.0 ** rng.uniform(-12, 10, size=shape)
    return round_to(rng.standard_normal(shape) * magnitude * np.float64(np.float32(scale)), dtype)


def quant_arrays(case):
    rng = np.random.default_rng(case_seed(case.name))
    t, hkv, d, bs = case.num_tokens, case.num_kv_heads, case.head_size, case.block_size
    k = random_values(rng, (t, hkv, d), case.k_scale, case.dtype)
    v = random_values(rng, (t, hkv, d), case.v_scale, case.dtype)
    # Tokens 0 and 1 go to a block's first and last offsets; the others anywhere else.
    edge_slots = [0, 2 * bs - 1]
    others = np.setdiff1d(np.arange(case.num_blocks * bs), edge_slots)
    slot_mapping = np.concatenate([edge_slots, rng.choice(others, size=t - 2, replace=False)])
    pad = rng.choice(np.arange(2, t), size=case.num_padding, replace=False)
    slot_mapping[pad] = -1
    # Token 0 (never padding) starts with the special values, in K and V.
    for data, scale in ((k, case.k_scale), (v, case.v_scale)):
        special = (edge_values(scale, case.dtype) if case.edges == "values"
                   else division_values(scale, case.dtype, rng))
        assert special.size <= hkv * d
        data[0].reshape(-1)[:special.size] = special
    k_pool = np.full((case.num_blocks, hkv, d // FP8_X, bs, FP8_X), UNWRITTEN, dtype=np.uint8)
    v_pool = np.full((case.num_blocks, hkv, d, bs), UNWRITTEN, dtype=np.uint8)
    k_scale, v_scale = np.float32(case.k_scale), np.float32(case.v_scale)
    reshape_and_cache_fp8(k, v, k_pool, v_pool, slot_mapping, k_scale, v_scale)
    return {
        "k": k.astype(np.float32),
        "v": v.astype(np.float32),
        "slot_mapping": slot_mapping,
        "k_scale": np.array(k_scale),
        "v_scale": np.array(v_scale),
        "k_pool": k_pool,
        "v_pool": v_pool,
    }


def quant_params(case):
    return {
        "kind": "reshape_and_cache_fp8",
        "dtype": case.dtype,
        "kv_dtype": "fp8_e4m3",
        "num_tokens": case.num_tokens,
        "num_blocks": case.num_blocks,
        "block_size": case.block_size,
        "num_kv_heads": case.num_kv_heads,
        "head_size": case.head_size,
        "x": FP8_X,
        "unwritten_byte": UNWRITTEN,
        "seed": case_seed(case.name),
        "note": case.note,
    }


# ---------------------------------------------------------------- decode


@dataclass(frozen=True)
class Fp8DecodeCase(PagedDecodeCase):
    k_scale: float = 0.0625
    v_scale: float = 0.03125


D = Fp8DecodeCase

# Chapter 4's kind of cases, fewer and smaller: the emulator converts every byte.
CH06_DECODE = [
    D("decode_fp8_fp16_d128_bs16_g1_len1", "fp16", 128, 16, 2, 2, (1,),
      "a single key: the output is that key's dequantized value row"),
    D("decode_fp8_fp16_d128_bs16_g2_edges15_16_17", "fp16", 128, 16, 4, 2, (15, 16, 17),
      "block_size - 1, block_size, block_size + 1; scales that are not powers of two",
      spare_width=0, k_scale=1.7, v_scale=0.45),
    D("decode_fp8_fp16_d64_bs16_g4_part511_512_513", "fp16", 64, 16, 8, 2, (511, 512, 513),
      "around the first v2 partition edge", k_scale=0.02, v_scale=0.05),
    D("decode_fp8_fp16_d64_bs16_g8_part1025", "fp16", 64, 16, 16, 2, (0, 1025),
      "empty, and two partitions plus one token; eight query heads per KV head"),
    D("decode_fp8_fp16_d128_bs16_g2_mixed", "fp16", 128, 16, 4, 2, (0, 1, 100),
      "empty, single and longer sequences; K and V scales swapped relative to the default",
      k_scale=0.03125, v_scale=0.0625),
    D("decode_fp8_fp16_d256_bs16_g2_mqa", "fp16", 256, 16, 2, 1, (33, 16),
      "head size 256 (16 chunks of 16 bytes); one KV head", k_scale=0.45, v_scale=1.7),
    D("decode_fp8_fp16_d80_bs16_g2_odd", "fp16", 80, 16, 4, 2, (37, 65),
      "head size 80: five 16-byte chunks of K", k_scale=0.1, v_scale=0.3),
    D("decode_fp8_fp16_d64_bs16_g1_kv4", "fp16", 64, 16, 4, 4, (30, 49),
      "four KV heads, plain multi-head: a wrong head stride reads another head"),
    D("decode_fp8_fp16_d64_bs8_g1_edges7_8_9", "fp16", 64, 8, 2, 2, (7, 8, 9),
      "8-token blocks around a block edge", k_scale=1.7, v_scale=0.45),
    D("decode_fp8_fp16_d128_bs8_g4_mqa_part513", "fp16", 128, 8, 4, 1, (513,),
      "8-token blocks over a partition edge, four query heads on one KV head", spare_width=0),
    D("decode_fp8_fp16_d64_bs32_g2_edges31_32_33", "fp16", 64, 32, 4, 2, (31, 32, 33),
      "32-token blocks around a block edge", k_scale=0.05, v_scale=0.02),
    D("decode_fp8_bf16_d128_bs16_g2_mixed", "bf16", 128, 16, 4, 2, (1, 17, 100),
      "bf16 activations", k_scale=1.7, v_scale=0.45),
    D("decode_fp8_bf16_d64_bs32_g4_part512", "bf16", 64, 32, 8, 2, (33, 512),
      "bf16 with 32-token blocks; exactly one partition"),
    D("decode_fp8_fp32_d128_bs16_g2_mixed", "fp32", 128, 16, 4, 2, (17, 64, 0),
      "fp32 activations: the tight tolerance checks the dequantization itself",
      k_scale=0.3, v_scale=0.1),
]


def fp8_decode_arrays(case):
    """Draw a case's values into permuted pools, quantize them, compute both expectations."""
    rng = np.random.default_rng(case_seed(case.name))
    bs, hkv, d = case.block_size, case.num_kv_heads, case.head_size
    batch = len(case.context_lens)
    context_lens = np.array(case.context_lens, dtype=np.int32)

    # The unquantized cache: NaN everywhere but in the owned slots ...
    block_table, unowned_block, k_values, v_values = random_paged_cache(
        rng, case.num_blocks, case.max_blocks_per_seq, case.blocks_needed, context_lens,
        hkv, d, bs, FP8_X, case.dtype)
    # ... quantized: NaN becomes 0x7F, the poison a kernel must never read.
    k_scale, v_scale = np.float32(case.k_scale), np.float32(case.v_scale)
    k_pool, v_pool = quantize_e4m3(k_values, k_scale), quantize_e4m3(v_values, v_scale)

    q = round_to(case.q_std * rng.standard_normal((batch, case.num_heads, d)), case.dtype)
    scale = 1.0 / np.sqrt(d)
    args = (block_table, context_lens, scale, bs)
    expected = paged_decode_attention_fp8(q, k_pool, v_pool, *args, k_scale, v_scale)
    expected_unquantized = paged_decode_attention(q, k_values, v_values, *args)
    return {
        "q": q.astype(np.float32),
        "k_pool": k_pool,
        "v_pool": v_pool,
        "k_scale": np.array(k_scale),
        "v_scale": np.array(v_scale),
        "block_table": block_table,
        "unowned_block": unowned_block,
        "context_lens": context_lens,
        "scale": np.array(scale, dtype=np.float64),
        "expected": expected,
        "expected_unquantized": expected_unquantized,
    }


def fp8_decode_params(case):
    atol, rtol = TOLERANCES[case.dtype]
    return {
        "kind": "paged_decode_fp8",
        "dtype": case.dtype,
        "kv_dtype": "fp8_e4m3",
        "batch": len(case.context_lens),
        "num_blocks": case.num_blocks,
        "block_size": case.block_size,
        "num_kv_heads": case.num_kv_heads,
        "num_heads": case.num_heads,
        "head_size": case.head_size,
        "x": FP8_X,
        "max_blocks_per_seq": case.max_blocks_per_seq,
        "context_lens": ",".join(str(n) for n in case.context_lens),
        "partition_size": PARTITION_SIZE,
        "atol": atol,
        "rtol": rtol,
        "fp8_atol": FP8_ATOL,
        "fp8_rtol": FP8_RTOL,
        "seed": case_seed(case.name),
        "note": case.note,
    }


def chapter_06(out_dir):
    """Chapter 6: the fp8 cache write, and decode attention over an fp8 cache."""
    for case in CH06_QUANT:
        write_case(out_dir / case.name, quant_arrays(case), quant_params(case))
    for case in CH06_DECODE:
        write_case(out_dir / case.name, fp8_decode_arrays(case), fp8_decode_params(case))
