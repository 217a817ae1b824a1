"""Chapter 8's golden cases: prefill attention over paged KV (varlen, causal).

(The sampling_ and beams_ cases come from golden_ch08_sampling.py; the cascade decode
cases, cascade_*/, are golden_ch08_cascade.py's. indexer_*/ are the DSA indexer pool's
layout and writer, see indexer_arrays below.)

prefill_<dtype>_d<D>_bs<BS>_g<group>_<tag>/ holds
  q               float32 [T, Hq, D]      the new tokens' queries, rounded to dtype
  k_pool          float32 [num_blocks, Hkv, D // x, BS, x]
  v_pool          float32 [num_blocks, Hkv, D, BS]
  block_table     int32   [B, M]           permuted physical ids, -1 padding
  unowned_block   int32   0-d              an all-NaN block no sequence owns
  context_lens    int32   [B]              cached prefix + new tokens
  query_start_loc int32   [B + 1]          new tokens of sequence b: rows qsl[b]..qsl[b+1]-1
  scale           float64 0-d
  expected        float64 [T, Hq, D]       paged_prefill_attention of the above

The pools already hold the new tokens' K and V (the serving loop runs
reshape_and_cache first). NaN fills every slot past a sequence's end and every
unowned block, as in chapter 4's cases.
"""

from dataclasses import dataclass

import numpy as np

from . import dsa
from .dtypes import round_to
from .golden_ch04 import random_paged_cache
from .golden_ch08_cascade import cascade_cases
from .golden_ch08_sampling import chapter_08_sampling
from .golden_io import TOLERANCES, case_seed, write_case
from .paged import blocks_for, pack_x
from .prefill import paged_prefill_attention


@dataclass(frozen=True)
class PrefillCase:
    name: str
    dtype: str
    head_size: int
    block_size: int
    num_heads: int
    num_kv_heads: int
    prefix_lens: tuple  # tokens already cached per sequence
    new_lens: tuple     # new tokens per sequence (the chunk)
    note: str

    @property
    def context_lens(self):
        return tuple(p + n for p, n in zip(self.prefix_lens, self.new_lens))

    @property
    def blocks_needed(self):
        return [blocks_for(n, self.block_size) for n in self.context_lens]

    @property
    def max_blocks_per_seq(self):
        return max(1, max(self.blocks_needed) + 1)

    @property
    def num_blocks(self):
        needed = sum(self.blocks_needed)
        return needed + min(max(needed, 6), 16)


P = PrefillCase

# Small for the CPU emulator: one thread block per (query head, new token).
CH08_PREFILL = [
    P("prefill_fp32_d64_bs16_g2_fresh", "fp32", 64, 16, 4, 2, (0, 0), (1, 20),
      "no cached prefix: a one-token prompt and a prompt crossing a block edge"),
    P("prefill_fp16_d64_bs16_g2_prefix_edge", "fp16", 64, 16, 4, 2, (16, 32, 15), (5, 16, 2),
      "cached prefix at exact block boundaries (16, 32) and one token short of one"),
    P("prefill_fp16_d128_bs16_g4_chunk_cross", "fp16", 128, 16, 8, 2, (10, 3), (30, 13),
      "a chunk that starts mid-block and crosses two block edges"),
    P("prefill_fp16_d64_bs8_g1_mixed", "fp16", 64, 8, 2, 2, (7, 9, 0), (1, 0, 8),
      "8-token blocks: a decode-like single token, a sequence with no new tokens between "
      "two others (it owns no rows: a search must skip it), and a full block"),
    P("prefill_bf16_d64_bs32_g4_mqa", "bf16", 64, 32, 4, 1, (31, 33), (2, 31),
      "bf16, 32-token blocks, multi-query, prefixes around a block edge"),
    P("prefill_fp16_d80_bs16_g2_odd", "fp16", 80, 16, 4, 2, (17,), (23,),
      "head size 80"),
    P("prefill_fp32_d128_bs32_g8_long", "fp32", 128, 32, 8, 1, (64,), (40,),
      "eight query heads per KV head, fp32's tight tolerance"),
    P("prefill_fp16_d96_bs16_g2_small", "fp16", 96, 16, 4, 2, (5, 0), (7, 3),
      "head size 96"),
    P("prefill_fp16_d112_bs32_g1_small", "fp16", 112, 32, 2, 2, (30,), (4,),
      "head size 112, a chunk crossing a 32-token block edge"),
    P("prefill_bf16_d256_bs8_g4_small", "bf16", 256, 8, 4, 1, (9, 16), (4, 1),
      "head size 256 with 8-token blocks, multi-query"),
]


def prefill_arrays(case):
    rng = np.random.default_rng(case_seed(case.name))
    bs, hkv, d, x = case.block_size, case.num_kv_heads, case.head_size, pack_x(case.dtype)
    context_lens = np.array(case.context_lens, dtype=np.int32)
    query_start_loc = np.concatenate([[0], np.cumsum(case.new_lens)]).astype(np.int32)

    block_table, unowned_block, k_pool, v_pool = random_paged_cache(
        rng, case.num_blocks, case.max_blocks_per_seq, case.blocks_needed, context_lens,
        hkv, d, bs, x, case.dtype)

    q = round_to(rng.standard_normal((int(query_start_loc[-1]), case.num_heads, d)), case.dtype)
    scale = 1.0 / np.sqrt(d)
    expected = paged_prefill_attention(q, k_pool, v_pool, block_table, context_lens,
                                       query_start_loc, scale)
    return {
        "q": q.astype(np.float32),
        "k_pool": k_pool.astype(np.float32),
        "v_pool": v_pool.astype(np.float32),
        "block_table": block_table,
        "unowned_block": unowned_block,
        "context_lens": context_lens,
        "query_start_loc": query_start_loc,
        "scale": np.array(scale, dtype=np.float64),
        "expected": expected,
    }


def prefill_params(case):
    atol, rtol = TOLERANCES[case.dtype]
    return {
        "kind": "paged_prefill",
        "dtype": case.dtype,
        "batch": len(case.new_lens),
        "prefix_lens": ",".join(str(n) for n in case.prefix_lens),
        "new_lens": ",".join(str(n) for n in case.new_lens),
        "atol": atol,
        "rtol": rtol,
        "seed": case_seed(case.name),
        "note": case.note,
    }


# ---- The indexer pool (DSA): chapter 14's second cache, carried by chapter 8's PagedKV ------

# (name, block_size, num_blocks, tokens): each case writes `tokens` keys to a permutation of
# the pool's slots, with padding (-1) between them.
CH08_INDEXER = [
    ("indexer_bs8", 8, 5, 23),
    ("indexer_bs16", 16, 3, 40),
]


def indexer_arrays(name, block_size, num_blocks, tokens):
    """keys float32 [n, 128]: N(0,1) rows, plus an all-zero row (scale 1), a row with one
    outlier (its small values land on e4m3 subnormals), and a row of -0.0 and negatives.
    slot_mapping int64 [n + 3]: the tokens' slots, a permutation of the pool's, and three -1s.
    pool uint8 [num_blocks, block_size * 132]: dsa.reshape_and_cache_indexer over a 0xFF pool.
    key_offsets, scale_offsets int64 [num_blocks * block_size]: the layout's byte offsets of
    every (block, offset), block-major."""
    rng = np.random.default_rng(case_seed(name))
    keys = rng.standard_normal((tokens, dsa.INDEX_HEAD_DIM)).astype(np.float32)
    keys[1] = 0.0
    keys[2] = rng.standard_normal(dsa.INDEX_HEAD_DIM).astype(np.float32) * 1e-3
    keys[2, 7] = 300.0
    keys[3] = -np.abs(keys[3])
    keys[3, ::5] = -0.0
    slots = rng.permutation(num_blocks * block_size)[:tokens].astype(np.int64)
    padded = np.insert(slots, [0, tokens // 2, tokens], -1)
    padded_keys = np.insert(keys, [0, tokens // 2, tokens], np.float32(7.0), axis=0)  # skipped rows
    pool = dsa.reshape_and_cache_indexer(padded_keys, dsa.new_indexer_pool(num_blocks, block_size), padded)
    blocks, offsets = np.divmod(np.arange(num_blocks * block_size), block_size)
    return {
        "keys": padded_keys,
        "slot_mapping": padded,
        "pool": pool,
        "key_offsets": np.array([dsa.indexer_key_offset(b, o, block_size) for b, o in zip(blocks, offsets)],
                                dtype=np.int64),
        "scale_offsets": np.array([dsa.indexer_scale_offset(b, o, block_size) for b, o in zip(blocks, offsets)],
                                  dtype=np.int64),
    }


def chapter_08(out_dir):
    """Chapter 8: prefill attention over paged KV, cascade decode attention, sampling and
    beam selection, and the indexer pool's layout and writer (DSA)."""
    for case in CH08_PREFILL:
        write_case(out_dir / case.name, prefill_arrays(case), prefill_params(case))
    cascade_cases(out_dir)
    chapter_08_sampling(out_dir)
    for name, block_size, num_blocks, tokens in CH08_INDEXER:
        write_case(out_dir / name, indexer_arrays(name, block_size, num_blocks, tokens),
                   {"block_size": block_size, "num_blocks": num_blocks, "seed": case_seed(name)})
