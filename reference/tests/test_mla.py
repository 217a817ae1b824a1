"""The MLA reference: the absorbed form is the naive one, paged or not, and its byte counts."""

import numpy as np
import pytest

from pa_ref import mla


def case(seed, heads=4, d_c=32, d_nope=16, d_rope=8, d_v=12, length=21, new=1):
    rng = np.random.default_rng(seed)
    return dict(
        q_nope=rng.standard_normal((new, heads, d_nope)),
        q_rope=rng.standard_normal((new, heads, d_rope)),
        c_kv=rng.standard_normal((length, d_c)),
        k_rope=rng.standard_normal((length, d_rope)),
        w_uk=rng.standard_normal((heads, d_c, d_nope)) / np.sqrt(d_c),
        w_uv=rng.standard_normal((heads, d_c, d_v)) / np.sqrt(d_c),
    )


@pytest.mark.parametrize("new", [1, 2, 4])
@pytest.mark.parametrize("length", [1, 5, 64])
def test_absorbed_equals_naive(new, length):
    if new > length:
        pytest.skip("more new tokens than the sequence holds")
    c = case(new * 100 + length, length=length, new=new)
    naive, absorbed = mla.mla_naive(**c), mla.mla_absorbed(**c)
    assert naive.shape == (new, 4, 12)
    np.testing.assert_allclose(absorbed, naive, rtol=1e-10, atol=1e-12)


def test_absorbed_equals_naive_at_deepseek_widths():
    c = case(7, heads=16, d_c=mla.D_C, d_nope=128, d_rope=mla.D_ROPE, d_v=128, length=40, new=2)
    np.testing.assert_allclose(mla.mla_absorbed(**c), mla.mla_naive(**c), rtol=1e-9, atol=1e-12)


def test_the_rope_part_matters_and_the_scale_is_the_heads():
    c = case(3)
    other = dict(c, k_rope=-c["k_rope"])
    assert not np.allclose(mla.mla_naive(**c), mla.mla_naive(**other))
    assert mla.mla_scale(128, 64) == pytest.approx(1 / np.sqrt(192))


def test_new_tokens_are_causal():
    c = case(11, length=9, new=3)
    out = mla.mla_naive(**c)
    # The first of the three new tokens does not see the last two: drop them, same output.
    short = dict(c, q_nope=c["q_nope"][:1], q_rope=c["q_rope"][:1], c_kv=c["c_kv"][:7], k_rope=c["k_rope"][:7])
    np.testing.assert_allclose(out[0], mla.mla_naive(**short)[0], rtol=1e-12)
    with pytest.raises(ValueError, match="new tokens"):
        mla.causal_limits(3, 2)


@pytest.mark.parametrize("block_size", [16, 32, 64])
def test_paged_decode_over_permuted_blocks_is_the_dense_one(block_size):
    rng = np.random.default_rng(block_size)
    d_c, d_rope, heads = 32, 8, 4
    lens, new = [1, block_size - 1, block_size, block_size + 1, 3 * block_size + 5], [1, 1, 2, 4, 3]
    blocks_of = [(n + block_size - 1) // block_size for n in lens]
    num_blocks = sum(blocks_of) + 3
    perm = rng.permutation(num_blocks)
    pool = np.full((num_blocks, block_size, d_c + d_rope), np.nan)  # unused slots poisoned
    tables, at, dense = np.zeros((len(lens), max(blocks_of)), dtype=np.int64), 0, []
    for b, n in enumerate(lens):
        tables[b, :blocks_of[b]] = perm[at:at + blocks_of[b]]
        at += blocks_of[b]
        c_kv, k_rope = rng.standard_normal((n, d_c)), rng.standard_normal((n, d_rope))
        slots = [tables[b, p // block_size] * block_size + p % block_size for p in range(n)]
        mla.reshape_and_cache_latent(c_kv, k_rope, pool, slots)
        dense.append(np.concatenate([c_kv, k_rope], axis=1))
    qsl = np.concatenate([[0], np.cumsum(new)])
    q = rng.standard_normal((qsl[-1], heads, d_c + d_rope))
    scale = 0.125
    got = mla.paged_mla_decode(q, pool, tables, lens, qsl, scale, d_c)
    assert np.isfinite(got).all(), "a poisoned slot was read"
    for b in range(len(lens)):
        want = mla.latent_attention(q[qsl[b]:qsl[b + 1]], dense[b], scale, d_c)
        np.testing.assert_allclose(got[qsl[b]:qsl[b + 1]], want, rtol=1e-12)
        row = mla.gather_latent(pool, tables[b], lens[b])
        flat = pool.reshape(-1)
        p = lens[b] - 1
        blk, slot = tables[b, p // block_size], p % block_size
        assert flat[mla.latent_pool_index(blk, slot, 3, block_size, d_c + d_rope)] == row[p, 3]


def test_query_start_loc_must_match():
    pool = np.zeros((2, 16, 40))
    with pytest.raises(ValueError, match="query_start_loc"):
        mla.paged_mla_decode(np.zeros((3, 2, 40)), pool, np.zeros((1, 1), dtype=int), [5], [0, 2], 1.0, 32)


def test_bytes_per_token_against_chapter_1():
    assert mla.mla_bytes_per_token() == 1152                 # bf16 latent + RoPE key
    assert mla.kv_bytes_per_token(8, 128) == 4096            # GQA, 8 KV heads of 128
    assert mla.kv_bytes_per_token(128, 128) == 65536         # MHA, 128 heads of 128
    assert mla.mla_fp8_bytes_per_token() == 656              # 512 e4m3 + 4 fp32 scales + 64 bf16
    assert mla.flops_per_token(1) == 2176                    # 576 for QK, 512 for PV, times 2
