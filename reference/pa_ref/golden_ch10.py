"""Chapter 10's golden cases: varlen paged attention over a ragged batch.

One launch serves decodes (one new token), speculative-decoding verifications (a
few new tokens) and chunked-prefill pieces (many new tokens over a cached
prefix) of many sequences together. The spec is chapter 8's prefill reference,
paged_prefill_attention: new token i of sequence b (n_b new tokens) sits at
position seq_lens[b] - n_b + i and attends causally to positions 0 .. that one.

varlen_<dtype>_d<D>_bs<BS>_g<group>_<tag>/ (the cache in the queries' dtype) holds
  q               float32 [T, Hq, D]      N(0,1) (N(0, q_std^2)) rounded to dtype
  k_pool          float32 [num_blocks, Hkv, D // x, BS, x]
  v_pool          float32 [num_blocks, Hkv, D, BS]
  block_table     int32   [B, M]          permuted physical ids, -1 padding
  unowned_block   int32   0-d             an all-NaN block no sequence owns
  seq_lens        int32   [B]             cached prefix + new tokens
  query_start_loc int32   [B + 1]         new tokens of sequence b: rows qsl[b]..qsl[b+1]-1
  scale           float64 0-d             1 / sqrt(D)
  expected        float64 [T, Hq, D]      paged_prefill_attention of the above

varlen_fp8_<dtype>_d<D>_bs<BS>_g<group>_<tag>/ (chapter 6's e4m3 cache) holds the
same, with
  k_pool          uint8   [num_blocks, Hkv, D // 16, BS, 16]
  v_pool          uint8   [num_blocks, Hkv, D, BS]
  k_scale         float32 0-d
  v_scale         float32 0-d
  expected        float64 [T, Hq, D]      attention over the DEQUANTIZED pools
  expected_unquantized float64 [T, Hq, D] attention over the values before quantization
(the fp8_atol / fp8_rtol bound between the two is chapter 6's, FP8_ATOL and FP8_RTOL).

NaN fills every slot past a sequence's end and every block no sequence owns
(0x7F, e4m3's NaN, in the fp8 pools), as in chapters 4, 6 and 8. A case with
`twins` stores one sequence twice: the copy's table points at the original's
physical blocks for their common full-block prefix (prefix caching) and at its
own blocks, holding the same values, after that; its queries are the same too,
so the two sequences' output rows must be equal.
"""

from dataclasses import dataclass

import numpy as np

from .dtypes import round_to
from .fp8 import FP8_X, dequantize_pools, quantize_e4m3
from .golden_ch04 import random_paged_cache
from .golden_ch06 import FP8_ATOL, FP8_RTOL
from .golden_ch10_plan import write_plan_cases
from .golden_io import TOLERANCES, case_seed, write_case
from .paged import blocks_for, pack_x
from .prefill import paged_prefill_attention

# The kernel's query tile: 64 rows, row i * G + h for new token i and query head h of
# a KV head's group of G (the cases are sized in these tiles; see VarlenCase.work).
TILE_ROWS = 64


@dataclass(frozen=True)
class VarlenCase:
    """One ragged batch: per sequence, the tokens already cached and the new ones."""

    name: str
    dtype: str
    head_size: int
    block_size: int
    num_heads: int
    num_kv_heads: int
    prefix_lens: tuple  # tokens cached before this step, per sequence
    new_lens: tuple     # n_b: the new tokens (rows of q) per sequence
    note: str
    fp8: bool = False
    k_scale: float = 1.0  # fp8 only
    v_scale: float = 1.0
    q_std: float = 1.0
    spare_width: int = 1  # block_table columns beyond the longest sequence's need
    twins: tuple = ()  # (original, copy) sequence pairs: the copy shares the prefix blocks

    @property
    def group(self):
        return self.num_heads // self.num_kv_heads

    @property
    def seq_lens(self):
        return tuple(p + n for p, n in zip(self.prefix_lens, self.new_lens))

    @property
    def blocks_needed(self):
        return [blocks_for(n, self.block_size) for n in self.seq_lens]

    @property
    def max_blocks_per_seq(self):
        return max(1, max(self.blocks_needed) + self.spare_width)

    @property
    def num_blocks(self):
        needed = sum(self.blocks_needed)
        return needed + min(max(needed, 6), 16)

    @property
    def kind(self):
        """decode, spec_decode, prefill or mixed, by the batch's new-token counts."""
        counts = {n for n in self.new_lens if n > 0}
        if counts == {1}:
            return "decode"
        if max(counts) <= 8:
            return "spec_decode" if min(counts) > 1 else "mixed"
        return "prefill" if min(counts) > 8 else "mixed"

    @property
    def work(self):
        """Sum over (sequence, KV head, 64-row tile) of the KV tokens the tile reads:
        what the emulator spends its time on."""
        total = 0
        for prefix, n in zip(self.prefix_lens, self.new_lens):
            rows = n * self.group
            for row0 in range(0, rows, TILE_ROWS):
                last_token = (min(row0 + TILE_ROWS, rows) - 1) // self.group
                total += prefix + last_token + 1
        return total * self.num_kv_heads


V = VarlenCase

# Small for the CPU emulator (each case runs about ten times per test binary).
CH10_VARLEN = [
    # --- pure decode batches: every n_b = 1
    V("varlen_fp16_d128_bs16_g4_decode_edges", "fp16", 128, 16, 8, 2,
      (0, 14, 15, 16, 32, 99), (1, 1, 1, 1, 1, 1),
      "decodes at lengths 1, 15, 16, 17, 33, 100: a block edge and the 32-token KV tile edge"),
    V("varlen_bf16_d64_bs8_g2_decode_edges", "bf16", 64, 8, 4, 2,
      (6, 7, 8, 0, 96), (1, 1, 1, 1, 1),
      "bf16 decodes, 8-token blocks: lengths 7, 8, 9, 1 and 97", spare_width=0),
    V("varlen_fp16_d64_bs32_g1_decode_edges", "fp16", 64, 32, 4, 4,
      (30, 31, 32, 0, 99), (1, 1, 1, 1, 1),
      "plain multi-head decodes (one row per token and head), 32-token blocks: 31, 32, 33, 1, 100"),
    # --- speculative-decoding verification: n_b = 2..8
    V("varlen_fp16_d128_bs16_g4_spec", "fp16", 128, 16, 8, 2,
      (14, 30, 1, 47, 60), (2, 3, 4, 5, 8),
      "spec-decode verification, 2 to 8 draft tokens each: the later ones must not see "
      "each other's futures (causal inside a sequence's new tokens)"),
    V("varlen_bf16_d96_bs16_g8_spec", "bf16", 96, 16, 16, 2,
      (100, 15, 32), (8, 2, 5),
      "eight query heads per KV head: 8 draft tokens fill exactly one 64-row tile"),
    # --- chunked prefill: n_b 20..150 over cached prefixes 0..300
    V("varlen_fp16_d128_bs16_g2_chunked", "fp16", 128, 16, 4, 2,
      (0, 37, 300), (20, 150, 45),
      "chunked prefill: a fresh 20-token prompt, a 150-token chunk starting mid-block after "
      "37 cached tokens (five row tiles), and a 45-token chunk over a 300-token prefix"),
    V("varlen_bf16_d64_bs32_g1_chunked", "bf16", 64, 32, 2, 2,
      (31, 64, 5), (33, 100, 64),
      "bf16 chunked prefill with 32-token blocks: chunks that start one before, at and just "
      "after a block edge, each crossing several"),
    V("varlen_fp16_d80_bs8_g2_chunked", "fp16", 80, 8, 4, 2,
      (13, 0), (27, 70),
      "head size 80, 8-token blocks: a chunk starting mid-block, and a 70-token prompt"),
    V("varlen_fp16_d128_bs16_g4_tiles160", "fp16", 128, 16, 8, 2,
      (50,), (40,),
      "40 new tokens x 4 query heads = 160 rows: three 64-row tiles, the last one half full; "
      "each tile sees a different length of the cache"),
    V("varlen_fp16_d64_bs16_g3_tile_straddle", "fp16", 64, 16, 6, 2,
      (10, 3), (30, 1),
      "three query heads per KV head: 64 rows hold 21 tokens and a third, so a tile edge "
      "falls between the heads of one token"),
    # --- multi-query: Hkv = 1, 8, 16 or 32 rows per token
    V("varlen_fp16_d128_bs16_g16_mqa", "fp16", 128, 16, 16, 1,
      (40, 20, 0, 9), (1, 4, 1, 7),
      "multi-query, 16 query heads on one KV head: 16 rows per token, 7 tokens = 112 rows"),
    V("varlen_fp16_d64_bs16_g32_mqa_decode", "fp16", 64, 16, 32, 1,
      (0, 16, 40, 99), (1, 1, 1, 1),
      "multi-query decodes, 32 query heads on one KV head: each is one 32-row tile, whose two "
      "16-row groups have two warps each, taking turns at the KV"),
    V("varlen_bf16_d128_bs8_g8_mqa", "bf16", 128, 8, 8, 1,
      (70,), (30,),
      "bf16 multi-query prefill chunk: 240 rows, four tiles, 8-token blocks"),
    # --- mixed batches
    V("varlen_fp16_d64_bs16_g2_mixed", "fp16", 64, 16, 4, 2,
      (7, 40, 25, 17, 16, 0, 10, 0), (0, 1, 0, 30, 3, 1, 0, 0),
      "decodes, a spec-decode, a prefill chunk, and sequences with no new tokens first, "
      "between and last (one of them empty, seq_len 0): they own no rows"),
    V("varlen_fp16_d112_bs32_g2_mixed", "fp16", 112, 32, 4, 2,
      (64, 0, 33, 5), (1, 36, 0, 4),
      "head size 112: a decode at a block edge, a fresh 36-token prompt, an idle sequence "
      "and a spec-decode", spare_width=2),
    V("varlen_bf16_d256_bs16_g4_mixed", "bf16", 256, 16, 8, 2,
      (20, 0, 3), (1, 17, 6),
      "head size 256: a decode, a fresh 17-token prompt and a spec-decode"),
    V("varlen_bf16_d80_bs32_g2_mixed", "bf16", 80, 32, 4, 2,
      (63, 10, 0), (1, 24, 2),
      "bf16 head size 80, 32-token blocks"),
    V("varlen_fp16_d96_bs8_g1_mixed", "fp16", 96, 8, 4, 4,
      (9, 2, 0), (1, 12, 8),
      "head size 96, four KV heads, plain multi-head"),
    V("varlen_fp16_d128_bs16_g2_large_scores", "fp16", 128, 16, 4, 2,
      (45, 70), (1, 40),
      "q ~ N(0, 8^2): scores of +-30 that change the running maximum from one KV tile to "
      "the next, so a missing rescale of the running sum shows", q_std=8.0),
    V("varlen_fp16_d64_bs16_g2_shared_prefix", "fp16", 64, 16, 4, 2,
      (35, 21, 35), (3, 1, 3),
      "prefix caching: sequence 2 is sequence 0 again; its table points at sequence 0's "
      "two full prefix blocks, and its own last block holds the same values. Equal queries "
      "must give equal rows", twins=((0, 2),)),
    # --- fp8 e4m3 cache (block sizes 16 and 32), scales that are not 1
    V("varlen_fp8_fp16_d128_bs16_g4_decode", "fp16", 128, 16, 8, 2,
      (0, 14, 15, 16, 99), (1, 1, 1, 1, 1),
      "e4m3 cache: decodes at lengths 1, 15, 16, 17, 100", fp8=True, k_scale=1.7, v_scale=0.45),
    V("varlen_fp8_bf16_d64_bs32_g2_mixed", "bf16", 64, 32, 4, 2,
      (31, 9, 20, 60), (1, 0, 40, 4),
      "e4m3 cache, bf16 queries: a decode at a block edge, an idle sequence, a 40-token chunk "
      "and a spec-decode", fp8=True, k_scale=0.0625, v_scale=0.03125),
    V("varlen_fp8_fp16_d80_bs16_g8_mqa_spec", "fp16", 80, 16, 8, 1,
      (17, 40), (3, 5),
      "e4m3 cache, multi-query spec-decode, head size 80 (five 16-byte chunks of K)",
      fp8=True, k_scale=0.3, v_scale=0.1),
    V("varlen_fp8_fp16_d256_bs32_g2_prefill", "fp16", 256, 32, 4, 2,
      (33,), (30,),
      "e4m3 cache, head size 256, a chunk starting one token past a 32-token block edge",
      fp8=True, k_scale=0.05, v_scale=0.02),
]


def share_twin_blocks(case, block_table, k_pool, v_pool):
    """Make each twin copy share its original's full prefix blocks and hold the same
    values after them; the copy's own blocks that are no longer used become NaN."""
    bs = case.block_size
    for src, dst in case.twins:
        assert case.prefix_lens[src] == case.prefix_lens[dst]
        assert case.new_lens[src] == case.new_lens[dst]
        shared = case.prefix_lens[src] // bs  # full blocks of the cached prefix
        count = case.blocks_needed[src]
        freed = block_table[dst, :shared].copy()
        block_table[dst, :shared] = block_table[src, :shared]
        k_pool[freed] = np.nan
        v_pool[freed] = np.nan
        for j in range(shared, count):  # the same values, in the copy's own blocks
            k_pool[block_table[dst, j]] = k_pool[block_table[src, j]]
            v_pool[block_table[dst, j]] = v_pool[block_table[src, j]]


# Cases that also store the output over each sequence's first keys only (expected_first_keys):
# a plan whose one item per tile stops there -- inside a stage, no split -- must give it.
# 40 tokens: inside a 16-token half of a stage; 48 on an e4m3 cache (its V pieces are 16 tokens).
FIRST_KEYS_CASES = ("varlen_fp16_d128_bs16_g4_decode_edges", "varlen_fp16_d128_bs16_g4_spec",
                    "varlen_bf16_d96_bs16_g8_spec", "varlen_fp16_d80_bs8_g2_chunked",
                    "varlen_fp16_d128_bs16_g16_mqa", "varlen_fp16_d64_bs16_g32_mqa_decode",
                    "varlen_fp8_bf16_d64_bs32_g2_mixed", "varlen_fp8_fp16_d256_bs32_g2_prefill")


def first_keys(case):
    return 48 if case.fp8 else 40


def varlen_arrays(case):
    """Draw a case's inputs into permuted, NaN-poisoned pools; compute `expected`."""
    rng = np.random.default_rng(case_seed(case.name))
    bs, hkv, d = case.block_size, case.num_kv_heads, case.head_size
    x = FP8_X if case.fp8 else pack_x(case.dtype)
    seq_lens = np.array(case.seq_lens, dtype=np.int32)
    query_start_loc = np.concatenate([[0], np.cumsum(case.new_lens)]).astype(np.int32)

    block_table, unowned_block, k_values, v_values = random_paged_cache(
        rng, case.num_blocks, case.max_blocks_per_seq, case.blocks_needed, seq_lens,
        hkv, d, bs, x, case.dtype)
    share_twin_blocks(case, block_table, k_values, v_values)

    q = round_to(case.q_std * rng.standard_normal((int(query_start_loc[-1]), case.num_heads, d)),
                 case.dtype)
    for src, dst in case.twins:
        q[query_start_loc[dst]:query_start_loc[dst + 1]] = q[query_start_loc[src]:query_start_loc[src + 1]]
    scale = 1.0 / np.sqrt(d)

    arrays = {"q": q.astype(np.float32)}
    if case.fp8:
        # Quantized: NaN becomes 0x7F, the poison a kernel must never read.
        k_scale, v_scale = np.float32(case.k_scale), np.float32(case.v_scale)
        k_pool, v_pool = quantize_e4m3(k_values, k_scale), quantize_e4m3(v_values, v_scale)
        k_read, v_read = dequantize_pools(k_pool, v_pool, k_scale, v_scale)
        arrays.update(k_pool=k_pool, v_pool=v_pool, k_scale=np.array(k_scale),
                      v_scale=np.array(v_scale))
    else:
        k_read, v_read = k_values, v_values
        arrays.update(k_pool=k_values.astype(np.float32), v_pool=v_values.astype(np.float32))
    arrays.update(
        block_table=block_table,
        unowned_block=unowned_block,
        seq_lens=seq_lens,
        query_start_loc=query_start_loc,
        scale=np.array(scale, dtype=np.float64),
        expected=paged_prefill_attention(q, k_read, v_read, block_table, seq_lens,
                                         query_start_loc, scale),
    )
    if case.fp8:
        arrays["expected_unquantized"] = paged_prefill_attention(
            q, k_values, v_values, block_table, seq_lens, query_start_loc, scale)
    if case.name in FIRST_KEYS_CASES:
        arrays["expected_first_keys"] = paged_prefill_attention(
            q, k_read, v_read, block_table, seq_lens, query_start_loc, scale, kv_limit=first_keys(case))
    return arrays


def varlen_params(case):
    atol, rtol = TOLERANCES[case.dtype]
    params = {
        "kind": "varlen_attention",
        "batch_kind": case.kind,
        "dtype": case.dtype,
        "kv_dtype": "fp8_e4m3" if case.fp8 else case.dtype,
        "fp8": int(case.fp8),
        "batch": len(case.new_lens),
        "num_tokens": sum(case.new_lens),
        "num_heads": case.num_heads,
        "num_kv_heads": case.num_kv_heads,
        "head_size": case.head_size,
        "block_size": case.block_size,
        "num_blocks": case.num_blocks,
        "max_blocks_per_seq": case.max_blocks_per_seq,
        "x": FP8_X if case.fp8 else pack_x(case.dtype),
        "prefix_lens": ",".join(str(n) for n in case.prefix_lens),
        "new_lens": ",".join(str(n) for n in case.new_lens),
        "seq_lens": ",".join(str(n) for n in case.seq_lens),
        "twins": ";".join(f"{a},{b}" for a, b in case.twins) or "none",
        "atol": atol,
        "rtol": rtol,
        "seed": case_seed(case.name),
        "note": case.note,
    }
    if case.fp8:
        params.update(fp8_atol=FP8_ATOL, fp8_rtol=FP8_RTOL)
    if case.name in FIRST_KEYS_CASES:
        params["first_keys"] = first_keys(case)
    return params


def chapter_10(out_dir):
    """Chapter 10: varlen paged attention (decode, spec-decode and prefill rows together)."""
    for case in CH10_VARLEN:
        write_case(out_dir / case.name, varlen_arrays(case), varlen_params(case))
    write_plan_cases(out_dir)  # plan_*: the planner's exact plans (golden_ch10_plan.py)
