"""The copy-on-write block manager: its policy, and its invariants under random ops."""

from collections import Counter

import numpy as np
import pytest

from pa_ref import OutOfBlocks, SharedBlockManager, copy_blocks


def manager_with(num_blocks, block_size, lengths):
    """A manager holding sequences 0, 1, ... of the given lengths, each on its own blocks."""
    m = SharedBlockManager(num_blocks, block_size)
    for seq, n in enumerate(lengths):
        m.add_sequence(seq)
        m.append_slots(seq, n)
    return m


def test_fork_shares_every_block():
    m = manager_with(8, 4, [10])  # blocks 0, 1, 2; 2 tokens in block 2
    m.fork(0, 1)
    assert m.block_list(1) == [0, 1, 2] and m.length(1) == 10
    assert [m.refcount(b) for b in range(4)] == [2, 2, 2, 0]
    assert m.num_used == 3 and m.num_free == 5
    assert m.take_copies() == []  # a fork copies nothing
    with pytest.raises(ValueError):
        m.fork(0, 1)  # the child exists
    with pytest.raises(KeyError):
        m.fork(7, 2)  # the parent does not


def test_append_to_a_shared_partial_tail_copies_it_first():
    m = manager_with(8, 4, [10])
    m.fork(0, 1)
    assert m.append_slots(1, 1) == [3 * 4 + 2]  # block 3 (the next free), offset 2
    assert m.block_list(1) == [0, 1, 3] and m.block_list(0) == [0, 1, 2]
    assert m.take_copies() == [(2, 3)] and m.take_copies() == []
    assert [m.refcount(b) for b in range(4)] == [2, 2, 1, 1]
    # Block 2 now has one owner: the parent writes to it in place.
    assert m.append_slots(0, 1) == [2 * 4 + 2] and m.take_copies() == []


def test_copy_then_new_blocks_in_one_append():
    m = manager_with(8, 4, [6])  # blocks 0, 1; 2 tokens in block 1
    m.fork(0, 1)
    # The copy is allocated first (block 2), then the new blocks (3, 4).
    assert m.append_slots(1, 7) == [10, 11, 12, 13, 14, 15, 16]
    assert m.block_list(1) == [0, 2, 3, 4] and m.take_copies() == [(1, 2)]
    assert [m.refcount(b) for b in range(5)] == [2, 1, 1, 1, 1]


def test_a_full_shared_tail_is_never_copied():
    m = manager_with(8, 4, [8])  # two full blocks
    m.fork(0, 1)
    assert m.append_slots(1, 1) == [2 * 4]  # a new block; nothing copied
    assert m.take_copies() == [] and m.block_list(1) == [0, 1, 2]
    assert m.refcount(1) == 2


def test_appending_nothing_copies_nothing():
    m = manager_with(8, 4, [5])
    m.fork(0, 1)
    assert m.append_slots(1, 0) == [] and m.take_copies() == []
    assert m.refcount(1) == 2


def test_out_of_blocks_for_the_copy_alone_changes_nothing():
    m = manager_with(3, 4, [10])  # every block in use; block 2 half full
    m.fork(0, 1)
    before = (m.block_list(1), m.length(1), [m.refcount(b) for b in range(3)], m.num_free)
    with pytest.raises(OutOfBlocks):
        m.append_slots(1, 1)  # fits in the tail, but the tail is shared
    assert (m.block_list(1), m.length(1), [m.refcount(b) for b in range(3)], m.num_free) == before
    assert m.take_copies() == []
    # Once the parent is gone, the child owns the tail and writes in place.
    m.release(0)
    assert m.append_slots(1, 1) == [2 * 4 + 2] and m.take_copies() == []


def test_out_of_blocks_counts_the_copy_and_the_new_blocks_together():
    m = manager_with(5, 4, [6])  # blocks 0, 1; three free
    m.fork(0, 1)
    with pytest.raises(OutOfBlocks):
        m.append_slots(1, 2 + 4 * 3)  # copy + 3 new blocks = 4 > 3
    assert m.num_free == 3 and m.take_copies() == [] and m.length(1) == 6
    m.append_slots(1, 2 + 4 * 2)  # copy + 2 new blocks = 3: fits exactly
    assert m.num_free == 0 and len(m.take_copies()) == 1


def test_release_frees_a_block_when_its_last_owner_goes():
    m = manager_with(8, 4, [10])
    m.fork(0, 1)
    m.fork(1, 2)
    m.release(0)
    assert m.num_free == 5 and [m.refcount(b) for b in range(3)] == [2, 2, 2]
    m.release(2)
    assert m.num_free == 5
    m.release(1)
    assert m.num_free == 8 and m.num_used == 0
    # Freed in list order, so the last block is on top: LIFO reuse gives 2, 1, 0.
    m.add_sequence(3)
    m.append_slots(3, 12)
    assert m.block_list(3) == [2, 1, 0]


def test_copy_blocks_moves_whole_blocks_in_every_layer():
    rng = np.random.default_rng(0)
    k = rng.standard_normal((2, 6, 2, 4, 8, 4))
    v = rng.standard_normal((2, 6, 2, 16, 8))
    k2, v2 = copy_blocks(k.copy(), v.copy(), [(1, 4), (1, 5), (0, 2)])
    for src, dst in ((1, 4), (1, 5), (0, 2)):
        np.testing.assert_array_equal(k2[:, dst], k[:, src])
        np.testing.assert_array_equal(v2[:, dst], v[:, src])
    for untouched in (0, 1, 3):
        np.testing.assert_array_equal(k2[:, untouched], k[:, untouched])
    with pytest.raises(ValueError):
        copy_blocks(k, v, [(0, 6)])


# ---------------------------------------------------------------- random ops


class CountingManager(SharedBlockManager):
    """Logs every allocate and free of the underlying allocator."""

    def __init__(self, num_blocks, block_size):
        super().__init__(num_blocks, block_size)
        self.events = []
        allocate, free = self.allocator.allocate, self.allocator.free

        def logged_allocate():
            block = allocate()
            self.events.append(("allocate", block))
            return block

        def logged_free(block):
            free(block)
            self.events.append(("free", block))

        self.allocator.allocate, self.allocator.free = logged_allocate, logged_free


def state(m):
    return ({s: (m.block_list(s), m.length(s)) for s in m.sequences()},
            [m.refcount(b) for b in range(m.allocator.num_blocks)], m.num_free)


def check_invariants(m):
    owners = Counter(b for s in m.sequences() for b in m.block_list(s))
    for b in range(m.allocator.num_blocks):
        assert m.refcount(b) == owners[b] >= 0, b
        assert m.allocator.is_allocated(b) == (owners[b] > 0), b
    assert m.num_used == m.allocator.num_used == len(owners)
    for s in m.sequences():
        assert len(m.block_list(s)) == -(-m.length(s) // m.block_size), s


@pytest.mark.parametrize("seed, num_blocks, block_size", [(1, 24, 4), (2, 16, 8), (3, 40, 2),
                                                          (4, 12, 16)])
def test_invariants_under_random_ops(seed, num_blocks, block_size):
    rng = np.random.default_rng(seed)
    m = CountingManager(num_blocks, block_size)
    pool = np.full(num_blocks * block_size, -1)  # the token stored in each slot
    logical = {}  # seq -> its tokens, as an unshared cache that copies on fork would hold
    next_token, next_seq = 0, 0
    stats = Counter()
    for _ in range(3000):
        live = m.sequences()
        u = rng.random()
        if len(live) >= 10 and u < 0.2:
            u = 0.2 + 0.8 * rng.random()  # enough sequences: no add, no fork
        if not live or u < 0.05:
            m.add_sequence(next_seq)
            logical[next_seq] = []
            next_seq += 1
        elif u < 0.2:
            parent = int(rng.choice(live))
            m.fork(parent, next_seq)
            logical[next_seq] = list(logical[parent])
            next_seq += 1
        elif u < 0.2 + (0.3 if m.num_free == 0 else 0.03):
            seq = int(rng.choice(live))
            blocks = m.block_list(seq)
            m.release(seq)
            del logical[seq]
            others = {b for s in m.sequences() for b in m.block_list(s)}
            for b in blocks:  # back exactly when the last owner is gone
                assert m.allocator.is_allocated(b) == (b in others)
            stats["release"] += 1
        else:
            seq = int(rng.choice(live))
            n = 1 if rng.random() < 0.7 else int(rng.integers(0, 3 * block_size))
            before = state(m)
            try:
                slots = m.append_slots(seq, n)
            except OutOfBlocks:
                assert state(m) == before and m.take_copies() == []
                stats["out_of_blocks"] += 1
                continue
            copies = m.take_copies()
            stats["copies"] += len(copies)
            for src, dst in copies:  # the engine copies before the kernel writes
                pool[dst * block_size:(dst + 1) * block_size] = pool[src * block_size:(src + 1) * block_size]
            for slot in slots:
                # No write ever lands in a block that someone else also owns.
                assert m.refcount(slot // block_size) == 1
                pool[slot] = next_token
                logical[seq].append(next_token)
                next_token += 1
        check_invariants(m)
        # Every sequence reads back exactly its own tokens.
        for s in m.sequences():
            assert [pool[m.slot(s, p)] for p in range(m.length(s))] == logical[s], s
    for s in m.sequences():
        m.release(s)
    check_invariants(m)
    assert m.num_free == num_blocks
    # Each block alternates allocate, free, allocate, free ...: freed exactly once each time.
    for b in range(num_blocks):
        kinds = [kind for kind, block in m.events if block == b]
        assert kinds == ["allocate", "free"] * (len(kinds) // 2), b
    assert stats["copies"] > 50 and stats["out_of_blocks"] > 10 and stats["release"] > 50, stats
