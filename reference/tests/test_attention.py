"""decode_attention against a naive loop, and the properties a kernel relies on."""

import numpy as np
import pytest

from pa_ref import decode_attention, softmax


def naive_attention(q, k, v, context_lens, scale):
    """One query head at a time, one key at a time: slow but obviously right."""
    batch, num_heads, head_size = q.shape
    group = num_heads // k.shape[2]
    out = np.zeros((batch, num_heads, head_size))
    for b in range(batch):
        n = context_lens[b]
        for h in range(num_heads):
            g = h // group
            scores = [scale * sum(q[b, h, d] * k[b, t, g, d] for d in range(head_size))
                      for t in range(n)]
            if n == 0:
                continue
            weights = np.exp(np.array(scores) - max(scores))
            weights /= weights.sum()
            for t in range(n):
                out[b, h] += weights[t] * v[b, t, g]
    return out


def random_inputs(seed, batch=2, num_heads=4, num_kv_heads=2, head_size=8, max_seq_len=12):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((batch, num_heads, head_size))
    k = rng.standard_normal((batch, max_seq_len, num_kv_heads, head_size))
    v = rng.standard_normal((batch, max_seq_len, num_kv_heads, head_size))
    return q, k, v


@pytest.mark.parametrize("num_heads,num_kv_heads", [(2, 2), (4, 2), (8, 2), (8, 1)])
def test_matches_naive_loop(num_heads, num_kv_heads):
    q, k, v = random_inputs(1, num_heads=num_heads, num_kv_heads=num_kv_heads)
    lens = np.array([12, 5])
    got = decode_attention(q, k, v, lens, 0.3)
    np.testing.assert_allclose(got, naive_attention(q, k, v, lens, 0.3), rtol=1e-12, atol=1e-12)


def test_mqa_equals_broadcasting_one_head():
    q, k, v = random_inputs(2, num_heads=4, num_kv_heads=1)
    lens = np.array([9, 12])
    mqa = decode_attention(q, k, v, lens, 0.5)
    # The same single KV head copied to every query head is plain multi-head attention.
    mha = decode_attention(q, np.repeat(k, 4, axis=2), np.repeat(v, 4, axis=2), lens, 0.5)
    np.testing.assert_allclose(mqa, mha, rtol=1e-13, atol=1e-13)


def test_gqa_reads_kv_head_h_div_group():
    q, k, v = random_inputs(3, num_heads=4, num_kv_heads=2)
    lens = np.array([7, 10])
    out = decode_attention(q, k, v, lens, 0.4)
    # Query heads 2 and 3 belong to KV head 1: attention with that head alone agrees.
    alone = decode_attention(q[:, 2:4], k[:, :, 1:2], v[:, :, 1:2], lens, 0.4)
    np.testing.assert_allclose(out[:, 2:4], alone, rtol=1e-13, atol=1e-13)


def test_nan_beyond_context_len_does_not_leak():
    q, k, v = random_inputs(4)
    lens = np.array([3, 12])
    clean = decode_attention(q, k, v, lens, 0.3)
    k[0, 3:], v[0, 3:] = np.nan, np.nan
    poisoned = decode_attention(q, k, v, lens, 0.3)
    assert not np.isnan(poisoned).any()
    np.testing.assert_array_equal(poisoned, clean)


def test_context_len_zero_gives_zeros():
    q, k, v = random_inputs(5)
    k[:], v[:] = np.nan, np.nan
    out = decode_attention(q, k, v, np.array([0, 0]), 0.3)
    np.testing.assert_array_equal(out, 0.0)


def test_identical_value_rows_give_that_row():
    q, k, v = random_inputs(6)
    row = np.arange(8.0)
    v[:] = row  # the weights sum to one, so any mixture of equal rows is that row
    out = decode_attention(q, k, v, np.array([12, 4]), 1.0)
    np.testing.assert_allclose(out, np.broadcast_to(row, out.shape), rtol=1e-13, atol=1e-13)


def test_softmax_is_stable_for_large_scores():
    weights = softmax(np.array([1000.0, 999.0, -1000.0]))
    assert np.isclose(weights.sum(), 1.0)
    np.testing.assert_allclose(weights[:2], [1 / (1 + np.e**-1), np.e**-1 / (1 + np.e**-1)])


@pytest.mark.parametrize("change", ["ratio", "lens_long", "lens_negative", "head_size", "rank"])
def test_bad_input_raises(change):
    q, k, v = random_inputs(7, num_heads=4, num_kv_heads=2)
    lens = np.array([3, 4])
    if change == "ratio":
        q = np.zeros((2, 3, 8))  # 3 query heads cannot share 2 KV heads evenly
    elif change == "lens_long":
        lens = np.array([3, 13])
    elif change == "lens_negative":
        lens = np.array([-1, 4])
    elif change == "head_size":
        q = np.zeros((2, 4, 9))
    elif change == "rank":
        k = k[0]
    with pytest.raises(ValueError):
        decode_attention(q, k, v, lens, 0.3)


# The chapter 1 kernel's way: an online softmax per warp, then a merge of the warps.

def test_online_softmax_keeps_the_softmax_of_every_prefix():
    from pa_ref.attention import online_softmax

    rng = np.random.default_rng(8)
    scores = rng.standard_normal(9) * 3
    values = rng.standard_normal((9, 5))
    states = online_softmax(scores, values)
    assert states[0]["c"] == 0.0  # exp(-inf): the empty start weighs nothing
    for n, st in enumerate(states, start=1):
        assert st["m"] == scores[:n].max()
        w = np.exp(scores[:n] - st["m"])
        assert np.isclose(st["l"], w.sum())
        np.testing.assert_allclose(st["acc"] / st["l"], softmax(scores[:n]) @ values[:n], atol=1e-14)
        prev_m = states[n - 2]["m"] if n > 1 else -np.inf
        assert st["c"] == np.exp(prev_m - st["m"])  # 1 unless the max grew
        assert 0.0 <= st["p"] <= 1.0 and st["l"] >= 1.0  # no exponent above 0


def test_merge_of_warp_states_is_decode_attention():
    from pa_ref.attention import decode_attention_by_warps

    for num_heads, num_kv_heads in [(2, 2), (4, 2), (8, 1)]:
        q, k, v = random_inputs(9, num_heads=num_heads, num_kv_heads=num_kv_heads)
        for lens in ([12, 5], [1, 3], [0, 4]):  # lengths below 4 leave warps with no token
            lens = np.array(lens)
            k2, v2 = k.copy(), v.copy()
            for b, n in enumerate(lens):
                k2[b, n:], v2[b, n:] = np.nan, np.nan  # never read
            got = decode_attention_by_warps(q, k2, v2, lens, 0.4)
            np.testing.assert_allclose(got, decode_attention(q, k2, v2, lens, 0.4), atol=1e-14)


def test_an_empty_warp_weighs_nothing():
    from pa_ref.attention import merge_softmax_states, warp_softmax_states

    m, l, acc = warp_softmax_states(np.array([0.5, 2.0, -1.0]), np.eye(3))
    assert m[3] == -np.inf and l[3] == 0.0 and not acc[3].any()  # warp 3 saw no token
    M, f, L, out = merge_softmax_states(m, l, acc)
    assert M == 2.0 and f[3] == 0.0 and not np.isnan(out).any()
    np.testing.assert_allclose(out, softmax(np.array([0.5, 2.0, -1.0])), atol=1e-15)
    M, f, L, out = merge_softmax_states(*warp_softmax_states(np.zeros(0), np.zeros((0, 2))))
    assert L == 0.0 and not out.any()  # every warp empty: zeros, as for context_len 0
