"""The block manager model: its allocation policy, its invariants, and build_batch."""

import numpy as np
import pytest

from pa_ref import (
    BlockAllocator,
    BlockManager,
    OutOfBlocks,
    build_batch,
    paged_gather,
    reshape_and_cache,
)

# ---------------------------------------------------------------- allocator


def test_a_fresh_allocator_hands_out_0_1_2():
    alloc = BlockAllocator(4)
    assert [alloc.allocate() for _ in range(4)] == [0, 1, 2, 3]
    with pytest.raises(OutOfBlocks):
        alloc.allocate()
    assert issubclass(OutOfBlocks, RuntimeError)


def test_free_is_last_in_first_out():
    alloc = BlockAllocator(6)
    for _ in range(4):
        alloc.allocate()
    alloc.free(1)
    alloc.free(3)
    assert [alloc.allocate() for _ in range(4)] == [3, 1, 4, 5]


def test_stats():
    alloc = BlockAllocator(5)
    assert (alloc.num_free, alloc.num_used, alloc.high_water) == (5, 0, 0)
    blocks = [alloc.allocate() for _ in range(3)]
    alloc.free(blocks[0])
    assert (alloc.num_free, alloc.num_used, alloc.high_water) == (3, 2, 3)
    alloc.allocate()
    assert alloc.high_water == 3  # the peak, not the current use


@pytest.mark.parametrize("block", [-1, 4, 10**6])
def test_freeing_an_unknown_id_is_an_error(block):
    with pytest.raises(ValueError, match="out of range"):
        BlockAllocator(4).free(block)


def test_double_free_and_free_of_a_never_allocated_block_are_errors():
    alloc = BlockAllocator(4)
    block = alloc.allocate()
    alloc.free(block)
    with pytest.raises(ValueError, match="not allocated"):
        alloc.free(block)
    with pytest.raises(ValueError, match="not allocated"):
        alloc.free(2)
    assert alloc.num_free == 4


def test_an_empty_pool():
    with pytest.raises(OutOfBlocks):
        BlockAllocator(0).allocate()
    with pytest.raises(ValueError):
        BlockAllocator(-1)


# ---------------------------------------------------------------- manager


def snapshot(manager):
    """Everything observable about a manager, to check that a failed call changed nothing."""
    seqs = manager.sequences()
    alloc = manager.allocator
    return (seqs, [manager.block_list(s) for s in seqs], [manager.length(s) for s in seqs],
            list(alloc._free), alloc.high_water)


def test_decode_allocates_only_when_the_last_block_is_full():
    manager = BlockManager(8, 4)
    manager.add_sequence(7)
    for length in range(17):
        used = manager.allocator.num_used
        manager.append_slots(7, 1)
        assert manager.allocator.num_used - used == (1 if length % 4 == 0 else 0), length
    assert manager.block_list(7) == [0, 1, 2, 3, 4]


def test_slots_follow_the_block_list():
    manager = BlockManager(8, 4)
    manager.add_sequence(0)
    manager.add_sequence(1)
    manager.append_slots(0, 1)                   # seq 0 gets block 0
    assert manager.append_slots(1, 6) == [4, 5, 6, 7, 8, 9]  # blocks 1, 2
    assert manager.append_slots(0, 4) == [1, 2, 3, 12]       # block 0, then block 3
    assert manager.block_list(0) == [0, 3] and manager.length(0) == 5


def test_appending_nothing_allocates_nothing():
    manager = BlockManager(2, 4)
    manager.add_sequence(0)
    assert manager.append_slots(0, 0) == [] and manager.block_list(0) == []
    manager.append_slots(0, 4)
    assert manager.append_slots(0, 0) == [] and manager.allocator.num_used == 1


def test_release_frees_first_block_first():
    manager = BlockManager(8, 2)
    manager.add_sequence(5)
    manager.append_slots(5, 5)  # blocks 0, 1, 2
    manager.release(5)
    assert manager.sequences() == [] and manager.allocator.num_free == 8
    # Block 2 went back last, so it is on top of the stack.
    assert [manager.allocator.allocate() for _ in range(4)] == [2, 1, 0, 3]


def test_bad_requests():
    manager = BlockManager(4, 4)
    manager.add_sequence(1)
    with pytest.raises(ValueError):
        manager.add_sequence(1)
    with pytest.raises(ValueError):
        manager.append_slots(1, -1)
    for call in (lambda: manager.append_slots(2, 1), lambda: manager.release(2),
                 lambda: manager.block_list(2), lambda: manager.length(2)):
        with pytest.raises(KeyError):
            call()
    with pytest.raises(ValueError):
        BlockManager(4, 0)


def test_out_of_blocks_changes_nothing():
    manager = BlockManager(3, 4)
    manager.add_sequence(0)
    manager.add_sequence(1)
    manager.append_slots(0, 5)  # two blocks; one is left
    before = snapshot(manager)
    with pytest.raises(OutOfBlocks):
        manager.append_slots(1, 5)  # needs two
    assert snapshot(manager) == before
    assert manager.append_slots(1, 4) == [8, 9, 10, 11]  # the block left is still there


def check_invariants(manager, num_blocks):
    """No block is shared, none is lost, and each sequence has exactly the blocks it needs."""
    alloc = manager.allocator
    owned = [b for s in manager.sequences() for b in manager.block_list(s)]
    assert len(owned) == len(set(owned)) == alloc.num_used
    assert sorted(owned + alloc._free) == list(range(num_blocks))
    for s in manager.sequences():
        assert len(manager.block_list(s)) == -(-manager.length(s) // manager.block_size)


def test_random_interleavings_keep_the_invariants():
    rng = np.random.default_rng(2026)
    num_blocks, block_size = 20, 4
    manager = BlockManager(num_blocks, block_size)
    slots_of = {}  # seq -> every slot it was given, in order
    failures = 0
    for _ in range(4000):
        seq = int(rng.integers(6))
        live = seq in slots_of
        if not live:
            manager.add_sequence(seq)
            slots_of[seq] = []
        elif rng.random() < 0.05:
            manager.release(seq)
            del slots_of[seq]
        else:
            n = 1 if rng.random() < 0.8 else int(rng.integers(0, 3 * block_size + 2))
            before = snapshot(manager)
            try:
                slots_of[seq] += manager.append_slots(seq, n)
            except OutOfBlocks:
                failures += 1
                assert snapshot(manager) == before
        check_invariants(manager, num_blocks)
        every_slot = [s for slots in slots_of.values() for s in slots]
        assert len(every_slot) == len(set(every_slot))  # no two live tokens share a slot
    assert failures > 50  # the pool did run out, many times


# ---------------------------------------------------------------- build_batch


def three_sequences():
    manager = BlockManager(16, 4)
    for seq, n in [(10, 3), (11, 4), (12, 0)]:
        manager.add_sequence(seq)
        manager.append_slots(seq, n)
    return manager  # blocks: 10 -> [0], 11 -> [1], 12 -> []


def test_build_batch_shapes_padding_and_slots():
    manager = three_sequences()
    batch = build_batch(manager, [11, 10, 12], [1, 6, 0])
    assert batch["block_table"].dtype == np.int32 and batch["context_lens"].dtype == np.int32
    assert batch["slot_mapping"].dtype == np.int64
    np.testing.assert_array_equal(batch["block_table"], [[1, 2, -1], [0, 3, 4], [-1, -1, -1]])
    np.testing.assert_array_equal(batch["context_lens"], [5, 9, 0])
    np.testing.assert_array_equal(batch["slot_mapping"], [8, 3, 12, 13, 14, 15, 16])


def test_build_batch_explicit_width_and_an_empty_batch():
    manager = three_sequences()
    batch = build_batch(manager, [10], [1], max_blocks_per_seq=4)
    np.testing.assert_array_equal(batch["block_table"], [[0, -1, -1, -1]])
    empty = build_batch(manager, [], [])
    assert empty["block_table"].shape == (0, 1) and empty["slot_mapping"].shape == (0,)
    assert build_batch(manager, [12], [0])["block_table"].tolist() == [[-1]]


@pytest.mark.parametrize("seq_ids, new_tokens, width, error", [
    ([10, 11], [1, 9], 2, ValueError),    # 11 would need 4 blocks: beyond the table's capacity
    ([10, 11], [1, 57], 0, OutOfBlocks),  # 11 alone would need 15 new blocks
    ([10, 11], [29, 29], 0, OutOfBlocks),  # each fits alone, not both together
    ([10, 10], [1, 1], 0, ValueError),    # a sequence twice
    ([10, 99], [1, 1], 0, KeyError),      # an unknown sequence
    ([10, 11], [1, -1], 0, ValueError),
    ([10], [1, 1], 0, ValueError),
    ([10], [1], -1, ValueError),
])
def test_a_failing_build_batch_changes_nothing(seq_ids, new_tokens, width, error):
    manager = three_sequences()
    before = snapshot(manager)
    with pytest.raises(error):
        build_batch(manager, seq_ids, new_tokens, width)
    assert snapshot(manager) == before


def test_capacity_error_message():
    with pytest.raises(ValueError, match="beyond the table's capacity"):
        build_batch(three_sequences(), [11], [9], max_blocks_per_seq=2)


def test_batch_metadata_drives_the_paged_storage():
    """build_batch's slots and table, used by reshape_and_cache and paged_gather, round-trip."""
    rng = np.random.default_rng(5)
    block_size, heads, dim = 4, 2, 8
    manager = BlockManager(24, block_size)
    dense = {}  # seq -> every K row it was given
    k_pool = np.full((24, heads, dim // 4, block_size, 4), np.nan)
    v_pool = np.full((24, heads, dim, block_size), np.nan)
    for s in (0, 1, 2):
        manager.add_sequence(s)
    for step in range(6):
        seqs = [0, 1, 2] if step else [0, 1]  # sequence 2 joins at step 1
        new = [int(rng.integers(0, 7)) for _ in seqs]
        batch = build_batch(manager, seqs, new)
        rows = rng.standard_normal((sum(new), heads, dim))
        reshape_and_cache(rows, rows, k_pool, v_pool, batch["slot_mapping"])
        for s, chunk in zip(seqs, np.split(rows, np.cumsum(new)[:-1])):
            dense[s] = np.concatenate([dense.get(s, np.zeros((0, heads, dim))), chunk])
        width = batch["block_table"].shape[1] * block_size
        k_got, v_got = paged_gather(k_pool, v_pool, batch["block_table"], batch["context_lens"], width)
        for b, s in enumerate(seqs):
            np.testing.assert_array_equal(k_got[b, :len(dense[s])], dense[s])
            np.testing.assert_array_equal(v_got[b, :len(dense[s])], dense[s])
