"""Chapter 7's golden cases: copy-on-write block sharing.

script_<n> cases: a random script of add / append / release / fork ops and,
  after every op, what the shared block manager (cow.py) must have done:
    op_kind, op_seq, op_n, op_parent  int32 [N]   the script (op_parent: fork only, else -1)
    expect_error        int32 [N]     1 where an append ran out of blocks (and changed nothing)
    expect_slots        int64 [S]     the slots of every successful append, concatenated
    expect_copies       int32 [K, 2]  every (src, dst) copy, taken after each op, in order
    expect_copy_counts  int32 [N]     how many copies each op asked for (0 or 1)
    expect_num_free     int32 [N]     free blocks after each op
    expect_high_water   int32 0-d     the most blocks ever in use at once
    final_seq_ids, final_lengths int32 [L]; final_block_lists int32 [L, W] (-1 padded)
    final_refcounts     int32 [num_blocks]
  For a fork, op_seq is the child and op_parent the parent.
scenario_<name> cases: the same arrays for a hand-written script (parallel
  sampling, beam search, a shared system prompt), plus
    shared_blocks_used    int32 0-d    peak blocks in use, with sharing
    unshared_blocks_used  int32 0-d    peak of sum over live sequences of
                                       ceil(len / block_size): every sequence with
                                       its own copy of its tokens (fork = full copy)
    saved_fraction        float64 0-d  1 - shared / unshared
  Both peaks are taken after every op of the same script.
copy_<dtype>_... cases: the copy kernel that carries out the copies:
    k_pools  float32 [L, num_blocks, Hkv, D // x, BS, x]   (chapter 2's layouts, per layer)
    v_pools  float32 [L, num_blocks, Hkv, D, BS]
    pairs    int32   [P, 2]   (src, dst): distinct dsts, none of them a src
    expected_k_pools, expected_v_pools   after copying every pair's whole block
"""

from dataclasses import dataclass

import numpy as np

from .block_manager import OutOfBlocks
from .cow import SharedBlockManager, copy_blocks
from .dtypes import round_to
from .golden_ch03 import OP_ADD, OP_APPEND, OP_RELEASE
from .golden_io import case_seed, write_case
from .paged import blocks_for, pack_x

OP_FORK = 3  # op_seq = the child, op_parent = the parent


# ---------------------------------------------------------------- replaying a script


def apply_op(manager, kind, seq, n, parent):
    """Apply one op; return the slots it produced, or None if it ran out of blocks."""
    if kind == OP_ADD:
        manager.add_sequence(seq)
    elif kind == OP_RELEASE:
        manager.release(seq)
    elif kind == OP_FORK:
        manager.fork(parent, seq)
    else:
        try:
            return manager.append_slots(seq, n)
        except OutOfBlocks:
            return None
    return []


def unshared_blocks(manager):
    """Blocks in use if no block were shared: each live sequence holds its own."""
    return sum(blocks_for(manager.length(s), manager.block_size) for s in manager.sequences())


def replay(manager, ops):
    """Run ops on manager, taking the copies after every op; return what must be seen."""
    errors, slots, copies, copy_counts, num_free = [], [], [], [], []
    shared_peak = unshared_peak = 0
    for op in ops:
        new_slots = apply_op(manager, *op)
        taken = manager.take_copies()
        errors.append(new_slots is None)
        slots += new_slots or []
        copies += taken
        copy_counts.append(len(taken))
        num_free.append(manager.num_free)
        shared_peak = max(shared_peak, manager.num_used)
        unshared_peak = max(unshared_peak, unshared_blocks(manager))
    arrays = {
        "expect_error": np.array(errors, dtype=np.int32),
        "expect_slots": np.array(slots, dtype=np.int64),
        "expect_copies": np.array(copies, dtype=np.int32).reshape(-1, 2),
        "expect_copy_counts": np.array(copy_counts, dtype=np.int32),
        "expect_num_free": np.array(num_free, dtype=np.int32),
        "expect_high_water": np.array(manager.allocator.high_water, dtype=np.int32),
    }
    return arrays, shared_peak, unshared_peak


def op_arrays(ops):
    """A script as the int32 arrays op_kind, op_seq, op_n, op_parent."""
    columns = list(zip(*ops)) if ops else [(), (), (), ()]
    return {name: np.array(col, dtype=np.int32)
            for name, col in zip(("op_kind", "op_seq", "op_n", "op_parent"), columns)}


def final_state(manager):
    """Live sequences in ascending id order, lengths, -1-padded block lists, refcounts."""
    seqs = manager.sequences()
    lists = [manager.block_list(s) for s in seqs]
    width = max([len(blocks) for blocks in lists] + [1])
    table = np.full((len(seqs), width), -1, dtype=np.int32)
    for row, blocks in zip(table, lists):
        row[:len(blocks)] = blocks
    return {
        "final_seq_ids": np.array(seqs, dtype=np.int32),
        "final_lengths": np.array([manager.length(s) for s in seqs], dtype=np.int32),
        "final_block_lists": table,
        "final_refcounts": np.array([manager.refcount(b) for b in range(manager.allocator.num_blocks)],
                                    dtype=np.int32),
    }


def script_case_arrays(num_blocks, block_size, ops):
    """Everything a script case holds, and the two peaks."""
    manager = SharedBlockManager(num_blocks, block_size)
    arrays = op_arrays(ops)
    expect, shared_peak, unshared_peak = replay(manager, ops)
    arrays.update(expect)
    arrays.update(final_state(manager))
    return arrays, shared_peak, unshared_peak


# ---------------------------------------------------------------- random scripts


@dataclass(frozen=True)
class CowScriptCase:
    name: str
    num_blocks: int
    block_size: int
    num_ops: int
    seq_ids: tuple
    note: str


CH07_SCRIPTS = [
    CowScriptCase("script_1", 24, 16, 500, tuple(range(8)),
                  "eight sequence ids on 24 blocks of 16: forks, decode steps, prefills"),
    CowScriptCase("script_2", 32, 8, 700, tuple(range(12)),
                  "8-token blocks: a partly filled tail most of the time, so many copies"),
    CowScriptCase("script_3", 12, 8, 600, (0, 5, 17, 42, 999, 123456, 2**31 - 1),
                  "a tight pool of 12 blocks of 8; sparse ids up to INT32_MAX; frequent "
                  "out-of-blocks, some caused by the copy alone"),
]


def append_count(rng, block_size, num_free):
    """Mostly one decode token; sometimes a prefill of an edge length, or one too big."""
    if 0 < num_free <= 2 and rng.random() < 0.2:
        return (num_free + 1) * block_size
    if rng.random() < 0.75:
        return 1
    edges = [0, block_size - 1, block_size, block_size + 1]
    return int(rng.choice(edges + [int(rng.integers(0, 3 * block_size + 2))]))


def choose_op(rng, manager, case):
    live = manager.sequences()
    dead = [s for s in case.seq_ids if s not in live]
    num_free = manager.num_free
    p_release = 0.02 + (0.2 if num_free == 0 else 0.0)
    u = rng.random()
    if not live or (dead and u < 0.05):
        return (OP_ADD, int(rng.choice(dead)), 0, -1)
    if dead and u < 0.17:
        return (OP_FORK, int(rng.choice(dead)), 0, int(rng.choice(live)))
    if u < 0.17 + p_release:
        return (OP_RELEASE, int(rng.choice(live)), 0, -1)
    return (OP_APPEND, int(rng.choice(live)), append_count(rng, case.block_size, num_free), -1)


def random_script(case):
    rng = np.random.default_rng(case_seed(case.name))
    manager = SharedBlockManager(case.num_blocks, case.block_size)
    ops = []
    for _ in range(case.num_ops):
        op = choose_op(rng, manager, case)
        apply_op(manager, *op)
        manager.take_copies()
        ops.append(op)
    return ops


def script_params(case):
    return {
        "kind": "cow_script",
        "num_blocks": case.num_blocks,
        "block_size": case.block_size,
        "num_ops": case.num_ops,
        "seed": case_seed(case.name),
        "note": case.note,
    }


# ---------------------------------------------------------------- scenarios


def add(seq):
    return (OP_ADD, seq, 0, -1)


def append(seq, n):
    return (OP_APPEND, seq, n, -1)


def release(seq):
    return (OP_RELEASE, seq, 0, -1)


def fork(parent, child):
    return (OP_FORK, child, 0, parent)


def parallel_sampling_ops(prompt_len=37, num_samples=4, decode_steps=20):
    """One prompt, forked into num_samples samples that decode in lockstep.

    The prompt's sequence is released once forked: the last sample to write its
    shared tail then owns it alone and writes in place, so there are
    num_samples - 1 copies, not num_samples.
    """
    children = list(range(1, num_samples + 1))
    ops = [add(0), append(0, prompt_len)] + [fork(0, c) for c in children] + [release(0)]
    for _ in range(decode_steps):
        ops += [append(c, 1) for c in children]
    return ops


def beam_search_ops(rng, prompt_len=20, num_beams=4, steps=12, every=3, pruned=2):
    """num_beams beams decode one token a step; every `every` steps the `pruned`
    worst beams are released and each of the `pruned` best ones is forked once."""
    beams = [0] + list(range(1, num_beams))
    ops = [add(0), append(0, prompt_len)] + [fork(0, b) for b in beams[1:]]
    next_id = num_beams
    for step in range(1, steps + 1):
        ops += [append(b, 1) for b in beams]
        if step % every == 0:
            ranked = [beams[i] for i in rng.permutation(len(beams))]  # best first
            best, worst = ranked[:pruned], ranked[-pruned:]
            ops += [release(b) for b in worst]
            children = list(range(next_id, next_id + pruned))
            next_id += pruned
            ops += [fork(p, c) for p, c in zip(best, children)]
            beams = [b for b in beams if b not in worst] + children
    return ops


def prefix_sharing_ops(rng, system_len=100, num_requests=6, own=(5, 30)):
    """A system prompt held by sequence 0; each request forks it and prefills its own tokens."""
    ops = [add(0), append(0, system_len)]
    for r in range(1, num_requests + 1):
        ops += [fork(0, r), append(r, int(rng.integers(own[0], own[1] + 1)))]
    return ops


@dataclass(frozen=True)
class ScenarioCase:
    name: str
    num_blocks: int
    block_size: int
    note: str


CH07_SCENARIOS = [
    ScenarioCase("scenario_parallel_sampling", 64, 16,
                 "a 37-token prompt forked into 4 samples that decode 20 tokens each; the prompt's "
                 "sequence is released after the forks, so 3 samples copy the shared tail and the last "
                 "writes it in place"),
    ScenarioCase("scenario_beam_search", 64, 8,
                 "4 beams on a 20-token prompt, 12 steps of one token; every 3 steps the 2 worst "
                 "beams are released and the 2 best forked"),
    ScenarioCase("scenario_prefix_sharing", 64, 16,
                 "a 100-token system prompt kept in sequence 0; 6 requests fork it and prefill "
                 "5-30 tokens of their own, each copying the prompt's partly filled last block"),
]


def scenario_ops(case):
    rng = np.random.default_rng(case_seed(case.name))
    if case.name == "scenario_parallel_sampling":
        return parallel_sampling_ops()
    if case.name == "scenario_beam_search":
        return beam_search_ops(rng)
    return prefix_sharing_ops(rng)


def scenario_arrays(case):
    arrays, shared, unshared = script_case_arrays(case.num_blocks, case.block_size, scenario_ops(case))
    assert not arrays["expect_error"].any(), case.name
    arrays["shared_blocks_used"] = np.array(shared, dtype=np.int32)
    arrays["unshared_blocks_used"] = np.array(unshared, dtype=np.int32)
    arrays["saved_fraction"] = np.array(1.0 - shared / unshared, dtype=np.float64)
    return arrays


def scenario_params(case):
    return {
        "kind": "cow_scenario",
        "num_blocks": case.num_blocks,
        "block_size": case.block_size,
        "note": case.note,
    }


# ---------------------------------------------------------------- the copy kernel


@dataclass(frozen=True)
class CopyCase:
    name: str
    dtype: str
    num_layers: int
    num_blocks: int
    block_size: int
    num_kv_heads: int
    head_size: int
    num_pairs: int
    note: str


CH07_COPIES = [
    CopyCase("copy_fp16_bs16_d64_h2_l2", "fp16", 2, 10, 16, 2, 64, 4,
             "two layers; one src block copied to two dsts (two forks of one partly filled tail)"),
    CopyCase("copy_fp32_bs8_d80_h2_l2", "fp32", 2, 12, 8, 2, 80, 5,
             "fp32 (x = 4), head size 80, 8-token blocks, two layers"),
]


def copy_arrays(case):
    rng = np.random.default_rng(case_seed(case.name))
    x, bs, hkv, d = pack_x(case.dtype), case.block_size, case.num_kv_heads, case.head_size
    k_shape = (case.num_layers, case.num_blocks, hkv, d // x, bs, x)
    v_shape = (case.num_layers, case.num_blocks, hkv, d, bs)
    # Every block holds distinct values, so a copy from the wrong block, layer or pool shows.
    k_pools = round_to(rng.standard_normal(k_shape), case.dtype).astype(np.float32)
    v_pools = round_to(rng.standard_normal(v_shape), case.dtype).astype(np.float32)
    ids = rng.permutation(case.num_blocks)
    num_srcs = case.num_pairs - 1
    srcs = list(ids[:num_srcs]) + [ids[0]]  # the first src twice
    dsts = ids[num_srcs:num_srcs + case.num_pairs]
    pairs = np.array(list(zip(srcs, dsts)), dtype=np.int32)
    expected_k, expected_v = copy_blocks(k_pools.copy(), v_pools.copy(), pairs)
    return {
        "k_pools": k_pools,
        "v_pools": v_pools,
        "pairs": pairs,
        "expected_k_pools": expected_k,
        "expected_v_pools": expected_v,
    }


def copy_params(case):
    return {
        "kind": "copy_blocks",
        "dtype": case.dtype,
        "num_layers": case.num_layers,
        "num_blocks": case.num_blocks,
        "block_size": case.block_size,
        "num_kv_heads": case.num_kv_heads,
        "head_size": case.head_size,
        "x": pack_x(case.dtype),
        "num_pairs": case.num_pairs,
        "seed": case_seed(case.name),
        "note": case.note,
    }


def chapter_07(out_dir):
    """Chapter 7: copy-on-write scripts and scenarios, and the block copy kernel."""
    for case in CH07_SCRIPTS:
        arrays, _, _ = script_case_arrays(case.num_blocks, case.block_size, random_script(case))
        write_case(out_dir / case.name, arrays, script_params(case))
    for case in CH07_SCENARIOS:
        write_case(out_dir / case.name, scenario_arrays(case), scenario_params(case))
    for case in CH07_COPIES:
        write_case(out_dir / case.name, copy_arrays(case), copy_params(case))
