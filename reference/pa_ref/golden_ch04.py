"""Chapters 4 and 5's golden cases: decode attention read from paged pools.

One set of cases serves both chapters: chapter 4's v1 kernel and chapter 5's
v2 kernel (partitions of 512 tokens, then a reduce) must both produce
`expected`. The cases live in ch04/; chapter 5's tests read them from there.

decode_<dtype>_d<D>_bs<BS>_g<group>_<tag>/ holds
  q             float32 [B, Hq, D]      N(0,1) (N(0, q_std^2)) rounded to dtype
  k_pool        float32 [num_blocks, Hkv, D // x, BS, x]
  v_pool        float32 [num_blocks, Hkv, D, BS]
  block_table   int32   [B, M]           randomly permuted physical ids, -1 padding
  unowned_block int32   0-d              an all-NaN block that no sequence owns
  context_lens  int32   [B]
  scale         float64 0-d              1 / sqrt(D)
  expected      float64 [B, Hq, D]       paged_decode_attention of the above

Every slot a sequence owns holds a value rounded to dtype. NaN fills the
unused slots of each sequence's last block and every block no sequence owns,
so a kernel that reads past a sequence's end, or follows a padding entry (the
C++ test can replace -1 by unowned_block), gets NaN in its output.
"""

from dataclasses import dataclass

import numpy as np

from .dtypes import round_to
from .golden_io import TOLERANCES, case_seed, write_case
from .paged import blocks_for, pack_x
from .paged_attention import PARTITION_SIZE, paged_decode_attention



@dataclass(frozen=True)
class PagedDecodeCase:
    """One paged decode case. num_heads // num_kv_heads is the GQA group."""

    name: str
    dtype: str
    head_size: int
    block_size: int
    num_heads: int
    num_kv_heads: int
    context_lens: tuple
    note: str
    spare_width: int = 1  # block_table columns beyond the longest sequence's need
    q_std: float = 1.0  # large q -> large scores: tests the softmax max-subtraction

    @property
    def group(self):
        return self.num_heads // self.num_kv_heads

    @property
    def blocks_needed(self):
        return [blocks_for(n, self.block_size) for n in self.context_lens]

    @property
    def max_blocks_per_seq(self):
        return max(1, max(self.blocks_needed) + self.spare_width)

    @property
    def num_blocks(self):
        """Far more blocks than needed, so physical ids are scattered and some are unowned."""
        needed = sum(self.blocks_needed)
        return needed + min(max(needed, 6), 16)


C = PagedDecodeCase

# Small enough for the CPU emulator: B <= 3, Hq <= 16, lengths past 512 only
# where a partition edge (v2 splits at multiples of 512) is the point.
CH04_DECODE = [
    # --- fp16, block size 16 (vLLM's default), head size 128
    C("decode_fp16_d128_bs16_g1_len1", "fp16", 128, 16, 2, 2, (1,),
      "a single key: the output is that key's value row"),
    C("decode_fp16_d128_bs16_g2_edges15_16_17", "fp16", 128, 16, 4, 2, (15, 16, 17),
      "block_size - 1, block_size, block_size + 1", spare_width=0),
    C("decode_fp16_d64_bs16_g4_part511_512_513", "fp16", 64, 16, 8, 2, (511, 512, 513),
      "around the first partition edge: 513 is the first length with two v2 partitions"),
    C("decode_fp16_d64_bs16_g8_part1024_1025", "fp16", 64, 16, 16, 2, (1024, 1025),
      "two full partitions, and two plus one token; eight query heads per KV head"),
    C("decode_fp16_d128_bs16_g2_mixed", "fp16", 128, 16, 4, 2, (0, 1, 100),
      "empty, single and odd sequences in one batch"),
    C("decode_fp16_d128_bs16_g8_mqa", "fp16", 128, 16, 8, 1, (100, 17),
      "multi-query attention: all eight query heads share one KV head"),
    C("decode_fp16_d128_bs16_g4_mqa", "fp16", 128, 16, 4, 1, (33,),
      "multi-query attention with four query heads", spare_width=0),
    C("decode_fp16_d128_bs16_g2_large_scores", "fp16", 128, 16, 2, 1, (64, 37, 530),
      "q ~ N(0, 64^2): scores up to ~+-250 overflow exp() in fp32 unless the max is "
      "subtracted; one sequence spans two v2 partitions whose maxima differ widely",
      q_std=64.0),
    C("decode_fp16_d128_bs16_g2_all_empty", "fp16", 128, 16, 4, 2, (0, 0),
      "every sequence empty: the whole output is zeros and no block is read"),
    C("decode_fp16_d64_bs16_g1_kv8", "fp16", 64, 16, 8, 8, (30, 49),
      "eight KV heads, plain multi-head: a wrong head stride reads another head"),
    C("decode_fp16_d128_bs16_g2_kv4", "fp16", 128, 16, 8, 4, (47, 2),
      "four KV heads, two query heads each"),
    C("decode_fp16_d64_bs16_g8_mqa_long1100", "fp16", 64, 16, 8, 1, (1100,),
      "one sequence over two partition edges, with a 76-token last partition; multi-query",
      spare_width=0),
    # --- fp16, other head sizes (block size 16)
    C("decode_fp16_d64_bs16_g2_mixed", "fp16", 64, 16, 4, 2, (511, 1, 16),
      "head size 64: one token short of a partition, one token, one block"),
    C("decode_fp16_d80_bs16_g2_odd", "fp16", 80, 16, 4, 2, (37, 65),
      "head size 80, not a power of two"),
    C("decode_fp16_d96_bs16_g4_mixed", "fp16", 96, 16, 8, 2, (47, 96, 1),
      "head size 96"),
    C("decode_fp16_d112_bs16_g1_odd", "fp16", 112, 16, 2, 2, (113, 15),
      "head size 112"),
    C("decode_fp16_d256_bs16_g2_part513", "fp16", 256, 16, 2, 1, (513, 16),
      "head size 256 over a partition edge; one KV head, two query heads"),
    # --- fp16, block size 8
    C("decode_fp16_d64_bs8_g1_edges7_8_9", "fp16", 64, 8, 2, 2, (7, 8, 9),
      "block_size - 1, block_size, block_size + 1 with 8-token blocks"),
    C("decode_fp16_d128_bs8_g4_part512_513", "fp16", 128, 8, 4, 1, (0, 512, 513),
      "8-token blocks: a partition is 64 blocks; empty, one and just over one partition"),
    C("decode_fp16_d256_bs8_g2_mixed", "fp16", 256, 8, 4, 2, (9, 40),
      "head size 256 with 8-token blocks", spare_width=0),
    C("decode_fp16_d80_bs8_g8_mqa", "fp16", 80, 8, 8, 1, (23, 1),
      "head size 80, multi-query, 8-token blocks"),
    # --- fp16, block size 32
    C("decode_fp16_d64_bs32_g2_edges31_32_33", "fp16", 64, 32, 4, 2, (31, 32, 33),
      "block_size - 1, block_size, block_size + 1 with 32-token blocks"),
    C("decode_fp16_d64_bs32_g4_part1025", "fp16", 64, 32, 8, 2, (1025, 1),
      "32-token blocks: a partition is 16 blocks; two partitions and one token over"),
    C("decode_fp16_d112_bs32_g2_mixed", "fp16", 112, 32, 4, 2, (65, 0),
      "head size 112 with 32-token blocks", spare_width=2),
    C("decode_fp16_d96_bs32_g1_odd", "fp16", 96, 32, 4, 4, (70, 31),
      "head size 96 with 32-token blocks, four KV heads", spare_width=0),
    # --- bf16
    C("decode_bf16_d128_bs16_g2_mixed", "bf16", 128, 16, 4, 2, (1, 17, 100),
      "bf16: one token, block_size + 1, and a longer sequence"),
    C("decode_bf16_d64_bs8_g4_mixed", "bf16", 64, 8, 8, 2, (0, 9, 63),
      "bf16 with 8-token blocks"),
    C("decode_bf16_d64_bs32_g1_part513", "bf16", 64, 32, 2, 2, (33, 513),
      "bf16 with 32-token blocks over a partition edge"),
    C("decode_bf16_d256_bs16_g8_mixed", "bf16", 256, 16, 16, 2, (31, 100),
      "bf16, head size 256, eight query heads per KV head"),
    C("decode_bf16_d96_bs16_g4_mqa", "bf16", 96, 16, 4, 1, (50, 1),
      "bf16 multi-query, head size 96", spare_width=0),
    C("decode_bf16_d80_bs16_g2_odd", "bf16", 80, 16, 4, 2, (16, 47),
      "bf16, head size 80"),
    # --- fp32 (x = 4 elements per 16-byte chunk of K)
    C("decode_fp32_d128_bs16_g2_part513", "fp32", 128, 16, 2, 1, (513, 17, 0),
      "fp32 storage: the tight tolerance checks the arithmetic itself, v2's merge included"),
    C("decode_fp32_d64_bs32_g4_edges31_32_33", "fp32", 64, 32, 8, 2, (31, 32, 33),
      "fp32 with 32-token blocks around a block edge", spare_width=0),
]


def random_paged_cache(rng, num_blocks, max_blocks_per_seq, blocks_needed, context_lens,
                       hkv, d, bs, x, dtype):
    """A block table and pools for a batch, drawn from rng (chapters 4, 6 and 8 share it).

    Sequence b takes the next blocks_needed[b] ids of a random permutation; -1 pads every
    row, and one of the ids left over is returned as the unowned block. The pools (chapter
    2's layouts, x elements per K chunk) are NaN everywhere but in the owned slots below
    each sequence's context length, which hold N(0,1) values rounded to dtype.
    Returns (block_table, unowned_block, k_pool, v_pool).
    """
    ids = rng.permutation(num_blocks)
    block_table = np.full((len(blocks_needed), max_blocks_per_seq), -1, dtype=np.int32)
    owned = []
    for b, count in enumerate(blocks_needed):
        block_table[b, :count] = ids[len(owned):len(owned) + count]
        owned += block_table[b, :count].tolist()
    unowned_block = np.array(rng.choice(ids[len(owned):]), dtype=np.int32)

    # NaN everywhere, then values rounded to dtype in every owned block ...
    k_pool = np.full((num_blocks, hkv, d // x, bs, x), np.nan)
    v_pool = np.full((num_blocks, hkv, d, bs), np.nan)
    k_pool[owned] = round_to(rng.standard_normal((len(owned),) + k_pool.shape[1:]), dtype)
    v_pool[owned] = round_to(rng.standard_normal((len(owned),) + v_pool.shape[1:]), dtype)
    # ... and NaN again in the slots past each sequence's end in its last block.
    for b, n in enumerate(context_lens):
        used = n % bs
        if used:
            last = block_table[b, n // bs]
            k_pool[last, :, :, used:, :] = np.nan
            v_pool[last, :, :, used:] = np.nan
    return block_table, unowned_block, k_pool, v_pool


def paged_decode_arrays(case):
    """Draw a case's inputs into permuted, NaN-poisoned pools; compute `expected`."""
    rng = np.random.default_rng(case_seed(case.name))
    bs, hkv, d, x = case.block_size, case.num_kv_heads, case.head_size, pack_x(case.dtype)
    batch = len(case.context_lens)
    context_lens = np.array(case.context_lens, dtype=np.int32)

    block_table, unowned_block, k_pool, v_pool = random_paged_cache(
        rng, case.num_blocks, case.max_blocks_per_seq, case.blocks_needed, context_lens,
        hkv, d, bs, x, case.dtype)

    q = round_to(case.q_std * rng.standard_normal((batch, case.num_heads, d)), case.dtype)
    scale = 1.0 / np.sqrt(d)
    expected = paged_decode_attention(q, k_pool, v_pool, block_table, context_lens, scale, bs)
    return {
        "q": q.astype(np.float32),
        "k_pool": k_pool.astype(np.float32),
        "v_pool": v_pool.astype(np.float32),
        "block_table": block_table,
        "unowned_block": unowned_block,
        "context_lens": context_lens,
        "scale": np.array(scale, dtype=np.float64),
        "expected": expected,
    }


def paged_decode_params(case):
    atol, rtol = TOLERANCES[case.dtype]
    return {
        "kind": "paged_decode",
        "dtype": case.dtype,
        "batch": len(case.context_lens),
        "num_blocks": case.num_blocks,
        "block_size": case.block_size,
        "num_kv_heads": case.num_kv_heads,
        "num_heads": case.num_heads,
        "head_size": case.head_size,
        "x": pack_x(case.dtype),
        "max_blocks_per_seq": case.max_blocks_per_seq,
        "context_lens": ",".join(str(n) for n in case.context_lens),
        "partition_size": PARTITION_SIZE,
        "atol": atol,
        "rtol": rtol,
        "seed": case_seed(case.name),
        "note": case.note,
    }


def chapter_04(out_dir):
    """Chapters 4 and 5: paged decode attention (v1 and v2 share these cases)."""
    for case in CH04_DECODE:
        write_case(out_dir / case.name, paged_decode_arrays(case), paged_decode_params(case))
