"""Chapter 2's golden cases: writing tokens into paged pools, and reading them back.

reshape_* cases: tokens k, v [T, Hkv, D] and their slot_mapping [T] (int64,
  -1 = padding) in; the expected k_pool and v_pool out, starting from all-NaN
  pools, so every position the kernel must not write stays NaN.
gather_* cases: pools holding a few sequences in randomly permuted blocks,
  with NaN in every slot no token owns, plus block_table [B, M] (padding -1)
  and context_lens [B] in; the expected dense k_dense, v_dense
  [B, M * block_size, Hkv, D] out, NaN at positions >= context_len.

Every float array is float32 and holds values already rounded to the case's dtype.
"""

from dataclasses import dataclass

import numpy as np

from .dtypes import round_to
from .golden_io import case_seed, write_case
from .paged import blocks_for, pack_x, paged_gather, reshape_and_cache


@dataclass(frozen=True)
class PoolCase:
    """The pool shape and dtype that every chapter-2 case starts from."""

    name: str
    dtype: str
    block_size: int
    head_size: int
    num_kv_heads: int
    num_blocks: int
    note: str


@dataclass(frozen=True)
class ReshapeCase(PoolCase):
    num_tokens: int = 8
    num_padding: int = 1


@dataclass(frozen=True)
class GatherCase(PoolCase):
    max_blocks_per_seq: int = 2
    context_lens: tuple = ()


# Every case is small: the CPU emulator runs one fiber per CUDA thread.
CH02_RESHAPE = [
    ReshapeCase("reshape_fp16_bs16_d128_h2", "fp16", 16, 128, 2, 16,
                "vLLM's default block size", num_tokens=12, num_padding=2),
    ReshapeCase("reshape_fp16_bs8_d64_h4", "fp16", 8, 64, 4, 32,
                "four KV heads, small blocks", num_tokens=20, num_padding=3),
    ReshapeCase("reshape_fp16_bs16_d80_h2", "fp16", 16, 80, 2, 8,
                "head size 80: ten 16-byte chunks of K", num_tokens=10, num_padding=2),
    ReshapeCase("reshape_fp16_bs16_d64_all_padding", "fp16", 16, 64, 2, 4,
                "every token is padding: both pools must stay all NaN", num_tokens=4, num_padding=4),
    ReshapeCase("reshape_bf16_bs32_d128_h2", "bf16", 32, 128, 2, 8,
                "bf16, large blocks", num_tokens=16, num_padding=2),
    ReshapeCase("reshape_bf16_bs8_d64_h1", "bf16", 8, 64, 1, 64,
                "bf16, one KV head, a 64-block pool", num_tokens=24, num_padding=4),
    ReshapeCase("reshape_fp32_bs16_d64_h2", "fp32", 16, 64, 2, 12,
                "fp32: x = 4 elements per chunk", num_tokens=12, num_padding=2),
    ReshapeCase("reshape_fp32_bs8_d128_h2", "fp32", 8, 128, 2, 16,
                "fp32 with small blocks", num_tokens=8, num_padding=1),
]

CH02_GATHER = [
    GatherCase("gather_fp16_bs8_d64_h2", "fp16", 8, 64, 2, 24,
               "empty, one token, block_size - 1, and a full table",
               max_blocks_per_seq=4, context_lens=(0, 1, 7, 32)),
    GatherCase("gather_fp16_bs16_d128_h2", "fp16", 16, 128, 2, 16,
               "block_size, block_size + 1, a full table, block_size - 1",
               max_blocks_per_seq=3, context_lens=(16, 17, 48, 15)),
    GatherCase("gather_fp16_bs16_d80_h2", "fp16", 16, 80, 2, 8,
               "head size 80", max_blocks_per_seq=2, context_lens=(31, 2)),
    GatherCase("gather_bf16_bs32_d64_h2", "bf16", 32, 64, 2, 12,
               "bf16, large blocks: block_size + 1, a full table, block_size, one token",
               max_blocks_per_seq=2, context_lens=(33, 64, 32, 1)),
    GatherCase("gather_bf16_bs8_d128_h4", "bf16", 8, 128, 4, 20,
               "bf16, four KV heads: block_size + 1, empty, a full table, block_size",
               max_blocks_per_seq=3, context_lens=(9, 0, 24, 8)),
    GatherCase("gather_fp32_bs16_d64_h2", "fp32", 16, 64, 2, 10,
               "fp32 (x = 4): a partial block, a full table, empty",
               max_blocks_per_seq=2, context_lens=(5, 32, 0)),
]


def empty_pools(case):
    """A K and a V pool of the case's shape, every element NaN."""
    x = pack_x(case.dtype)
    k_shape = (case.num_blocks, case.num_kv_heads, case.head_size // x, case.block_size, x)
    v_shape = (case.num_blocks, case.num_kv_heads, case.head_size, case.block_size)
    return np.full(k_shape, np.nan), np.full(v_shape, np.nan)


def random_tokens(rng, case, shape):
    """N(0,1) values rounded to the case's dtype."""
    return round_to(rng.standard_normal(shape), case.dtype)


def pool_params(case, kind):
    """The case.txt lines that every chapter-2 case has."""
    return {
        "kind": kind,
        "dtype": case.dtype,
        "num_blocks": case.num_blocks,
        "block_size": case.block_size,
        "num_kv_heads": case.num_kv_heads,
        "head_size": case.head_size,
        "x": pack_x(case.dtype),
        "seed": case_seed(case.name),
    }


# ---------------------------------------------------------------- reshape_and_cache


def reshape_slot_mapping(rng, case):
    """Distinct random slots for the real tokens, -1 for the padding ones.

    The last block's offsets 0 and block_size - 1 are always used: they catch a
    wrong block stride, an off-by-one offset and a pool sized one block short.
    """
    bs, total = case.block_size, case.num_blocks * case.block_size
    num_real = case.num_tokens - case.num_padding
    edges = np.array([total - 1, total - bs][:num_real], dtype=np.int64)
    others = np.setdiff1d(np.arange(total), edges)
    real = np.concatenate([edges, rng.choice(others, num_real - len(edges), replace=False)])
    slot_mapping = np.full(case.num_tokens, -1, dtype=np.int64)
    # Real tokens at random positions, in random order; padding fills the rest.
    positions = rng.choice(case.num_tokens, num_real, replace=False)
    slot_mapping[positions] = rng.permutation(real)
    return slot_mapping


def reshape_arrays(case):
    rng = np.random.default_rng(case_seed(case.name))
    shape = (case.num_tokens, case.num_kv_heads, case.head_size)
    k, v = random_tokens(rng, case, shape), random_tokens(rng, case, shape)
    slot_mapping = reshape_slot_mapping(rng, case)
    k_pool, v_pool = reshape_and_cache(k, v, *empty_pools(case), slot_mapping)
    return {
        "k": k.astype(np.float32),
        "v": v.astype(np.float32),
        "slot_mapping": slot_mapping,
        "k_pool": k_pool.astype(np.float32),
        "v_pool": v_pool.astype(np.float32),
    }


def reshape_params(case):
    params = pool_params(case, "reshape_and_cache")
    params.update(num_tokens=case.num_tokens, num_padding=case.num_padding, note=case.note)
    return params


# ---------------------------------------------------------------- gather


def permuted_block_table(rng, case):
    """Give each sequence the blocks it needs from a random permutation; pad with -1."""
    batch, width = len(case.context_lens), case.max_blocks_per_seq
    needed = [blocks_for(n, case.block_size) for n in case.context_lens]
    assert max(needed) <= width and sum(needed) <= case.num_blocks, case.name
    ids = iter(rng.permutation(case.num_blocks))
    block_table = np.full((batch, width), -1, dtype=np.int32)
    for b, count in enumerate(needed):
        block_table[b, :count] = [next(ids) for _ in range(count)]
    return block_table


def sequence_slots(block_table, context_lens, block_size):
    """The slot of every token of every sequence, sequence after sequence."""
    slots = []
    for row, n in zip(block_table, context_lens):
        slots += [int(row[t // block_size]) * block_size + t % block_size for t in range(n)]
    return np.array(slots, dtype=np.int64)


def gather_arrays(case):
    rng = np.random.default_rng(case_seed(case.name))
    block_table = permuted_block_table(rng, case)
    context_lens = np.array(case.context_lens, dtype=np.int32)
    max_seq_len = case.max_blocks_per_seq * case.block_size
    # Write every sequence's tokens into NaN pools: unowned slots stay NaN.
    num_tokens = int(context_lens.sum())
    shape = (num_tokens, case.num_kv_heads, case.head_size)
    k, v = random_tokens(rng, case, shape), random_tokens(rng, case, shape)
    slots = sequence_slots(block_table, context_lens, case.block_size)
    k_pool, v_pool = reshape_and_cache(k, v, *empty_pools(case), slots)
    k_dense, v_dense = paged_gather(k_pool, v_pool, block_table, context_lens, max_seq_len)
    return {
        "k_pool": k_pool.astype(np.float32),
        "v_pool": v_pool.astype(np.float32),
        "block_table": block_table,
        "context_lens": context_lens,
        "k_dense": k_dense.astype(np.float32),
        "v_dense": v_dense.astype(np.float32),
    }


def gather_params(case):
    params = pool_params(case, "gather_kv")
    params.update(
        batch=len(case.context_lens),
        max_blocks_per_seq=case.max_blocks_per_seq,
        max_seq_len=case.max_blocks_per_seq * case.block_size,
        context_lens=",".join(str(n) for n in case.context_lens),
        note=case.note,
    )
    return params


def chapter_02(out_dir):
    """Chapter 2: reshape_and_cache into paged pools, and the paged-to-dense gather."""
    for case in CH02_RESHAPE:
        write_case(out_dir / case.name, reshape_arrays(case), reshape_params(case))
    for case in CH02_GATHER:
        write_case(out_dir / case.name, gather_arrays(case), gather_params(case))
