"""Paged KV storage: where each token's K and V live in a pool of blocks.

A pool holds num_blocks blocks of block_size tokens each, for every KV head.
A token's place is its *slot*: slot = block * block_size + offset. The layouts
are vLLM's, with x = 16 bytes // itemsize elements per 16-byte chunk:

    k_pool: [num_blocks, num_kv_heads, head_size // x, block_size, x]
    v_pool: [num_blocks, num_kv_heads, head_size, block_size]

Nothing here rounds: writing to and reading from a pool only moves values.
"""

import numpy as np

# Bytes per element of each storage format that a pool can hold.
_ITEMSIZE = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}


def pack_x(dtype_name):
    """Elements of dtype_name in one 16-byte chunk of K: 16 for fp8, 8 for fp16/bf16, 4 for fp32."""
    if dtype_name not in _ITEMSIZE:
        raise ValueError(f"unknown dtype {dtype_name!r}; expected one of {sorted(_ITEMSIZE)}")
    return 16 // _ITEMSIZE[dtype_name]


def k_pool_index(block, head, d, slot, num_kv_heads, head_size, block_size, x):
    """Flat index of K element (block, head, d) at offset `slot` of the block.

    Element d sits in chunk d // x at lane d % x; a chunk holds x consecutive
    elements of one token, and the block's tokens follow each other chunk by chunk.
    """
    chunk, lane = divmod(d, x)
    return (((block * num_kv_heads + head) * (head_size // x) + chunk) * block_size + slot) * x + lane


def v_pool_index(block, head, d, slot, num_kv_heads, head_size, block_size):
    """Flat index of V element (block, head, d) at offset `slot`: tokens are innermost."""
    return ((block * num_kv_heads + head) * head_size + d) * block_size + slot


def pool_dims(k_pool, v_pool):
    """Check that two pools have matching layouts; return (num_blocks, Hkv, D, block_size, x)."""
    if k_pool.ndim != 5 or v_pool.ndim != 4:
        raise ValueError(f"k_pool must be 5-d and v_pool 4-d, got {k_pool.shape} and {v_pool.shape}")
    num_blocks, num_kv_heads, chunks, block_size, x = k_pool.shape
    head_size = chunks * x
    if v_pool.shape != (num_blocks, num_kv_heads, head_size, block_size):
        raise ValueError(f"v_pool {v_pool.shape} does not match k_pool {k_pool.shape}")
    return num_blocks, num_kv_heads, head_size, block_size, x


def check_slot_mapping(slot_mapping, num_tokens, num_slots):
    """slot_mapping as int64 [num_tokens], checked against a pool of num_slots slots: every
    slot is < num_slots (a negative one is padding), and no two tokens share a slot (on a
    GPU the winner would be a race). Raises ValueError otherwise."""
    slot_mapping = np.asarray(slot_mapping, dtype=np.int64)
    if slot_mapping.shape != (num_tokens,):
        raise ValueError(f"slot_mapping must be [{num_tokens}], got {slot_mapping.shape}")
    real = slot_mapping[slot_mapping >= 0]
    if np.any(real >= num_slots):
        raise ValueError(f"a slot is beyond the pool's {num_slots} slots")
    if np.unique(real).size != real.size:
        raise ValueError("two tokens are mapped to the same slot")
    return slot_mapping


def reshape_and_cache(k, v, k_pool, v_pool, slot_mapping):
    """Write token i's K and V, k[i] and v[i] ([Hkv, D] each), into slot slot_mapping[i].

    Slot s goes to block s // block_size at offset s % block_size; s < 0 marks a
    padding token, which is skipped. The pools are modified in place and returned.
    Two tokens may not share a slot (on a GPU the winner would be a race).
    """
    k, v = np.asarray(k), np.asarray(v)
    num_blocks, num_kv_heads, head_size, block_size, x = pool_dims(k_pool, v_pool)
    if k.shape != v.shape or k.shape[1:] != (num_kv_heads, head_size):
        raise ValueError(f"k and v must be [T, {num_kv_heads}, {head_size}], got {k.shape}, {v.shape}")
    slot_mapping = check_slot_mapping(slot_mapping, k.shape[0], num_blocks * block_size)

    for i, slot in enumerate(slot_mapping):
        if slot < 0:
            continue
        block, offset = divmod(int(slot), block_size)
        # K: split D into D // x chunks of x; the offset is the second-to-last axis.
        k_pool[block, :, :, offset, :] = k[i].reshape(num_kv_heads, head_size // x, x)
        v_pool[block, :, :, offset] = v[i]
    return k_pool, v_pool


def k_block_tokens(k_pool, block):
    """Block `block` of a K pool as [block_size, Hkv, D]: one row per token."""
    _, num_kv_heads, chunks, block_size, x = k_pool.shape
    # [Hkv, D//x, bs, x] -> [bs, Hkv, D//x, x] -> [bs, Hkv, D]
    return k_pool[block].transpose(2, 0, 1, 3).reshape(block_size, num_kv_heads, chunks * x)


def v_block_tokens(v_pool, block):
    """Block `block` of a V pool as [block_size, Hkv, D]: one row per token."""
    return v_pool[block].transpose(2, 0, 1)


def blocks_for(num_tokens, block_size):
    """Blocks needed to hold num_tokens tokens: ceil(num_tokens / block_size)."""
    return -(-num_tokens // block_size)


def token_slot(block_list, position, block_size):
    """The slot of token `position` of a sequence whose blocks are block_list (in order):
    logical block position // block_size is physical block block_list[that], at offset
    position % block_size; slot = physical block * block_size + offset."""
    logical, offset = divmod(position, block_size)
    return block_list[logical] * block_size + offset


def paged_gather(k_pool, v_pool, block_table, context_lens, max_seq_len):
    """Copy each sequence's tokens out of the pools into a dense cache.

    block_table [B, M] lists sequence b's blocks in order; context_lens [B] its
    lengths. Token t of sequence b is at block block_table[b, t // block_size],
    offset t % block_size. Returns (k_dense, v_dense), float64
    [B, max_seq_len, Hkv, D], NaN at every position t >= context_lens[b].

    Only the first ceil(context_lens[b] / block_size) entries of a row are read:
    the rest are padding, whatever value (-1 or garbage) they hold.
    """
    block_table = np.asarray(block_table)
    context_lens = np.asarray(context_lens)
    num_blocks, num_kv_heads, head_size, block_size, _ = pool_dims(k_pool, v_pool)
    if block_table.ndim != 2 or context_lens.shape != (block_table.shape[0],):
        raise ValueError(f"block_table must be [B, M] and context_lens [B], got "
                         f"{block_table.shape} and {context_lens.shape}")
    batch, max_blocks = block_table.shape

    shape = (batch, max_seq_len, num_kv_heads, head_size)
    k_dense, v_dense = np.full(shape, np.nan), np.full(shape, np.nan)
    for b in range(batch):
        n = int(context_lens[b])
        if not 0 <= n <= max_seq_len or blocks_for(n, block_size) > max_blocks:
            raise ValueError(f"sequence {b}: context_len {n} is beyond the capacity "
                             f"(max_seq_len {max_seq_len}, {max_blocks} blocks of {block_size})")
        for j in range(blocks_for(n, block_size)):
            block = int(block_table[b, j])
            if not 0 <= block < num_blocks:
                raise ValueError(f"sequence {b}: block id {block} is out of range [0, {num_blocks})")
            # The last block may be partly filled: copy only its first `count` tokens.
            start = j * block_size
            count = min(block_size, n - start)
            k_dense[b, start:start + count] = k_block_tokens(k_pool, block)[:count]
            v_dense[b, start:start + count] = v_block_tokens(v_pool, block)[:count]
    return k_dense, v_dense
