"""Copy-on-write blocks: sequences that share a prefix share its physical blocks.

This is the reference model of chapter 7. It extends chapter 3's block manager
with a reference count per block, and its choices are part of the spec: a C++
manager must hand out the same block ids and ask for the same copies.

- fork(parent, child): the child gets the parent's block list and length; no
  block is copied, every one of them gains an owner (refcount += 1).
- append_slots(seq, n), n > 0: token positions len .. len+n-1 are about to be
  written. Only the tail block can receive a write that lands among tokens
  already there, so:
    * if the tail block is shared (refcount > 1) and not full (len % bs != 0),
      it is copied first: a new block is allocated (LIFO, as in chapter 3), the
      copy (src, dst) is recorded, the old block loses this owner and the new
      one (refcount 1) takes its place in the list;
    * a full shared tail is never copied: the next token starts a new block;
    * then new blocks are allocated as in chapter 3, only once the tail is full.
  The free blocks are checked first for the total (the copy plus the new
  blocks): OutOfBlocks changes nothing and records no copy.
- release(seq): every block of seq, in list order, loses one owner; a block
  whose count reaches 0 goes back to the free list at that moment (so the
  free list sees them in list order, as in chapter 3).
- take_copies(): the (src, dst) pairs recorded since the last call, in order.
  The engine must copy each src block to its dst, in every layer, for K and V
  (copy_blocks), before the next kernel reads or writes them. Taken after
  every op, a batch holds at most one pair; a batch taken less often is still
  correct when applied in order.

Invariants (tests/test_cow.py checks them over thousands of random ops):
refcount(b) is the number of live sequences whose list holds b; a block is
allocated exactly when its count is > 0; every slot append_slots returns lies
in a block of count 1, so a write never reaches another sequence's tokens.
"""

import numpy as np

from .block_manager import BlockAllocator, OutOfBlocks
from .paged import blocks_for


class SharedBlockManager:
    """Sequences (int ids), their lengths and block lists, with shared blocks."""

    def __init__(self, num_blocks, block_size):
        if block_size <= 0:
            raise ValueError(f"block_size must be > 0, got {block_size}")
        self.block_size = block_size
        self.allocator = BlockAllocator(num_blocks)
        self._refcount = [0] * num_blocks
        self._blocks = {}   # seq id -> its block ids, in token order
        self._lengths = {}  # seq id -> tokens written so far
        self._copies = []   # (src, dst) pairs not yet taken

    # ------------------------------------------------------------ queries

    def _check_known(self, seq):
        if seq not in self._blocks:
            raise KeyError(f"unknown sequence {seq}")

    def sequences(self):
        """The live sequence ids, in ascending order."""
        return sorted(self._blocks)

    def block_list(self, seq):
        self._check_known(seq)
        return list(self._blocks[seq])

    def length(self, seq):
        self._check_known(seq)
        return self._lengths[seq]

    @property
    def num_free(self):
        return self.allocator.num_free

    @property
    def num_used(self):
        """Blocks with at least one owner (each counted once, however shared)."""
        return sum(count > 0 for count in self._refcount)

    def refcount(self, block):
        if not 0 <= block < self.allocator.num_blocks:
            raise ValueError(f"block id {block} is out of range [0, {self.allocator.num_blocks})")
        return self._refcount[block]

    def slot(self, seq, position):
        """Where token `position` of seq lives: block * block_size + offset."""
        block, offset = divmod(position, self.block_size)
        return self._blocks[seq][block] * self.block_size + offset

    # ------------------------------------------------------------ ops

    def _allocate(self):
        block = self.allocator.allocate()
        self._refcount[block] = 1
        return block

    def _drop(self, block):
        """Remove one owner of block; free it when none is left."""
        self._refcount[block] -= 1
        assert self._refcount[block] >= 0, block
        if self._refcount[block] == 0:
            self.allocator.free(block)

    def add_sequence(self, seq):
        """Start an empty sequence: no tokens, no blocks."""
        if seq in self._blocks:
            raise ValueError(f"sequence {seq} already exists")
        self._blocks[seq] = []
        self._lengths[seq] = 0

    def fork(self, parent, child):
        """child starts as a copy of parent that shares all of parent's blocks."""
        self._check_known(parent)
        if child in self._blocks:
            raise ValueError(f"sequence {child} already exists")
        self._blocks[child] = list(self._blocks[parent])
        self._lengths[child] = self._lengths[parent]
        for block in self._blocks[child]:
            self._refcount[block] += 1

    def needs_copy(self, seq, n):
        """Whether appending n tokens to seq must first copy its shared, partly filled tail."""
        self._check_known(seq)
        blocks, length = self._blocks[seq], self._lengths[seq]
        return n > 0 and length % self.block_size != 0 and self._refcount[blocks[-1]] > 1

    def new_blocks_needed(self, seq, n):
        """Blocks (beyond a copy of the tail) that appending n tokens to seq allocates."""
        self._check_known(seq)
        if n < 0:
            raise ValueError(f"cannot append {n} tokens")
        return blocks_for(self._lengths[seq] + n, self.block_size) - len(self._blocks[seq])

    def append_slots(self, seq, n):
        """Grow seq by n tokens; return the slots of positions len .. len+n-1.

        Copies a shared, partly filled tail first (recording the copy), then
        allocates new blocks. Raises OutOfBlocks, changing nothing, when the
        free blocks do not cover both.
        """
        copy = self.needs_copy(seq, n)
        needed = int(copy) + self.new_blocks_needed(seq, n)
        if needed > self.allocator.num_free:
            raise OutOfBlocks(f"sequence {seq} needs {needed} blocks "
                              f"({int(copy)} for copy-on-write), {self.allocator.num_free} are free")
        blocks = self._blocks[seq]
        if copy:
            src = blocks[-1]
            dst = self._allocate()
            self._copies.append((src, dst))
            self._drop(src)  # still owned by someone else: count > 0, never freed here
            blocks[-1] = dst
        while len(blocks) < blocks_for(self._lengths[seq] + n, self.block_size):
            blocks.append(self._allocate())
        start = self._lengths[seq]
        self._lengths[seq] = start + n
        return [self.slot(seq, p) for p in range(start, start + n)]

    def release(self, seq):
        """Drop seq's ownership of its blocks in list order and forget seq."""
        self._check_known(seq)
        for block in self._blocks.pop(seq):
            self._drop(block)
        del self._lengths[seq]

    def take_copies(self):
        """The (src, dst) copies recorded since the last call, oldest first."""
        copies, self._copies = self._copies, []
        return copies


def copy_blocks(k_pools, v_pools, pairs):
    """Copy block src to block dst, for every (src, dst) pair, in every layer, K and V.

    k_pools [L, num_blocks, ...] and v_pools [L, num_blocks, ...] are modified
    in place and returned. The whole block moves, unused slots included. The
    pairs are applied in order; a GPU kernel runs them in parallel, which gives
    the same result when the dsts are distinct and no dst is also a src.
    """
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    num_blocks = k_pools.shape[1]
    if v_pools.shape[:2] != k_pools.shape[:2]:
        raise ValueError(f"k_pools {k_pools.shape} and v_pools {v_pools.shape} disagree")
    if pairs.size and (pairs.min() < 0 or pairs.max() >= num_blocks):
        raise ValueError(f"a block id in pairs is out of range [0, {num_blocks})")
    for src, dst in pairs:
        k_pools[:, dst] = k_pools[:, src]
        v_pools[:, dst] = v_pools[:, src]
    return k_pools, v_pools
