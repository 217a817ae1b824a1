"""Chapter 11's golden cases: the paged latent cache of MLA and its absorbed decode.

mla_<dtype>_h<H>_bs<BS>_<tag>/ (the absorbed decode, mla.paged_mla_decode) holds
  q               float32 [T, H, 576]   absorbed queries, N(0,1) rounded to dtype
  latent_pool     float32 [num_blocks, BS, 576]  rows [c_kv | k_rope]; NaN in every
                                        slot no sequence holds (past its end, unowned blocks)
  block_table     int32   [B, M]        permuted physical ids, -1 padding
  seq_lens        int32   [B]           cached tokens, the new ones included
  query_start_loc int32   [B + 1]       new tokens of sequence b: rows qsl[b] .. qsl[b+1]-1
  scale           float64 0-d           1 / sqrt(192) (DeepSeek-V3's d_nope 128 + d_r 64)
  expected        float64 [T, H, 512]   the latent-space output
  expected_first37 float64 [T, H, 512]  (three cases) the same over each sequence's first 37
                                        keys only: what items that stop at token 37 give
  expected_scores float64 [T, H, 64]    the scores of keys 0 .. 63 (the first 64-key stage of an
                                        unsplit plan), mla.paged_mla_scores: base 2, -inf masked
  expected_scores_first37 float64 [T, H, 64]  the same for items that stop at token 37
case.txt: dtype, heads, block_size, chunk_tokens (0: the planner's own chunks; > 0: forced
splits), grid (thread blocks the test plans for; 0: one wave), note.

writer_<dtype>_bs<BS>/ (the latent writer, mla.reshape_and_cache_latent):
  c_kv [T, 512], k_rope [T, 64] (float32, exact in dtype), slot_mapping int64 [T] (-1: padding;
  slot 0 and the pool's last slot included), expected float32 [num_blocks, BS, 576]: the pool
  after the write, NaN in every element that must stay untouched.

naive_<dtype>/ (absorbed == naive, through the kernel): one sequence at DeepSeek's widths,
  q_abs = mla.absorb_query(q_nope, q_rope, W_UK) rounded to dtype as `q`, the pool as above,
  w_uv float64 [H, 512, d_v], expected_naive float64 [S, H, d_v] = mla.mla_naive(...) of the
  unrounded inputs. The test multiplies the kernel's latent output by W_UV.
"""

from dataclasses import dataclass

import numpy as np

from . import mla
from .dtypes import round_to
from .golden_io import case_seed, write_case
from .paged import blocks_for

SCALE = float(mla.mla_scale(128, mla.D_ROPE))  # 1 / sqrt(192)
WIDTH = mla.D_C + mla.D_ROPE


@dataclass(frozen=True)
class MlaCase:
    name: str
    dtype: str
    heads: int
    block_size: int
    seq_lens: tuple
    new_lens: tuple
    note: str
    chunk_tokens: int = 0
    grid: int = 0

    @property
    def num_blocks(self):
        return sum(blocks_for(n, self.block_size) for n in self.seq_lens) + 3


C = MlaCase

# Small for the CPU emulator: h_q * s_q rows of 576-wide dot products per cached token.
CH11_MLA = [
    C("mla_fp16_h16_bs16_decode_edges", "fp16", 16, 16, (1, 15, 16, 17, 40), (1, 1, 1, 1, 1),
      "decodes at lengths 1, 15, 16, 17 and 40: one token, both sides of a block edge, a stage edge"),
    C("mla_bf16_h16_bs64_mtp", "bf16", 16, 64, (2, 63, 64, 65, 130), (2, 2, 1, 2, 2),
      "bf16, FlashMLA's 64-token blocks, two new tokens (multi-token prediction) at block edges"),
    C("mla_fp16_h64_bs32_s4", "fp16", 64, 32, (4, 31, 33, 100), (4, 3, 4, 4),
      "64 heads (Kimi K2), up to 4 new tokens: 4 x 64 rows, four tiles a sequence"),
    C("mla_bf16_h128_bs64_s1", "bf16", 128, 64, (1, 64, 200), (1, 1, 1),
      "DeepSeek-V3's 128 heads on one GPU: two 64-row tiles per decode"),
    C("mla_fp16_h128_bs16_s2", "fp16", 128, 16, (2, 50), (2, 2),
      "128 heads, two new tokens: tile 2 is token 1's first 64 heads"),
    C("mla_fp16_h128_bs32_s4", "fp16", 128, 32, (5, 70), (4, 4),
      "128 heads, 4 new tokens: 512 rows, eight tiles a sequence"),
    C("mla_bf16_h16_bs64_long", "bf16", 16, 64, (1000, 3), (2, 1),
      "a long sequence beside a short one; the planner splits it across a small grid", grid=8),
    C("mla_fp16_h64_bs16_split", "fp16", 64, 16, (300, 129, 65), (1, 4, 2),
      "forced splits of 64 tokens: chunk ends inside a tile's rows' futures", chunk_tokens=64),
    C("mla_bf16_h128_bs32_split", "bf16", 128, 32, (300,), (2,),
      "128 heads x 2 tokens, five chunks of 64 merged by log-sum-exp", chunk_tokens=64),
    C("mla_fp16_h16_bs32_some_idle", "fp16", 16, 32, (10, 20, 5, 33), (0, 1, 0, 3),
      "sequences with no new token (no rows) beside ones with 1 and 3"),
    C("mla_fp16_h8_bs16_small_group", "fp16", 8, 16, (7, 16, 48), (1, 1, 1),
      "8 heads: chapter 10's 8-row decode tiles"),
    C("mla_bf16_h16_bs32_decode", "bf16", 16, 32, (31, 64, 97), (1, 1, 1),
      "bf16 decodes of 16 heads: one 16-row tile a sequence, at and either side of block edges"),
]


def latent_pool_for(rng, case_seqs, block_size, num_blocks, dtype):
    """A block table and a latent pool: sequence b's rows in permuted blocks, NaN elsewhere.
    Returns (block_table, pool, dense rows per sequence)."""
    needed = [blocks_for(n, block_size) for n in case_seqs]
    width = max(1, max(needed) + 1)
    ids = rng.permutation(num_blocks)
    table = np.full((len(case_seqs), width), -1, dtype=np.int32)
    pool = np.full((num_blocks, block_size, WIDTH), np.nan)
    dense, at = [], 0
    for b, n in enumerate(case_seqs):
        table[b, :needed[b]] = ids[at:at + needed[b]]
        at += needed[b]
        c_kv = round_to(rng.standard_normal((n, mla.D_C)), dtype)
        k_rope = round_to(rng.standard_normal((n, mla.D_ROPE)), dtype)
        slots = [int(table[b, p // block_size]) * block_size + p % block_size for p in range(n)]
        mla.reshape_and_cache_latent(c_kv, k_rope, pool, slots)
        dense.append(np.concatenate([c_kv, k_rope], axis=1))
    return table, pool, dense


# Cases that also store the output over each sequence's first FIRST_KEYS keys only: a plan
# whose items stop there (kv_end inside a 32-row stage, no split) must give it.
FIRST_KEYS = 37
# The keys whose scores the scores test reads (MlaScores): one 64-key stage.
SCORE_KEYS = 64
WITH_FIRST_KEYS = ("mla_fp16_h64_bs16_split", "mla_bf16_h128_bs32_split", "mla_fp16_h16_bs16_decode_edges")


def first_keys_decode(q, pool, table, seq_lens, qsl, scale, kv_end):
    """paged_mla_decode with every row's keys cut at kv_end as well: row i of a sequence
    sees keys 0 .. min(its causal end, kv_end) - 1."""
    out = np.zeros((len(q), q.shape[1], mla.D_C))
    for b, n in enumerate(seq_lens):
        lat = mla.gather_latent(pool, table[b], int(n))
        new = int(qsl[b + 1] - qsl[b])
        if new == 0:
            continue
        for i, end in enumerate(mla.causal_limits(new, int(n))):
            e = min(end, kv_end)
            p = mla.softmax(scale * q[qsl[b] + i] @ lat[:e].T)
            out[qsl[b] + i] = p @ lat[:e, :mla.D_C]
    return out


def write_mla_case(out_dir, case):
    rng = np.random.default_rng(case_seed(case.name))
    table, pool, _ = latent_pool_for(rng, case.seq_lens, case.block_size, case.num_blocks, case.dtype)
    qsl = np.concatenate([[0], np.cumsum(case.new_lens)]).astype(np.int32)
    q = round_to(rng.standard_normal((int(qsl[-1]), case.heads, WIDTH)), case.dtype)
    expected = mla.paged_mla_decode(q, pool, table, case.seq_lens, qsl, SCALE, mla.D_C)
    arrays = {
        "q": q.astype(np.float32), "latent_pool": pool.astype(np.float32), "block_table": table,
        "seq_lens": np.array(case.seq_lens, dtype=np.int32), "query_start_loc": qsl,
        "scale": np.array(SCALE), "expected": expected,
    }
    arrays["expected_scores"] = mla.paged_mla_scores(q, pool, table, case.seq_lens, qsl, SCALE, SCORE_KEYS)
    arrays[f"expected_scores_first{FIRST_KEYS}"] = mla.paged_mla_scores(q, pool, table, case.seq_lens, qsl, SCALE,
                                                                        SCORE_KEYS, FIRST_KEYS)
    if case.name in WITH_FIRST_KEYS:
        arrays[f"expected_first{FIRST_KEYS}"] = first_keys_decode(q, pool, table, case.seq_lens, qsl, SCALE,
                                                                  FIRST_KEYS)
    write_case(out_dir / case.name, arrays, {"dtype": case.dtype, "heads": case.heads, "block_size": case.block_size,
        "chunk_tokens": case.chunk_tokens, "grid": case.grid, "note": case.note})


def write_writer_case(out_dir, dtype, block_size):
    name = f"writer_{dtype}_bs{block_size}"
    rng = np.random.default_rng(case_seed(name))
    num_blocks = 4
    last = num_blocks * block_size - 1
    inner = 1 + rng.permutation(last - 1)[:2 * block_size + 1]  # distinct slots, 0 and last left out
    slots = np.concatenate([[0, last], inner]).astype(np.int64)   # the first and the last slot too
    slots[[5, 9]] = -1                                             # padding tokens
    n = len(slots)
    c_kv = round_to(rng.standard_normal((n, mla.D_C)), dtype)
    k_rope = round_to(rng.standard_normal((n, mla.D_ROPE)), dtype)
    expected = np.full((num_blocks, block_size, WIDTH), np.nan)
    mla.reshape_and_cache_latent(c_kv, k_rope, expected, slots)
    write_case(out_dir / name, {
        "c_kv": c_kv.astype(np.float32), "k_rope": k_rope.astype(np.float32), "slot_mapping": slots,
        "expected": expected.astype(np.float32),
    }, {"dtype": dtype, "block_size": block_size, "num_blocks": num_blocks})


def write_naive_case(out_dir, dtype):
    name = f"naive_{dtype}"
    rng = np.random.default_rng(case_seed(name))
    heads, d_nope, d_v, length, new, block_size = 16, 128, 128, 40, 2, 16
    q_nope = rng.standard_normal((new, heads, d_nope))
    q_rope = rng.standard_normal((new, heads, mla.D_ROPE))
    c_kv = round_to(rng.standard_normal((length, mla.D_C)), dtype)
    k_rope = round_to(rng.standard_normal((length, mla.D_ROPE)), dtype)
    w_uk = rng.standard_normal((heads, mla.D_C, d_nope)) / np.sqrt(d_nope)
    w_uv = rng.standard_normal((heads, mla.D_C, d_v)) / np.sqrt(mla.D_C)
    q = round_to(mla.absorb_query(q_nope, q_rope, w_uk), dtype)
    num_blocks = blocks_for(length, block_size) + 2
    table = np.full((1, blocks_for(length, block_size) + 1), -1, dtype=np.int32)
    table[0, :blocks_for(length, block_size)] = rng.permutation(num_blocks)[:blocks_for(length, block_size)]
    pool = np.full((num_blocks, block_size, WIDTH), np.nan)
    mla.reshape_and_cache_latent(c_kv, k_rope, pool,
                                 [int(table[0, p // block_size]) * block_size + p % block_size for p in range(length)])
    naive = mla.mla_naive(q_nope, q_rope, c_kv, k_rope, w_uk, w_uv)
    write_case(out_dir / name, {
        "q": q.astype(np.float32), "latent_pool": pool.astype(np.float32), "block_table": table,
        "seq_lens": np.array([length], dtype=np.int32), "query_start_loc": np.array([0, new], dtype=np.int32),
        "scale": np.array(float(mla.mla_scale(d_nope, mla.D_ROPE))), "w_uv": w_uv, "expected_naive": naive,
    }, {"dtype": dtype, "heads": heads, "block_size": block_size, "d_v": d_v})


def chapter_11(out_dir):
    for case in CH11_MLA:
        write_mla_case(out_dir, case)
    for dtype in ("fp16", "bf16"):
        for block_size in (16, 32, 64):
            write_writer_case(out_dir, dtype, block_size)
        write_naive_case(out_dir, dtype)
    chapter_11_fp8(out_dir)


# ---- The fp8 latent cache ----------------------------------------------------------------
#
# fp8_mla_<dtype>_h<H>_bs<BS>_<tag>/ (the absorbed decode over an fp8 latent pool):
#   q, block_table, seq_lens, query_start_loc, scale as the mla_ cases;
#   latent_pool    uint8   [num_blocks, BS, 656]  rows written by mla.reshape_and_cache_latent_fp8;
#                                                 0xFF in every slot no sequence holds (e4m3 NaN,
#                                                 NaN scales, NaN RoPE part)
#   expected       float64 [T, H, 512]  paged_mla_decode over the DEQUANTIZED pool
#                                       (mla.dequantize_latent_fp8): the kernel's contract
#   expected_16bit float64 [T, H, 512]  paged_mla_decode over the 16-bit rows before
#                                       quantization: what fp8 costs, within FP8_ATOL, FP8_RTOL
# fp8_writer_<dtype>_bs<BS>/: c_kv, k_rope, slot_mapping as writer_ (c_kv tiles at magnitudes
#   2^-8 .. 2^8, and zero tiles), expected uint8 [num_blocks, BS, 656] (0xFF untouched).
#
# The bound on |out - expected_16bit| <= FP8_ATOL + FP8_RTOL * |expected_16bit|: chapter 6's,
# restated for per-tile scales.
# - Each c_kv value is stored to within 2^-4 of itself (e4m3 keeps 3 mantissa bits: half an
#   ulp is 2^-4 of the value): its tile's scale maps the tile's amax to 448, so nothing
#   saturates, and every value above amax * 2^-6 / 448 (2^-6: e4m3's smallest normal) is a
#   normal number. Below that (N(0,1) tiles: |x| < about 1e-4), the error is at most
#   2^-10 * scale = amax / 458,752: negligible. Per-tile scales make this hold for every
#   tile whatever its magnitude (chapter 6's one scale a pool cannot: a small tile beside a
#   large one falls into the subnormals). The RoPE part (64 of the 576 score columns) is
#   exact.
# - V's error reaches the output as sum_t p_t dv_t: one token and the output is that token's
#   value, within 2^-4 of itself: FP8_RTOL. Many tokens average the errors out.
# - K's error moves a score by scale * q . dk over the 512 latent columns: for N(0,1) q and
#   c_kv, each |dk| about 0.027 (chapter 6's typical error), so ds ~ N(0, (0.027^2 * 512) /
#   192), sd 0.044, up to about 0.15 over a few hundred tokens. An output moves by about
#   max |ds_t - ds_u| * sum_t p_t |v_t - out|, and the scores of MLA are wider than chapter 6's
#   (576 columns at 1 / sqrt(192): sd 1.7), so a few tokens dominate and sum_t p_t |v_t - out|
#   is near 1: about 0.3 at worst, and V's error on top. Hence FP8_ATOL = 3 * 2^-3 = 0.375
#   (chapter 6's is 2^-3: its scores are narrower).
# The margins, measured on the cases below (reference/tests/test_golden_ch11.py holds them):
# the exact answer over the dequantized cache uses at most 0.46 of the bound (the 64-head,
# 4-token case; the others 0.29 to 0.33, largest error 0.20); a kernel that forgets the tile
# scales exceeds it about 1,200 times.
FP8_ATOL, FP8_RTOL = 0.375, 2.0**-4


@dataclass(frozen=True)
class Fp8Case:
    name: str
    dtype: str
    heads: int
    block_size: int
    seq_lens: tuple
    new_lens: tuple
    note: str
    chunk_tokens: int = 0
    grid: int = 0

    @property
    def num_blocks(self):
        return sum(blocks_for(n, self.block_size) for n in self.seq_lens) + 3


F = Fp8Case

CH11_FP8 = [
    F("fp8_mla_fp16_h16_bs16_edges", "fp16", 16, 16, (1, 15, 16, 17, 40, 65), (1, 1, 1, 1, 1, 1),
      "fp8 latent: one token, both sides of a block edge, a 64-row stage edge"),
    F("fp8_mla_bf16_h16_bs64_mtp", "bf16", 16, 64, (2, 63, 64, 65, 130), (2, 2, 1, 2, 2),
      "fp8 latent, bf16 queries and RoPE part, 64-token blocks, two new tokens at block edges"),
    F("fp8_mla_fp16_h64_bs32_s4", "fp16", 64, 32, (4, 31, 33, 100), (4, 3, 4, 4),
      "fp8 latent, 64 heads, up to 4 new tokens"),
    F("fp8_mla_bf16_h128_bs64_s1", "bf16", 128, 64, (1, 64, 200), (1, 1, 1),
      "fp8 latent, 128 heads: two 64-row tiles a decode"),
    F("fp8_mla_fp16_h16_bs32_some_idle", "fp16", 16, 32, (10, 20, 5, 33), (0, 1, 0, 3),
      "fp8 latent, sequences with no new token beside ones with 1 and 3"),
    F("fp8_mla_bf16_h16_bs64_long", "bf16", 16, 64, (1000, 3), (2, 1),
      "fp8 latent, a long sequence beside a short one, split across a small grid", grid=8),
    F("fp8_mla_fp16_h64_bs16_split", "fp16", 64, 16, (300, 129, 65), (1, 4, 2),
      "fp8 latent, forced splits of 64 tokens", chunk_tokens=64),
]


def fp8_latent_pool_for(rng, case_seqs, block_size, num_blocks, dtype):
    """As latent_pool_for, in fp8 bytes: (block_table, pool uint8 [num_blocks, BS, 656],
    16-bit pool float64 [num_blocks, BS, 576] of the same rows before quantization).
    Every 7th token's tile 1 is all zeros (the scale-1 tile)."""
    needed = [blocks_for(n, block_size) for n in case_seqs]
    width = max(1, max(needed) + 1)
    ids = rng.permutation(num_blocks)
    table = np.full((len(case_seqs), width), -1, dtype=np.int32)
    pool = np.full((num_blocks, block_size, mla.FP8_ROW_BYTES), 0xFF, dtype=np.uint8)
    pool16 = np.full((num_blocks, block_size, WIDTH), np.nan)
    at = 0
    for b, n in enumerate(case_seqs):
        table[b, :needed[b]] = ids[at:at + needed[b]]
        at += needed[b]
        c_kv = round_to(rng.standard_normal((n, mla.D_C)), dtype)
        c_kv[::7, mla.FP8_TILE:2 * mla.FP8_TILE] = 0.0
        k_rope = round_to(rng.standard_normal((n, mla.D_ROPE)), dtype)
        slots = [int(table[b, p // block_size]) * block_size + p % block_size for p in range(n)]
        mla.reshape_and_cache_latent_fp8(c_kv, k_rope, pool, slots, dtype)
        mla.reshape_and_cache_latent(c_kv, k_rope, pool16, slots)
    return table, pool, pool16


def write_fp8_case(out_dir, case):
    rng = np.random.default_rng(case_seed(case.name))
    table, pool, pool16 = fp8_latent_pool_for(rng, case.seq_lens, case.block_size, case.num_blocks, case.dtype)
    qsl = np.concatenate([[0], np.cumsum(case.new_lens)]).astype(np.int32)
    q = round_to(rng.standard_normal((int(qsl[-1]), case.heads, WIDTH)), case.dtype)
    deq = mla.dequantize_latent_fp8(pool, case.dtype)
    expected = mla.paged_mla_decode(q, deq, table, case.seq_lens, qsl, SCALE, mla.D_C)
    expected16 = mla.paged_mla_decode(q, pool16, table, case.seq_lens, qsl, SCALE, mla.D_C)
    write_case(out_dir / case.name, {
        "q": q.astype(np.float32), "latent_pool": pool, "block_table": table,
        "seq_lens": np.array(case.seq_lens, dtype=np.int32), "query_start_loc": qsl,
        "scale": np.array(SCALE), "expected": expected, "expected_16bit": expected16,
    }, {"dtype": case.dtype, "heads": case.heads, "block_size": case.block_size,
        "chunk_tokens": case.chunk_tokens, "grid": case.grid, "fp8_atol": FP8_ATOL, "fp8_rtol": FP8_RTOL,
        "note": case.note})


def write_fp8_writer_case(out_dir, dtype, block_size):
    name = f"fp8_writer_{dtype}_bs{block_size}"
    rng = np.random.default_rng(case_seed(name))
    num_blocks = 4
    last = num_blocks * block_size - 1
    inner = 1 + rng.permutation(last - 1)[:2 * block_size + 1]
    slots = np.concatenate([[0, last], inner]).astype(np.int64)
    slots[[5, 9]] = -1
    n = len(slots)
    # Tiles of very different magnitudes (a scale each), and all-zero tiles (scale 1).
    magnitude = 2.0 ** rng.integers(-8, 9, size=(n, mla.FP8_SCALES))
    c_kv = rng.standard_normal((n, mla.D_C)) * np.repeat(magnitude, mla.FP8_TILE, axis=1)
    c_kv[3, :mla.FP8_TILE] = 0.0
    c_kv[::4, 3 * mla.FP8_TILE:] = 0.0
    c_kv = round_to(c_kv, dtype)
    k_rope = round_to(rng.standard_normal((n, mla.D_ROPE)), dtype)
    expected = np.full((num_blocks, block_size, mla.FP8_ROW_BYTES), 0xFF, dtype=np.uint8)
    mla.reshape_and_cache_latent_fp8(c_kv, k_rope, expected, slots, dtype)
    write_case(out_dir / name, {
        "c_kv": c_kv.astype(np.float32), "k_rope": k_rope.astype(np.float32), "slot_mapping": slots,
        "expected": expected,
    }, {"dtype": dtype, "block_size": block_size, "num_blocks": num_blocks})


def chapter_11_fp8(out_dir):
    for case in CH11_FP8:
        write_fp8_case(out_dir, case)
    for dtype in ("fp16", "bf16"):
        for block_size in (16, 64):
            write_fp8_writer_case(out_dir, dtype, block_size)
