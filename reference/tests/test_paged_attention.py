"""Paged decode attention (v1) and its partitioned form (v2): the properties kernels rely on."""

import numpy as np
import pytest

from pa_ref import decode_attention, reshape_and_cache
from pa_ref.paged import blocks_for
from pa_ref.paged_attention import (
    decode_partitions,
    merge_partitions,
    paged_decode_attention,
    partitioned_decode_attention,
)


def paged_inputs(seed, lens, num_heads=4, num_kv_heads=2, head_size=16, block_size=8, x=8,
                 spare_blocks=5, spare_width=1):
    """A dense cache of N(0,1) values and the same tokens in permuted, NaN-poisoned pools.

    Returns q, k_dense, v_dense ([B, L, Hkv, D], NaN past each length), k_pool,
    v_pool, block_table (-1 padding) and the ids of the blocks no sequence owns.
    """
    rng = np.random.default_rng(seed)
    batch, max_len = len(lens), max(max(lens), 1)
    q = rng.standard_normal((batch, num_heads, head_size))
    shape = (batch, max_len, num_kv_heads, head_size)
    k_dense, v_dense = rng.standard_normal(shape), rng.standard_normal(shape)
    for b, n in enumerate(lens):
        k_dense[b, n:] = v_dense[b, n:] = np.nan

    needed = [blocks_for(n, block_size) for n in lens]
    num_blocks = sum(needed) + spare_blocks
    ids = iter(rng.permutation(num_blocks))
    table = np.full((batch, max(needed) + spare_width), -1, dtype=np.int32)
    slots, k_tokens, v_tokens = [], [], []
    for b, n in enumerate(lens):
        table[b, :needed[b]] = [next(ids) for _ in range(needed[b])]
        for t in range(n):
            slots.append(table[b, t // block_size] * block_size + t % block_size)
            k_tokens.append(k_dense[b, t])
            v_tokens.append(v_dense[b, t])
    k_pool = np.full((num_blocks, num_kv_heads, head_size // x, block_size, x), np.nan)
    v_pool = np.full((num_blocks, num_kv_heads, head_size, block_size), np.nan)
    if slots:
        reshape_and_cache(np.array(k_tokens), np.array(v_tokens), k_pool, v_pool, slots)
    unowned = sorted(set(range(num_blocks)) - set(table[table >= 0].tolist()))
    return q, k_dense, v_dense, k_pool, v_pool, table, unowned


@pytest.mark.parametrize("block_size, x", [(8, 8), (16, 4), (32, 8)])
def test_paged_equals_dense_attention(block_size, x):
    lens = [0, 1, block_size - 1, block_size, block_size + 1, 3 * block_size + 5]
    q, k, v, k_pool, v_pool, table, _ = paged_inputs(block_size, lens, block_size=block_size, x=x)
    scale = 0.25
    got = paged_decode_attention(q, k_pool, v_pool, table, lens, scale, block_size)
    np.testing.assert_array_equal(got, decode_attention(q, k, v, np.array(lens), scale))
    assert np.isfinite(got).all() and (got[0] == 0).all()


def test_block_size_must_match_the_pools():
    q, _, _, k_pool, v_pool, table, _ = paged_inputs(1, [5])
    with pytest.raises(ValueError, match="block_size"):
        paged_decode_attention(q, k_pool, v_pool, table, [5], 1.0, 16)


def permute_blocks(rng, k_pool, v_pool, table):
    """Move block i to perm[i] and rewrite the table to match: the same cache, stored elsewhere."""
    perm = rng.permutation(k_pool.shape[0])
    new_k, new_v = np.empty_like(k_pool), np.empty_like(v_pool)
    new_k[perm], new_v[perm] = k_pool, v_pool
    new_table = np.where(table >= 0, perm[np.maximum(table, 0)], -1).astype(np.int32)
    return new_k, new_v, new_table


def test_a_block_permutation_leaves_the_output_unchanged():
    rng = np.random.default_rng(5)
    lens = [37, 0, 64, 9]
    q, _, _, k_pool, v_pool, table, _ = paged_inputs(5, lens, block_size=8, spare_blocks=12)
    before = paged_decode_attention(q, k_pool, v_pool, table, lens, 0.3, 8)
    new_k, new_v, new_table = permute_blocks(rng, k_pool, v_pool, table)
    assert not np.array_equal(new_table, table)
    after = paged_decode_attention(q, new_k, new_v, new_table, lens, 0.3, 8)
    np.testing.assert_array_equal(after, before)


def test_nan_in_padding_unowned_and_unused_slots_does_not_leak():
    lens = [13, 8, 1, 0]  # 13 and 1 leave unused slots in their last block
    q, k, v, k_pool, v_pool, table, unowned = paged_inputs(9, lens, block_size=8, spare_width=2)
    assert unowned and np.isnan(k_pool[unowned]).all() and np.isnan(v_pool[unowned]).all()
    assert np.isnan(k_pool).any()  # unused slots of the partial blocks too
    expected = paged_decode_attention(q, k_pool, v_pool, table, lens, 0.5, 8)
    assert np.isfinite(expected).all()
    # Padding entries may point at a real all-NaN block: they are still never read.
    padded = np.where(table < 0, unowned[0], table)
    np.testing.assert_array_equal(
        paged_decode_attention(q, k_pool, v_pool, padded, lens, 0.5, 8), expected)
    # Any value in a slot no token owns changes nothing: it is never read.
    k_big = np.where(np.isnan(k_pool), 1e30, k_pool)
    v_big = np.where(np.isnan(v_pool), -1e30, v_pool)
    np.testing.assert_array_equal(
        paged_decode_attention(q, k_big, v_big, padded, lens, 0.5, 8), expected)
    # ... while a NaN in one owned slot does reach that sequence's output.
    k_pool[table[0, 1], 0, 0, 4, 0] = np.nan  # token 12 of sequence 0, KV head 0
    leaked = paged_decode_attention(q, k_pool, v_pool, table, lens, 0.5, 8)
    assert np.isnan(leaked[0, :2]).all() and np.isfinite(leaked[0, 2:]).all()
    assert np.isfinite(leaked[1:]).all()


def test_gqa_query_head_h_reads_kv_head_h_div_group():
    lens = [20, 7]
    q, _, _, k_pool, v_pool, table, _ = paged_inputs(13, lens, num_heads=8, num_kv_heads=2)
    out = paged_decode_attention(q, k_pool, v_pool, table, lens, 0.4, 8)
    for g in range(2):
        # Query heads 4g .. 4g + 3 with KV head g alone (a pool of one KV head).
        alone = paged_decode_attention(q[:, 4 * g:4 * g + 4], k_pool[:, g:g + 1],
                                       v_pool[:, g:g + 1], table, lens, 0.4, 8)
        np.testing.assert_allclose(out[:, 4 * g:4 * g + 4], alone, rtol=1e-13, atol=1e-13)
    # Changing KV head 1 changes query heads 4..7 only.
    v_changed = v_pool.copy()
    v_changed[:, 1] += 1.0
    changed = paged_decode_attention(q, k_pool, v_changed, table, lens, 0.4, 8)
    np.testing.assert_array_equal(changed[:, :4], out[:, :4])
    np.testing.assert_allclose(changed[:, 4:], out[:, 4:] + 1.0, rtol=1e-12, atol=1e-12)


def test_mqa_every_query_head_reads_the_one_kv_head():
    lens = [11]
    q, _, _, k_pool, v_pool, table, _ = paged_inputs(17, lens, num_heads=4, num_kv_heads=1)
    out = paged_decode_attention(q, k_pool, v_pool, table, lens, 0.4, 8)
    for h in range(4):
        one = paged_decode_attention(q[:, h:h + 1], k_pool, v_pool, table, lens, 0.4, 8)
        np.testing.assert_allclose(out[:, h:h + 1], one, rtol=1e-13, atol=1e-13)


# ---------------------------------------------------------------- v2: partitions and merge


@pytest.mark.parametrize("length", [1, 511, 512, 513, 1025, 2048])
def test_partitioned_equals_unpartitioned(length):
    lens = [length, 0, 3]
    q, _, _, k_pool, v_pool, table, _ = paged_inputs(length, lens, block_size=16, head_size=32)
    q *= 4.0  # larger scores: partitions' maxima differ, so the rescaling matters
    v1 = paged_decode_attention(q, k_pool, v_pool, table, lens, 0.3, 16)
    v2 = partitioned_decode_attention(q, k_pool, v_pool, table, lens, 0.3, 16)
    np.testing.assert_allclose(v2, v1, rtol=1e-12, atol=1e-12)
    assert (v2[1] == 0).all()


@pytest.mark.parametrize("partition_size", [8, 16, 40, 512, 4096])
def test_any_partition_size_gives_the_same_output(partition_size):
    lens = [300, 47, 1]
    q, _, _, k_pool, v_pool, table, _ = paged_inputs(3, lens, block_size=8)
    v1 = paged_decode_attention(q, k_pool, v_pool, table, lens, 0.3, 8)
    v2 = partitioned_decode_attention(q, k_pool, v_pool, table, lens, 0.3, 8, partition_size)
    np.testing.assert_allclose(v2, v1, rtol=1e-12, atol=1e-12)


def test_partition_contents():
    lens = [1025, 512, 0]
    q, k, v, k_pool, v_pool, table, _ = paged_inputs(21, lens, block_size=16, spare_width=0)
    m, l, o = decode_partitions(q, k_pool, v_pool, table, lens, 0.3, 16)
    assert m.shape == l.shape == (3, 4, 3) and o.shape == (3, 4, 3, 16)  # M * 16 = 1040 tokens
    # Partition 2 of sequence 0 is token 1024 alone: weight 1 on its value row.
    assert (l[0, :, 2] == 1.0).all()
    np.testing.assert_array_equal(o[0, :2, 2], v[0, 1024, [0, 0]])
    # Sequence 1 fills partition 0 exactly; its later partitions and all of
    # sequence 2's are empty: -inf, 0, 0.
    assert np.isfinite(m[1, :, 0]).all() and np.isneginf(m[1, :, 1:]).all()
    assert np.isneginf(m[2]).all() and (l[1, :, 1:] == 0).all() and (o[2] == 0).all()
    # Each partition alone is dense attention over its own tokens.
    part = decode_attention(q[:1], k[:1, 512:1024], v[:1, 512:1024], np.array([512]), 0.3)
    np.testing.assert_allclose(o[0, :, 1], part[0], rtol=1e-12, atol=1e-12)
    assert np.all(l[np.isfinite(m)] >= 1.0)  # the max term contributes exp(0) = 1


def test_one_partition_is_v1():
    lens = [100, 37]
    q, _, _, k_pool, v_pool, table, _ = paged_inputs(4, lens)
    m, l, o = decode_partitions(q, k_pool, v_pool, table, lens, 0.3, 8, partition_size=512)
    assert m.shape[-1] == 1
    # One partition: w = l, so out = l * o / l = o, the normalized output itself.
    np.testing.assert_allclose(merge_partitions(m, l, o), o[:, :, 0], rtol=1e-15, atol=1e-15)
    np.testing.assert_allclose(o[:, :, 0], paged_decode_attention(q, k_pool, v_pool, table, lens,
                                                                  0.3, 8), rtol=1e-13, atol=1e-13)


def test_merge_rescales_by_the_global_max():
    # Two partitions of one token each, scores 0 and log(3): weights 1/4 and 3/4.
    m = np.array([[[0.0, np.log(3.0)]]])
    l = np.ones((1, 1, 2))
    o = np.array([[[[1.0, 0.0], [0.0, 1.0]]]])
    np.testing.assert_allclose(merge_partitions(m, l, o), [[[0.25, 0.75]]], rtol=1e-15)
    # The merge is order-free, an empty partition weighs nothing, and huge maxima do not overflow.
    m2 = np.array([[[np.log(3.0) + 800, -np.inf, 800.0]]])
    o2 = np.array([[[[0.0, 1.0], [5.0, 5.0], [1.0, 0.0]]]])
    l2 = np.array([[[1.0, 0.0, 1.0]]])
    np.testing.assert_allclose(merge_partitions(m2, l2, o2), [[[0.25, 0.75]]], rtol=1e-13)
    # All partitions empty: zeros, not NaN.
    assert (merge_partitions(np.full((1, 2, 3), -np.inf), np.zeros((1, 2, 3)),
                             np.zeros((1, 2, 3, 4))) == 0).all()


def test_partition_size_must_be_positive():
    q, _, _, k_pool, v_pool, table, _ = paged_inputs(1, [5])
    with pytest.raises(ValueError, match="partition_size"):
        decode_partitions(q, k_pool, v_pool, table, [5], 1.0, 8, partition_size=0)
