"""Chapter 3's golden cases: the block manager's choices, op by op.

script_* cases: a random script of add / append / release ops and, after every
  op, what the manager must have done: the slots it returned, whether it ran
  out of blocks (and then changed nothing), the allocator's free count; at the
  end, the high-water mark and every live sequence's length and block list.
batch_* cases: a short setup script, then one build_batch call and the
  block_table, context_lens and slot_mapping it must return.
trace_paged: chapter 1's trace, reserved in blocks of 8, 16 and 32 tokens.

A C++ block manager that follows the policy in block_manager.py reproduces
every block id exactly.
"""

from dataclasses import dataclass

import numpy as np

from .block_manager import BlockManager, OutOfBlocks, build_batch
from .golden_io import case_seed, write_case
from .memory import GIB, KVConfig, dense_memory_report, paged_memory_report
from .trace import DEFAULT_NUM_REQUESTS, DEFAULT_SEED, synthetic_trace

# op_kind values of a script.
OP_ADD, OP_APPEND, OP_RELEASE = 0, 1, 2


@dataclass(frozen=True)
class ScriptCase:
    name: str
    num_blocks: int
    block_size: int
    num_ops: int
    seq_ids: tuple
    note: str


CH03_SCRIPTS = [
    ScriptCase("script_1", 24, 16, 400, tuple(range(8)),
               "eight sequences on 24 blocks of 16"),
    ScriptCase("script_2", 32, 8, 600, tuple(range(8)),
               "small blocks: a block boundary every 8 decode steps"),
    ScriptCase("script_3", 24, 32, 300, (0, 5, 17, 42, 999, 123456, 2**31 - 1),
               "large blocks, sparse sequence ids up to INT32_MAX"),
    ScriptCase("script_4", 32, 8, 500, (1, 2, 3, 4),
               "four long-lived sequences on 32 blocks of 8"),
]


@dataclass(frozen=True)
class BatchCase:
    name: str
    num_blocks: int
    block_size: int
    setup: tuple  # (op_kind, seq, n) triples, all of which succeed
    seq_ids: tuple
    new_tokens: tuple
    max_blocks_per_seq: int
    note: str


def adds(*seqs):
    return tuple((OP_ADD, s, 0) for s in seqs)


CH03_BATCHES = [
    BatchCase("batch_1", 32, 16,
              adds(0, 1, 2, 3) + ((OP_APPEND, 0, 17), (OP_APPEND, 1, 16), (OP_APPEND, 3, 5),
                                  (OP_APPEND, 0, 1), (OP_RELEASE, 1, 0), (OP_ADD, 4, 0),
                                  (OP_APPEND, 4, 40)),
              (3, 0, 4, 2), (1, 15, 1, 17), 0,
              "mixed prefill and decode; sequence 4 reuses released blocks; automatic width"),
    BatchCase("batch_2", 40, 8,
              adds(10, 20) + ((OP_APPEND, 10, 8), (OP_APPEND, 20, 3), (OP_ADD, 30, 0),
                              (OP_APPEND, 30, 20), (OP_RELEASE, 10, 0), (OP_APPEND, 20, 6),
                              (OP_ADD, 40, 0)),
              (20, 30, 40), (1, 4, 1), 8,
              "explicit max_blocks_per_seq = 8, wider than needed: the rest is -1 padding"),
    BatchCase("batch_3", 16, 32,
              adds(0, 1) + ((OP_APPEND, 0, 31), (OP_ADD, 2, 0), (OP_APPEND, 2, 64)),
              (0, 1, 2), (1, 0, 1), 0,
              "lengths 31 -> 32 (no new block), 0 -> 0 (an all -1 row), 64 -> 65 (a new block)"),
]


# ---------------------------------------------------------------- scripts


def apply_op(manager, kind, seq, n):
    """Apply one op; return the slots it produced, or None if it ran out of blocks."""
    if kind == OP_ADD:
        manager.add_sequence(seq)
        return []
    if kind == OP_RELEASE:
        manager.release(seq)
        return []
    try:
        return manager.append_slots(seq, n)
    except OutOfBlocks:
        return None


def append_count(rng, block_size, num_free):
    """Mostly one decode token; sometimes a prefill, often of an edge length.

    When one or two blocks are left, sometimes a prefill one block too big:
    it must fail without taking the blocks that were left.
    """
    if 0 < num_free <= 2 and rng.random() < 0.2:
        return (num_free + 1) * block_size
    if rng.random() < 0.8:
        return 1
    edges = [0, block_size - 1, block_size, block_size + 1]
    return int(rng.choice(edges + [int(rng.integers(0, 3 * block_size + 2))]))


def choose_op(rng, manager, case):
    """The next op: an add of an id not live, a release of a live id, or an append."""
    live = manager.sequences()
    dead = [s for s in case.seq_ids if s not in live]
    num_free = manager.allocator.num_free
    # Releases are rare until the pool is full, so appends keep running out of
    # blocks and the pool keeps recovering.
    p_release = 0.01 + (0.15 if num_free == 0 else 0.0)
    u = rng.random()
    if not live or (dead and u < 0.08):
        return (OP_ADD, int(rng.choice(dead)), 0)
    if u < 0.08 + p_release:
        return (OP_RELEASE, int(rng.choice(live)), 0)
    return (OP_APPEND, int(rng.choice(live)), append_count(rng, case.block_size, num_free))


def random_script(case):
    """A script of case.num_ops valid ops (appends may run out of blocks)."""
    rng = np.random.default_rng(case_seed(case.name))
    manager = BlockManager(case.num_blocks, case.block_size)
    ops = []
    for _ in range(case.num_ops):
        op = choose_op(rng, manager, case)
        apply_op(manager, *op)
        ops.append(op)
    return ops


def op_arrays(ops):
    """A script as the arrays op_kind, op_seq, op_n (int32)."""
    kinds, seqs, ns = zip(*ops) if ops else ((), (), ())
    return {
        "op_kind": np.array(kinds, dtype=np.int32),
        "op_seq": np.array(seqs, dtype=np.int32),
        "op_n": np.array(ns, dtype=np.int32),
    }


def replay(manager, ops):
    """Run ops on manager; return what must be seen after each one."""
    errors, slots, num_free = [], [], []
    for op in ops:
        new_slots = apply_op(manager, *op)
        errors.append(new_slots is None)
        slots += new_slots or []
        num_free.append(manager.allocator.num_free)
    return {
        "expect_error": np.array(errors, dtype=np.int32),
        "expect_slots": np.array(slots, dtype=np.int64),
        "expect_num_free": np.array(num_free, dtype=np.int32),
    }


def final_state(manager):
    """Live sequences in ascending id order, their lengths and -1-padded block lists."""
    seqs = manager.sequences()
    lists = [manager.block_list(s) for s in seqs]
    width = max([len(blocks) for blocks in lists] + [1])  # at least one column
    table = np.full((len(seqs), width), -1, dtype=np.int32)
    for row, blocks in zip(table, lists):
        row[:len(blocks)] = blocks
    return {
        "final_seq_ids": np.array(seqs, dtype=np.int32),
        "final_lengths": np.array([manager.length(s) for s in seqs], dtype=np.int32),
        "final_block_lists": table,
    }


def script_arrays(case):
    ops = random_script(case)
    manager = BlockManager(case.num_blocks, case.block_size)
    arrays = op_arrays(ops)
    arrays.update(replay(manager, ops))
    arrays["expect_high_water"] = np.array(manager.allocator.high_water, dtype=np.int32)
    arrays.update(final_state(manager))
    return arrays


def script_params(case):
    return {
        "kind": "block_manager_script",
        "num_blocks": case.num_blocks,
        "block_size": case.block_size,
        "num_ops": case.num_ops,
        "seed": case_seed(case.name),
        "note": case.note,
    }


# ---------------------------------------------------------------- batches


def batch_arrays(case):
    manager = BlockManager(case.num_blocks, case.block_size)
    for op in case.setup:
        assert apply_op(manager, *op) is not None, (case.name, op)
    arrays = op_arrays(case.setup)
    arrays.update(
        batch_seq_ids=np.array(case.seq_ids, dtype=np.int32),
        batch_new_tokens=np.array(case.new_tokens, dtype=np.int32),
        max_blocks_per_seq=np.array(case.max_blocks_per_seq, dtype=np.int32),
    )
    arrays.update(build_batch(manager, case.seq_ids, case.new_tokens, case.max_blocks_per_seq))
    return arrays


def batch_params(case):
    return {
        "kind": "build_batch",
        "num_blocks": case.num_blocks,
        "block_size": case.block_size,
        "note": case.note,
    }


# ---------------------------------------------------------------- memory


TRACE_BLOCK_SIZES = (8, 16, 32)


def trace_paged_arrays(cfg, budget_bytes):
    """The chapter-1 trace's paged report per block size, and its dense report."""
    prompt_lens, output_lens = synthetic_trace(DEFAULT_SEED, DEFAULT_NUM_REQUESTS)
    reports = [paged_memory_report(prompt_lens, output_lens, cfg, bs, budget_bytes)
               for bs in TRACE_BLOCK_SIZES]
    dense = dense_memory_report(prompt_lens, output_lens, cfg, budget_bytes)
    arrays = {
        "prompt_lens": prompt_lens.astype(np.int32),
        "output_lens": output_lens.astype(np.int32),
        "block_sizes": np.array(TRACE_BLOCK_SIZES, dtype=np.int32),
        "waste_fraction": np.array([r["waste_fraction"] for r in reports], dtype=np.float64),
        "dense_reserved_bytes": np.array(dense["reserved_bytes"], dtype=np.int64),
        "dense_waste_fraction": np.array(dense["waste_fraction"], dtype=np.float64),
        "dense_seqs_in_budget": np.array(dense["dense_seqs_in_budget"], dtype=np.int64),
    }
    for key in ("reserved_bytes", "used_bytes", "paged_seqs_in_budget"):
        arrays[key] = np.array([r[key] for r in reports], dtype=np.int64)
    return arrays


def write_trace_paged_case(case_dir, cfg=KVConfig(), budget_bytes=16 * GIB):
    params = {
        "kind": "trace_paged",
        "seed": DEFAULT_SEED,
        "num_requests": DEFAULT_NUM_REQUESTS,
        "num_layers": cfg.num_layers,
        "num_kv_heads": cfg.num_kv_heads,
        "head_size": cfg.head_size,
        "dtype_bytes": cfg.dtype_bytes,
        "max_seq_len": cfg.max_seq_len,
        "bytes_per_token": cfg.bytes_per_token,
        "budget_bytes": budget_bytes,
        "note": "chapter 1's trace in a paged cache of block sizes 8, 16, 32, beside the dense cache",
    }
    write_case(case_dir, trace_paged_arrays(cfg, budget_bytes), params)


def chapter_03(out_dir):
    """Chapter 3: the block manager's scripts and batches, and the paged memory report."""
    for case in CH03_SCRIPTS:
        write_case(out_dir / case.name, script_arrays(case), script_params(case))
    for case in CH03_BATCHES:
        write_case(out_dir / case.name, batch_arrays(case), batch_params(case))
    write_trace_paged_case(out_dir / "trace_paged")
