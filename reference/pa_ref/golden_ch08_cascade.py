"""Chapter 8's cascade golden cases: decode where groups of sequences share leading blocks.

cascade_<dtype>_d<D>_bs<BS>_g<group>_<tag>/ holds chapter 4's decode arrays
  q, k_pool, v_pool, block_table (-1 padding), unowned_block, context_lens, scale,
  expected        float64 [B, Hq, D]   paged_decode_attention: sharing changes nothing
and what the planner must find (plan_cascade with min_shared_blocks 1):
  group_of        int32 [B]            the sequence's group, -1 for none
  prefix_lens     int32 [B]            tokens its group's prefix covers, 0 for none

A case is a list of groups. Group members' tables start with the same shared_blocks
physical blocks; with shared_partial, the next block is shared too but is not full for
every member (it cannot be part of the prefix). The members of all groups are shuffled
into the batch, so a group's members are rarely neighbours. NaN fills every slot that no
sequence reads (past the longest use of each block) and every unowned block.
"""

from dataclasses import dataclass

import numpy as np

from .cascade import plan_cascade
from .dtypes import round_to
from .golden_io import TOLERANCES, case_seed, write_case
from .paged import blocks_for, pack_x
from .paged_attention import paged_decode_attention


@dataclass(frozen=True)
class SharedGroup:
    shared_blocks: int          # full blocks every member's table starts with
    suffix_lens: tuple          # each member's tokens after those blocks
    shared_partial: bool = False  # the next block is shared too, partly used


@dataclass(frozen=True)
class CascadeCase:
    name: str
    dtype: str
    head_size: int
    block_size: int
    num_heads: int
    num_kv_heads: int
    groups: tuple
    note: str
    q_std: float = 1.0

    @property
    def group(self):
        return self.num_heads // self.num_kv_heads


S, C = SharedGroup, CascadeCase

# Small for the CPU emulator. Suffix lengths 0, 1, BS - 1, BS, BS + 1 in each block size.
CH08_CASCADE = [
    C("cascade_fp16_d128_bs16_g4_three_groups", "fp16", 128, 16, 8, 2,
      (S(3, (0, 1, 15, 16, 17)), S(1, (5, 3), True), S(0, (20,))),
      "5 sequences share 3 blocks, 2 share 1 block and a partial one, and a loner"),
    C("cascade_fp32_d64_bs8_g1_three_groups", "fp32", 64, 8, 2, 2,
      (S(3, (0, 1, 7, 8, 9)), S(1, (6, 2), True), S(0, (9,))),
      "8-token blocks, plain multi-head, fp32's tight tolerance"),
    C("cascade_fp16_d64_bs32_g8_mqa", "fp16", 64, 32, 8, 1,
      (S(3, (0, 1, 31, 32, 33)), S(1, (40, 3), True), S(0, (0,))),
      "32-token blocks, multi-query; the shared partial block is full for one member only; "
      "an empty loner"),
    C("cascade_fp32_d128_bs32_g2_chunks", "fp32", 128, 32, 4, 2,
      (S(3, (0, 1, 31, 32, 33)), S(0, (70,))),
      "fp32 D 128 takes 32-token prefix chunks: 3 chunks whose maxima differ widely "
      "(q ~ N(0, 8^2))", q_std=8.0),
    C("cascade_fp16_d64_bs16_g2_long", "fp16", 64, 16, 4, 2,
      (S(20, (0, 530, 17)), S(0, (600,))),
      "a 320-token prefix in 3 chunks; a 530-token suffix and a loner over two partitions"),
    C("cascade_bf16_d128_bs16_g4_whole_prefix", "bf16", 128, 16, 8, 2,
      (S(2, (0, 0)), S(1, (16, 1)), S(0, (16,))),
      "bf16: a group whose whole context is the prefix (no suffix), and one block + a block"),
    C("cascade_fp16_d80_bs16_g2_odd", "fp16", 80, 16, 4, 2,
      (S(2, (3, 9, 16)), S(0, (5,))),
      "head size 80"),
]


def cascade_layout(case, rng):
    """Block tables, context lengths and the batch order of the case's groups.

    Returns (tables, lens, groups, spare): tables the per-sequence block id lists in batch
    order, lens their context lengths, groups the batch indices of each group's members,
    spare an iterator over the block ids left over.
    """
    bs = case.block_size
    members = []  # (group index, suffix) in group order
    for g, grp in enumerate(case.groups):
        members += [(g, suffix) for suffix in grp.suffix_lens]
    order = rng.permutation(len(members))  # batch position -> member
    num_needed = sum(grp.shared_blocks + grp.shared_partial for grp in case.groups) + sum(
        blocks_for(grp.shared_blocks * bs + s, bs) for grp in case.groups for s in grp.suffix_lens)
    ids = iter(rng.permutation(num_needed + min(max(num_needed, 6), 16)).tolist())
    shared = [[next(ids) for _ in range(grp.shared_blocks + grp.shared_partial)]
              for grp in case.groups]
    tables, lens, groups = [], [], [[] for _ in case.groups]
    for b, i in enumerate(order):
        g, suffix = members[i]
        n = case.groups[g].shared_blocks * bs + suffix
        need = blocks_for(n, bs)
        row = shared[g][:need]
        tables.append(row + [next(ids) for _ in range(need - len(row))])
        lens.append(n)
        groups[g].append(b)
    return tables, lens, groups, ids


def cascade_arrays(case):
    rng = np.random.default_rng(case_seed(case.name))
    bs, hkv, d, x = case.block_size, case.num_kv_heads, case.head_size, pack_x(case.dtype)
    tables, lens, _, spare = cascade_layout(case, rng)
    width = max(1, max(len(t) for t in tables) + 1)
    block_table = np.full((len(tables), width), -1, dtype=np.int32)
    for b, t in enumerate(tables):
        block_table[b, :len(t)] = t
    unowned_block = np.array(next(spare), dtype=np.int32)
    num_blocks = int(max(block_table.max(), unowned_block)) + 1 + 2

    # Each block's slots in use: the most any sequence reads of it.
    used = np.zeros(num_blocks, dtype=np.int64)
    for b, t in enumerate(tables):
        for j, block in enumerate(t):
            used[block] = max(used[block], min(bs, lens[b] - j * bs))
    k_pool = np.full((num_blocks, hkv, d // x, bs, x), np.nan)
    v_pool = np.full((num_blocks, hkv, d, bs), np.nan)
    for block in np.flatnonzero(used):
        n = used[block]
        k_pool[block, :, :, :n] = round_to(rng.standard_normal((hkv, d // x, n, x)), case.dtype)
        v_pool[block, :, :, :n] = round_to(rng.standard_normal((hkv, d, n)), case.dtype)

    context_lens = np.array(lens, dtype=np.int32)
    q = round_to(case.q_std * rng.standard_normal((len(lens), case.num_heads, d)), case.dtype)
    scale = 1.0 / np.sqrt(d)
    expected = paged_decode_attention(q, k_pool, v_pool, block_table, context_lens, scale, bs)
    planned, prefix_lens = plan_cascade(block_table, context_lens, bs)
    group_of = np.full(len(lens), -1, dtype=np.int32)
    for g, (members, _) in enumerate(planned):
        group_of[members] = g
    return {
        "q": q.astype(np.float32),
        "k_pool": k_pool.astype(np.float32),
        "v_pool": v_pool.astype(np.float32),
        "block_table": block_table,
        "unowned_block": unowned_block,
        "context_lens": context_lens,
        "scale": np.array(scale, dtype=np.float64),
        "expected": expected,
        "group_of": group_of,
        "prefix_lens": prefix_lens,
    }


def cascade_params(case):
    atol, rtol = TOLERANCES[case.dtype]
    return {
        "kind": "cascade_decode",
        "dtype": case.dtype,
        "groups": ";".join(f"{g.shared_blocks}{'+partial' if g.shared_partial else ''}:"
                           + ",".join(str(s) for s in g.suffix_lens) for g in case.groups),
        "atol": atol,
        "rtol": rtol,
        "seed": case_seed(case.name),
        "note": case.note,
    }


def cascade_cases(out_dir):
    """Chapter 8: cascade decode attention over shared prefixes."""
    for case in CH08_CASCADE:
        write_case(out_dir / case.name, cascade_arrays(case), cascade_params(case))
