"""The host-side block manager: which physical blocks each sequence owns.

This is the reference model of chapter 3. The C++ block manager must hand out
IDENTICAL block ids, so the allocation policy below is part of the spec:

- the free list is a LIFO stack that starts with block 0 on top, so a fresh
  allocator returns 0, 1, 2, ... and a freed block is the next one reused;
- a sequence gets a new block only when its last block is full;
- releasing a sequence frees its blocks in list order, first block first
  (so its last block is reused first);
- a request that cannot be met raises and changes nothing.
"""

import numpy as np

from .paged import blocks_for


class OutOfBlocks(RuntimeError):
    """No free block is left: a server would preempt a sequence or wait."""


class BlockAllocator:
    """Hands out block ids 0 .. num_blocks-1 from a LIFO free list."""

    def __init__(self, num_blocks):
        if num_blocks < 0:
            raise ValueError(f"num_blocks must be >= 0, got {num_blocks}")
        self.num_blocks = num_blocks
        # The end of the list is the top of the stack: block 0 is popped first.
        self._free = list(range(num_blocks - 1, -1, -1))
        self._allocated = [False] * num_blocks
        self.high_water = 0  # the most blocks ever in use at once

    @property
    def num_free(self):
        return len(self._free)

    @property
    def num_used(self):
        return self.num_blocks - self.num_free

    def is_allocated(self, block):
        return 0 <= block < self.num_blocks and self._allocated[block]

    def allocate(self):
        """Pop the block on top of the free list."""
        if not self._free:
            raise OutOfBlocks(f"all {self.num_blocks} blocks are in use")
        block = self._free.pop()
        self._allocated[block] = True
        self.high_water = max(self.high_water, self.num_used)
        return block

    def free(self, block):
        """Push `block` back: the next allocate() returns it."""
        if not 0 <= block < self.num_blocks:
            raise ValueError(f"block id {block} is out of range [0, {self.num_blocks})")
        if not self._allocated[block]:
            raise ValueError(f"block {block} is not allocated (double free?)")
        self._allocated[block] = False
        self._free.append(block)


class BlockManager:
    """Sequences (keyed by an int id), their lengths and their block lists."""

    def __init__(self, num_blocks, block_size):
        if block_size <= 0:
            raise ValueError(f"block_size must be > 0, got {block_size}")
        self.block_size = block_size
        self.allocator = BlockAllocator(num_blocks)
        self._blocks = {}   # seq id -> its block ids, in token order
        self._lengths = {}  # seq id -> tokens written so far

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

    def add_sequence(self, seq):
        """Start an empty sequence: no tokens, no blocks."""
        if seq in self._blocks:
            raise ValueError(f"sequence {seq} already exists")
        self._blocks[seq] = []
        self._lengths[seq] = 0

    def new_blocks_needed(self, seq, n):
        """Blocks that appending n tokens to seq would allocate."""
        self._check_known(seq)
        if n < 0:
            raise ValueError(f"cannot append {n} tokens")
        return blocks_for(self._lengths[seq] + n, self.block_size) - len(self._blocks[seq])

    def slot(self, seq, position):
        """Where token `position` of seq lives: block * block_size + offset."""
        block, offset = divmod(position, self.block_size)
        return self._blocks[seq][block] * self.block_size + offset

    def append_slots(self, seq, n):
        """Grow seq by n tokens; return the slots of positions len .. len+n-1.

        Checks first, allocates after: when the free blocks do not suffice it
        raises OutOfBlocks and changes nothing.
        """
        needed = self.new_blocks_needed(seq, n)
        if needed > self.allocator.num_free:
            raise OutOfBlocks(f"sequence {seq} needs {needed} new blocks, "
                              f"{self.allocator.num_free} are free")
        for _ in range(needed):
            self._blocks[seq].append(self.allocator.allocate())
        start = self._lengths[seq]
        self._lengths[seq] = start + n
        return [self.slot(seq, p) for p in range(start, start + n)]

    def release(self, seq):
        """Free seq's blocks in list order (first block first) and forget seq."""
        self._check_known(seq)
        for block in self._blocks.pop(seq):
            self.allocator.free(block)
        del self._lengths[seq]


def build_batch(manager, seq_ids, new_tokens, max_blocks_per_seq=0):
    """Append new_tokens[i] tokens to seq_ids[i], in order, and describe the batch.

    Returns a dict of the kernel's metadata:
    - block_table  int32 [B, M]: each sequence's blocks, padded with -1;
    - context_lens int32 [B]: lengths after the append;
    - slot_mapping int64 [sum(new_tokens)]: the new tokens' slots, in batch order.
    M is max_blocks_per_seq when > 0, else the longest block list (at least 1).

    Everything is validated before anything is appended, so a failing call
    (ValueError for a bad request or a table too small, OutOfBlocks when the
    pool is short) changes nothing.
    """
    seq_ids, new_tokens = [int(s) for s in seq_ids], [int(n) for n in new_tokens]
    if len(seq_ids) != len(new_tokens) or len(set(seq_ids)) != len(seq_ids):
        raise ValueError("seq_ids must be distinct and as many as new_tokens")
    if max_blocks_per_seq < 0:
        raise ValueError(f"max_blocks_per_seq must be >= 0, got {max_blocks_per_seq}")
    new_blocks = [manager.new_blocks_needed(s, n) for s, n in zip(seq_ids, new_tokens)]
    total_blocks = [len(manager.block_list(s)) + k for s, k in zip(seq_ids, new_blocks)]
    width = max_blocks_per_seq if max_blocks_per_seq > 0 else max(total_blocks + [1])
    for seq, count in zip(seq_ids, total_blocks):
        if count > width:
            raise ValueError(f"sequence {seq} needs {count} blocks, beyond the table's "
                             f"capacity of {width} (max_blocks_per_seq)")
    if sum(new_blocks) > manager.allocator.num_free:
        raise OutOfBlocks(f"the batch needs {sum(new_blocks)} new blocks, "
                          f"{manager.allocator.num_free} are free")

    block_table = np.full((len(seq_ids), width), -1, dtype=np.int32)
    context_lens = np.zeros(len(seq_ids), dtype=np.int32)
    slots = []
    for b, (seq, n) in enumerate(zip(seq_ids, new_tokens)):
        slots += manager.append_slots(seq, n)
        blocks = manager.block_list(seq)
        block_table[b, :len(blocks)] = blocks
        context_lens[b] = manager.length(seq)
    return {
        "block_table": block_table,
        "context_lens": context_lens,
        "slot_mapping": np.array(slots, dtype=np.int64),
    }
