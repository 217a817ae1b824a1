"""Chapter 12's reference: windows, sinks, soft caps, and the blocks a window still needs."""

import numpy as np
import pytest

from pa_ref import hybrid, paged
from pa_ref.prefill import paged_prefill_attention


def pools(seed, lens, block_size=8, heads=2, d=16, spare=2):
    rng = np.random.default_rng(seed)
    blocks_of = [-(-n // block_size) for n in lens]
    num_blocks = sum(blocks_of) + spare
    x = paged.pack_x("fp32")
    k_pool = np.full((num_blocks, heads, d // x, block_size, x), np.nan)
    v_pool = np.full((num_blocks, heads, d, block_size), np.nan)
    perm, at = rng.permutation(num_blocks), 0
    table = np.zeros((len(lens), max(blocks_of)), dtype=np.int64)
    for b, n in enumerate(lens):
        table[b, :blocks_of[b]] = perm[at:at + blocks_of[b]]
        at += blocks_of[b]
        slots = [table[b, p // block_size] * block_size + p % block_size for p in range(n)]
        paged.reshape_and_cache(rng.standard_normal((n, heads, d)), rng.standard_normal((n, heads, d)),
                                k_pool, v_pool, slots)
    return k_pool, v_pool, table, rng


LENS, NEW = [1, 7, 8, 9, 30], [1, 1, 3, 9, 5]


def batch(seed, heads_q=4):
    k_pool, v_pool, table, rng = pools(seed, LENS)
    qsl = np.concatenate([[0], np.cumsum(NEW)])
    q = rng.standard_normal((qsl[-1], heads_q, 16))
    return q, k_pool, v_pool, table, qsl


def test_no_window_no_sink_is_chapter_8s_prefill():
    q, k, v, t, qsl = batch(1)
    np.testing.assert_allclose(hybrid.hybrid_attention(q, k, v, t, LENS, qsl, 0.25),
                               paged_prefill_attention(q, k, v, t, LENS, qsl, 0.25), rtol=1e-12)


@pytest.mark.parametrize("window", [1, 4, 8, 9, 100])
def test_a_window_is_a_shorter_causal_prefix(window):
    q, k, v, t, qsl = batch(2)
    got = hybrid.hybrid_attention(q, k, v, t, LENS, qsl, 0.25, window=window)
    k_dense, v_dense = paged.paged_gather(k, v, t, LENS, t.shape[1] * 8)
    for b, (n, L) in enumerate(zip(NEW, LENS)):
        for i in range(n):
            pos = L - n + i
            first = max(0, pos - window + 1)
            keys = np.repeat(k_dense[b, first:pos + 1], 2, axis=1)
            vals = np.repeat(v_dense[b, first:pos + 1], 2, axis=1)
            s = 0.25 * np.einsum("hd,nhd->hn", q[qsl[b] + i], keys)
            p = np.exp(s - s.max(1, keepdims=True))
            want = np.einsum("hn,nhd->hd", p / p.sum(1, keepdims=True), vals)
            np.testing.assert_allclose(got[qsl[b] + i], want, rtol=1e-12)
    if window >= max(LENS):  # wider than every sequence: full attention
        np.testing.assert_allclose(got, hybrid.hybrid_attention(q, k, v, t, LENS, qsl, 0.25), rtol=1e-12)


def test_a_sink_only_takes_weight_away():
    q, k, v, t, qsl = batch(3)
    plain = hybrid.hybrid_attention(q, k, v, t, LENS, qsl, 0.25)
    tiny = hybrid.hybrid_attention(q, k, v, t, LENS, qsl, 0.25, sinks=np.full(4, -1e9))
    np.testing.assert_allclose(tiny, plain, rtol=1e-12)
    sinks = np.array([0.0, 1.0, -2.0, 3.0])
    got = hybrid.hybrid_attention(q, k, v, t, LENS, qsl, 0.25, sinks=sinks)
    # Sequence 0 has one token: without a sink its output is its value; with one, the value
    # times the weight left to it, 1 / (1 + e^(sink - s)).
    k_dense, v_dense = paged.paged_gather(k, v, t, LENS, t.shape[1] * 8)
    s = 0.25 * np.einsum("hd,hd->h", q[0], np.repeat(k_dense[0, 0], 2, axis=0))
    want = np.repeat(v_dense[0, 0], 2, axis=0) / (1 + np.exp(sinks - s))[:, None]
    np.testing.assert_allclose(got[0], want, rtol=1e-12)
    with pytest.raises(ValueError, match="sinks must be"):
        hybrid.hybrid_attention(q, k, v, t, LENS, qsl, 0.25, sinks=np.zeros(2))


def test_soft_cap_bends_the_scores():
    q, k, v, t, qsl = batch(4)
    wide = hybrid.hybrid_attention(q, k, v, t, LENS, qsl, 0.25, softcap=1e6)
    np.testing.assert_allclose(wide, hybrid.hybrid_attention(q, k, v, t, LENS, qsl, 0.25), rtol=1e-9)
    assert not np.allclose(hybrid.hybrid_attention(q, k, v, t, LENS, qsl, 0.25, softcap=0.5), wide)
    assert np.all(np.abs(hybrid.capped(np.array([-1e9, 0.3, 1e9]), 2.0)) <= 2.0)


def test_dead_blocks_may_hold_anything():
    q, k, v, t, qsl = batch(5)
    window = 4
    want = hybrid.hybrid_attention(q, k, v, t, LENS, qsl, 0.25, window=window)
    null = k.shape[0] - 1  # a spare block, NaN-filled
    t2 = t.copy()
    for b, (n, L) in enumerate(zip(NEW, LENS)):
        t2[b, :hybrid.first_needed_block(L - n, window, 8)] = null
    np.testing.assert_allclose(hybrid.hybrid_attention(q, k, v, t2, LENS, qsl, 0.25, window=window), want,
                               rtol=1e-12)


@pytest.mark.parametrize("block_size", [8, 16, 32])
def test_first_needed_block_at_the_edges(block_size):
    w = 2 * block_size
    assert hybrid.first_needed_block(0, w, block_size) == 0
    assert hybrid.first_needed_block(w - 1, w, block_size) == 0               # sees position 0
    assert hybrid.first_needed_block(w + block_size - 2, w, block_size) == 0  # sees position bs - 1
    assert hybrid.first_needed_block(w + block_size - 1, w, block_size) == 1  # block 0 now dead
    assert hybrid.first_needed_block(10_000, None, block_size) == 0           # full layer
    assert hybrid.first_needed_block(w + block_size - 1, w + 1, block_size) == 0  # edge inside a block
    with pytest.raises(ValueError, match="window must be positive"):
        hybrid.visible_range(5, 0)


def test_gemma3_like_saving_at_32k():
    # 5 sliding layers of 1,024 per full one, 32K tokens, blocks of 16.
    pattern = [1024] * 5 + [None]
    full = hybrid.hybrid_kv_blocks(32768, 16, [None] * 6)
    hyb = hybrid.hybrid_kv_blocks(32768, 16, pattern)
    assert full == 6 * 2048
    # The next query (position 32768) sees 31745.., in block 1984: 64 blocks live per
    # sliding layer (65 for a moment, once the next token takes a new block).
    assert hyb == 2048 + 5 * 64
    assert 4.5 < full / hyb < 5.5  # "about 5x"


def test_prefix_hit_per_group_type():
    T, F = True, False
    # A full group needs every block; a sliding group (window 8, blocks of 4) only the blocks
    # the query at P * 4 sees: blocks (4P - 7) // 4 .. P - 1, i.e. the last two.
    full, slide = None, 8
    assert hybrid.prefix_hit_blocks([[T, T, T, F]], [full], 4, 10) == 3
    assert hybrid.prefix_hit_blocks([[F, F, T, T, F, T]], [slide], 4, 10) == 4
    # Not monotone: the sliding group serves 4 blocks but not 5 or 6 (block 4 missing).
    assert hybrid.prefix_hit_blocks([[F, T, T, T, F, T]], [slide], 4, 10) == 4
    # Together: the full group allows 5, the sliding group 4 of those.
    assert hybrid.prefix_hit_blocks([[T] * 5 + [F], [F, F, T, T, F, T]], [full, slide], 4, 10) == 4
    assert hybrid.prefix_hit_blocks([[T] * 6], [full], 4, 2) == 2  # max_blocks
    assert hybrid.prefix_hit_blocks([[F] * 6], [slide], 4, 10) == 0
