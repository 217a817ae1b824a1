"""Paged pools: the layouts, the write (reshape_and_cache) and the read (paged_gather)."""

import numpy as np
import pytest

from pa_ref import (
    decode_attention,
    k_pool_index,
    pack_x,
    paged_gather,
    reshape_and_cache,
    v_pool_index,
)
from pa_ref.paged import blocks_for


def nan_pools(num_blocks, num_kv_heads, head_size, block_size, x):
    k_pool = np.full((num_blocks, num_kv_heads, head_size // x, block_size, x), np.nan)
    v_pool = np.full((num_blocks, num_kv_heads, head_size, block_size), np.nan)
    return k_pool, v_pool


def test_pack_x():
    assert (pack_x("fp16"), pack_x("bf16"), pack_x("fp32")) == (8, 8, 4)
    with pytest.raises(ValueError):
        pack_x("int8")


@pytest.mark.parametrize("x", [4, 8])
def test_index_functions_cover_the_pool_once(x):
    num_blocks, hkv, d, bs = 3, 2, 16, 4
    ks, vs = set(), set()
    for b in range(num_blocks):
        for h in range(hkv):
            for i in range(d):
                for s in range(bs):
                    ks.add(k_pool_index(b, h, i, s, hkv, d, bs, x))
                    vs.add(v_pool_index(b, h, i, s, hkv, d, bs))
    assert ks == vs == set(range(num_blocks * hkv * d * bs))


def test_consecutive_k_elements_of_a_token_share_a_16_byte_chunk():
    # fp16: elements 0..7 of one token are 8 adjacent values; element 8 starts a new chunk.
    first = k_pool_index(0, 0, 0, 5, 1, 64, 16, 8)
    assert [k_pool_index(0, 0, d, 5, 1, 64, 16, 8) - first for d in range(8)] == list(range(8))
    assert k_pool_index(0, 0, 8, 5, 1, 64, 16, 8) - first == 16 * 8


@pytest.mark.parametrize("num_kv_heads, head_size, block_size, x",
                         [(2, 16, 4, 8), (1, 24, 8, 4), (3, 80, 16, 8)])
def test_reshape_and_cache_matches_the_index_functions(num_kv_heads, head_size, block_size, x):
    rng = np.random.default_rng(0)
    num_blocks, num_tokens = 5, 9
    k = rng.standard_normal((num_tokens, num_kv_heads, head_size))
    v = rng.standard_normal((num_tokens, num_kv_heads, head_size))
    slots = rng.choice(num_blocks * block_size, num_tokens, replace=False)
    slots[[2, 6]] = -1  # padding
    k_pool, v_pool = reshape_and_cache(k, v, *nan_pools(num_blocks, num_kv_heads, head_size,
                                                        block_size, x), slots)
    k_flat, v_flat = k_pool.reshape(-1), v_pool.reshape(-1)
    written = set()
    for i, slot in enumerate(slots):
        if slot < 0:
            continue
        block, offset = divmod(slot, block_size)
        for h in range(num_kv_heads):
            for d in range(head_size):
                ki = k_pool_index(block, h, d, offset, num_kv_heads, head_size, block_size, x)
                vi = v_pool_index(block, h, d, offset, num_kv_heads, head_size, block_size)
                assert k_flat[ki] == k[i, h, d] and v_flat[vi] == v[i, h, d]
                written.add(vi)
    # Nothing else was written: padding tokens went nowhere.
    assert np.isnan(v_flat).sum() == v_flat.size - len(written)
    assert np.isnan(k_flat).sum() == k_flat.size - len(written)


def test_reshape_and_cache_rejects_bad_slots():
    k = np.zeros((2, 1, 8))
    pools = nan_pools(2, 1, 8, 4, 4)
    with pytest.raises(ValueError, match="beyond"):
        reshape_and_cache(k, k, *pools, [0, 8])  # the pool has 8 slots
    with pytest.raises(ValueError, match="same slot"):
        reshape_and_cache(k, k, *pools, [3, 3])
    with pytest.raises(ValueError):
        reshape_and_cache(k, k, *pools, [3])  # one slot for two tokens
    with pytest.raises(ValueError):
        reshape_and_cache(np.zeros((2, 1, 4)), np.zeros((2, 1, 4)), *pools, [0, 1])


def paged_copy_of(rng, k_dense, v_dense, context_lens, block_size, x, num_blocks):
    """Write a dense cache's valid tokens into pools, in randomly permuted blocks.

    Returns (k_pool, v_pool, block_table) with -1 padding in the table.
    """
    batch, max_seq_len, num_kv_heads, head_size = k_dense.shape
    width = blocks_for(max_seq_len, block_size)
    ids = iter(rng.permutation(num_blocks))
    block_table = np.full((batch, width), -1, dtype=np.int32)
    tokens_k, tokens_v, slots = [], [], []
    for b, n in enumerate(context_lens):
        count = blocks_for(n, block_size)
        block_table[b, :count] = [next(ids) for _ in range(count)]
        for t in range(n):
            tokens_k.append(k_dense[b, t])
            tokens_v.append(v_dense[b, t])
            slots.append(block_table[b, t // block_size] * block_size + t % block_size)
    pools = nan_pools(num_blocks, num_kv_heads, head_size, block_size, x)
    k_pool, v_pool = reshape_and_cache(np.array(tokens_k), np.array(tokens_v), *pools, slots)
    return k_pool, v_pool, block_table


def random_dense(rng, batch, max_seq_len, num_kv_heads, head_size, context_lens):
    shape = (batch, max_seq_len, num_kv_heads, head_size)
    k, v = rng.standard_normal(shape), rng.standard_normal(shape)
    for b, n in enumerate(context_lens):
        k[b, n:] = v[b, n:] = np.nan
    return k, v


@pytest.mark.parametrize("block_size, x", [(8, 8), (16, 4), (32, 8)])
def test_gather_of_a_paged_copy_is_the_dense_cache(block_size, x):
    rng = np.random.default_rng(block_size)
    lens = [0, 1, block_size - 1, block_size, block_size + 1, 3 * block_size]
    max_seq_len = 3 * block_size
    k, v = random_dense(rng, len(lens), max_seq_len, 2, 16, lens)
    k_pool, v_pool, table = paged_copy_of(rng, k, v, lens, block_size, x, num_blocks=20)
    k_got, v_got = paged_gather(k_pool, v_pool, table, lens, max_seq_len)
    np.testing.assert_array_equal(k_got, k)  # NaN == NaN here: positions >= n too
    np.testing.assert_array_equal(v_got, v)


def test_paged_gather_then_dense_attention_equals_dense_attention():
    rng = np.random.default_rng(7)
    lens = np.array([37, 16, 0, 64])
    k, v = random_dense(rng, 4, 64, 2, 32, lens)
    q = rng.standard_normal((4, 8, 32))
    k_pool, v_pool, table = paged_copy_of(rng, k, v, lens, 16, 8, num_blocks=16)
    k_got, v_got = paged_gather(k_pool, v_pool, table, lens, 64)
    scale = 1 / np.sqrt(32)
    np.testing.assert_array_equal(decode_attention(q, k_got, v_got, lens, scale),
                                  decode_attention(q, k, v, lens, scale))


def test_a_block_permutation_changes_nothing_but_the_pool():
    rng = np.random.default_rng(3)
    lens = [20, 33]
    k, v = random_dense(rng, 2, 48, 1, 8, lens)
    first = paged_copy_of(rng, k, v, lens, 8, 4, num_blocks=12)
    second = paged_copy_of(rng, k, v, lens, 8, 4, num_blocks=12)
    assert not np.array_equal(first[2], second[2])
    np.testing.assert_array_equal(paged_gather(*first, lens, 48)[0], paged_gather(*second, lens, 48)[0])


class ReadLog(np.ndarray):
    """A pool that records which blocks are read (the first index of every read)."""

    def __getitem__(self, key):
        self.log.append(key[0] if isinstance(key, tuple) else key)
        return np.asarray(self)[key]


def logged(pool):
    pool = pool.view(ReadLog)
    pool.log = []
    return pool


@pytest.mark.parametrize("padding", [-1, 10**6])
def test_padding_entries_are_never_read(padding):
    rng = np.random.default_rng(11)
    lens = [9, 0, 16]
    k, v = random_dense(rng, 3, 32, 2, 8, lens)
    k_pool, v_pool, table = paged_copy_of(rng, k, v, lens, 8, 4, num_blocks=8)
    table[table == -1] = padding
    k_pool, v_pool = logged(k_pool), logged(v_pool)
    k_got, _ = paged_gather(k_pool, v_pool, table, lens, 32)
    np.testing.assert_array_equal(k_got, k)
    owned = {int(b) for row, n in zip(table, lens) for b in row[:blocks_for(n, 8)]}
    assert {int(b) for b in k_pool.log} == owned == {int(b) for b in v_pool.log}


def test_gather_rejects_bad_tables():
    k_pool, v_pool = nan_pools(4, 1, 8, 4, 4)
    with pytest.raises(ValueError, match="capacity"):
        paged_gather(k_pool, v_pool, [[0, 1]], [9], 12)  # 9 tokens need 3 blocks
    with pytest.raises(ValueError, match="capacity"):
        paged_gather(k_pool, v_pool, [[0, 1, 2]], [9], 8)  # beyond max_seq_len
    with pytest.raises(ValueError, match="out of range"):
        paged_gather(k_pool, v_pool, [[0, 4]], [5], 8)  # block 4 of a 4-block pool
    with pytest.raises(ValueError, match="out of range"):
        paged_gather(k_pool, v_pool, [[0, -1]], [5], 8)  # -1 where a block is needed
