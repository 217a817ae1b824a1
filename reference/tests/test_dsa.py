"""Chapter 14's reference (pa_ref.dsa): the indexer pool, its logits, top-k and sparse MLA.

Each test names the wrong answer it is there to reject.
"""

import numpy as np
import pytest

from pa_ref import dsa, mla
from pa_ref.dtypes import round_to
from pa_ref.fp8 import dequantize_e4m3, quantize_e4m3
from pa_ref.paged import blocks_for, token_slot

D = dsa.INDEX_HEAD_DIM


def paged_batch(rng, context_lens, block_size, spare=3):
    """Permuted physical blocks per sequence: (block_table int32 [B, M] with -1 padding,
    num_blocks, each sequence's slots in position order). `spare` blocks belong to no one."""
    needed = [blocks_for(n, block_size) for n in context_lens]
    num_blocks = sum(needed) + spare
    ids = rng.permutation(num_blocks)
    table = np.full((len(context_lens), max(needed) + 1), -1, dtype=np.int32)
    slots, at = [], 0
    for b, n in enumerate(context_lens):
        table[b, :needed[b]] = ids[at:at + needed[b]]
        at += needed[b]
        slots.append([token_slot(table[b], p, block_size) for p in range(n)])
    return table, num_blocks, slots


# ---- The indexer pool's layout -----------------------------------------------------------

@pytest.mark.parametrize("block_size", [4, 8, 16, 32, 64])
def test_every_row_is_16_byte_aligned_and_the_block_is_keys_then_scales(block_size):
    # Rejects: [key | scale] interleaved per token (token o's key at o * 132: misaligned), a
    # block stride other than block_size * 132, scales before keys.
    assert dsa.indexer_bytes_per_token() == 132
    assert dsa.indexer_block_bytes(block_size) == 132 * block_size
    covered = []
    for block in range(3):
        base = block * 132 * block_size
        assert base % 16 == 0
        for o in range(block_size):
            key, scale = dsa.indexer_key_offset(block, o, block_size), dsa.indexer_scale_offset(block, o, block_size)
            assert key % 16 == 0, (block, o)
            assert key == base + 128 * o and scale == base + 128 * block_size + 4 * o
            covered += list(range(key, key + 128)) + list(range(scale, scale + 4))
        assert dsa.indexer_scale_offset(block, 0, block_size) % 16 == 0  # the scale array too
    assert sorted(covered) == list(range(3 * 132 * block_size))  # the blocks are tiled exactly


def test_layout_numbers_for_page_64_and_bad_block_sizes():
    assert dsa.indexer_key_offset(3, 5, 64) == 3 * 8448 + 640
    assert dsa.indexer_scale_offset(3, 5, 64) == 3 * 8448 + 8192 + 20
    assert dsa.indexer_key_offset(2**25, 0, 64) == 2**25 * 8448  # > 2^32: no int32 wrap
    for bad in (0, 6, 10):
        with pytest.raises(ValueError, match="multiple of 4"):
            dsa.indexer_block_bytes(bad)
    with pytest.raises(ValueError, match="indexer pool"):
        dsa.indexer_pool_dims(np.zeros((2, 130), dtype=np.uint8))


def test_the_key_quantizer_is_chapter_6s_with_scale_amax_over_448():
    # Rejects: a scale in float64 or amax / 127, rounding other than chapter 6's, a zero scale
    # for an all-zero row (quantize_e4m3 refuses it), a scale rule unlike chapter 11's tiles.
    rng = np.random.default_rng(1)
    k = rng.standard_normal((6, D)).astype(np.float32) * np.float32([[1], [3], [0.01], [1e3], [1], [0]])
    data, scales = dsa.quantize_index_keys(k)
    assert data.dtype == np.uint8 and scales.dtype == np.float32
    for i in range(5):
        want = np.float32(np.abs(k[i]).max()) / np.float32(448)
        assert scales[i] == want
        np.testing.assert_array_equal(data[i], quantize_e4m3(k[i], want))
        assert data[i, np.abs(k[i]).argmax()] in (0x7E, 0xFE)  # the largest value is +-448
    assert scales[5] == 1.0 and not dsa.dequantize_index_keys(data[5:], scales[5:]).any()
    wide = k[:4].reshape(1, 4 * D)  # four key rows side by side are one 512-wide latent row
    np.testing.assert_array_equal(mla.fp8_tile_scales(wide)[0], scales[:4])
    back = dsa.dequantize_index_keys(data, scales)
    assert np.all(np.abs(back - k) <= np.abs(k) / 16 + scales[:, None] * 2.0**-9)


def test_queries_have_one_scale_per_token_and_head():
    # Rejects: one scale per token (over all heads), or one per head across tokens.
    rng = np.random.default_rng(11)
    q = rng.standard_normal((3, 5, D)) * rng.uniform(0.1, 10, (3, 5, 1))
    data, scales = dsa.quantize_index_queries(q)
    assert data.shape == (3, 5, D) and scales.shape == (3, 5)
    for t in range(3):
        for h in range(5):
            want = np.float32(np.abs(q[t, h].astype(np.float32)).max()) / np.float32(448)
            assert scales[t, h] == want
            np.testing.assert_array_equal(data[t, h], quantize_e4m3(q[t, h], want))


def test_write_puts_bytes_exactly_where_the_layout_says_and_nothing_else():
    # Rejects: interleaved layout, a padding token (slot -1) written, a scale at the key's
    # offset + 128, a big-endian scale.
    rng = np.random.default_rng(2)
    block_size, num_blocks = 8, 4
    pool = dsa.new_indexer_pool(num_blocks, block_size)
    k = rng.standard_normal((5, D))
    slots = [0, num_blocks * block_size - 1, 9, -1, 12]  # first and last slot of the pool
    dsa.reshape_and_cache_indexer(k, pool, slots)
    data, scales = dsa.quantize_index_keys(k)
    flat, touched = pool.reshape(-1), np.zeros(pool.size, dtype=bool)
    for i, slot in enumerate(slots):
        if slot < 0:
            continue
        block, o = divmod(slot, block_size)
        at = dsa.indexer_key_offset(block, o, block_size)
        np.testing.assert_array_equal(flat[at:at + D], data[i])
        touched[at:at + D] = True
        at = dsa.indexer_scale_offset(block, o, block_size)
        assert flat[at:at + 4].tobytes() == scales[i].astype("<f4").tobytes()
        touched[at:at + 4] = True
    assert np.all(flat[~touched] == 0xFF), "a byte outside the written rows changed"
    got = dsa.read_index_keys(pool, [9, -1, 0])
    np.testing.assert_array_equal(got[0], dsa.dequantize_index_keys(data[2:3], scales[2:3])[0])
    assert np.isnan(got[1]).all() and np.isfinite(got[[0, 2]]).all()
    assert np.isnan(dsa.read_index_keys(pool, [1])).all()  # never written: the poison shows


def test_bad_slots_are_refused():
    pool = dsa.new_indexer_pool(2, 4)
    k = np.ones((2, D))
    with pytest.raises(ValueError, match="beyond the pool"):
        dsa.reshape_and_cache_indexer(k, pool, [0, 8])
    with pytest.raises(ValueError, match="same slot"):
        dsa.reshape_and_cache_indexer(k, pool, [3, 3])
    for bad in (8, -2):
        with pytest.raises(ValueError, match="outside"):
            dsa.read_index_keys(pool, [bad])


# ---- Indexer logits ----------------------------------------------------------------------

# Decodes at block edges (block 16: lengths 1, 15, 16, 17), prefill chunks over prefixes,
# one starting at position 0, and a sequence with no new token (it owns no row).
CONTEXT = (1, 15, 16, 17, 40, 21, 9)
NEW = (1, 1, 1, 1, 6, 0, 9)


def indexer_batch(seed, context=CONTEXT, new=NEW, block_size=16):
    rng = np.random.default_rng(seed)
    table, num_blocks, slots = paged_batch(rng, context, block_size)
    pool = dsa.new_indexer_pool(num_blocks, block_size)
    keys = [rng.standard_normal((n, D)) for n in context]
    # One write for all tokens, with padding entries among them.
    all_k = np.concatenate(keys + [np.zeros((2, D))])
    dsa.reshape_and_cache_indexer(all_k, pool, sum(slots, []) + [-1, -1])
    qsl = np.concatenate([[0], np.cumsum(new)])
    q = rng.standard_normal((qsl[-1], dsa.INDEX_HEADS, D)) * 2.0
    w = rng.standard_normal((qsl[-1], dsa.INDEX_HEADS))  # signed, as the model's are
    pos = [c - n + i for c, n in zip(context, new) for i in range(n)]
    seq = [b for b, n in enumerate(new) for _ in range(n)]
    return dict(pool=pool, table=table, keys=keys, qsl=qsl, q=q, w=w, pos=pos, seq=seq)


def test_logits_are_causal_at_exactly_the_rows_position():
    # Rejects: s < p(t) (the row's own key dropped), s <= p(t) + 1, p(t) taken as the
    # sequence's last position for every row of a chunk, rows given to an idle sequence.
    c = indexer_batch(3)
    q8, qs = dsa.quantize_index_queries(c["q"])
    logits = dsa.indexer_logits(q8, dsa.fold_index_weights(c["w"], qs), c["pool"], c["table"],
                                CONTEXT, c["qsl"])
    assert logits.shape == (sum(NEW), max(CONTEXT))
    for t, p in enumerate(c["pos"]):
        np.testing.assert_array_equal(np.isfinite(logits[t]), np.arange(max(CONTEXT)) <= p, err_msg=f"row {t}")
    assert not np.isnan(logits).any()
    assert dsa.query_positions(CONTEXT, c["qsl"])[1].tolist() == c["pos"]
    with pytest.raises(ValueError, match="new tokens"):
        dsa.query_positions([2], [0, 3])


def test_logits_equal_the_formula_with_the_query_scale_folded():
    # Rejects: q_scale not folded into w (or applied twice), the softmax scale missing, the
    # ReLU missing or applied after the head sum, keys not multiplied by their scale, a
    # gather through the wrong block.
    c = indexer_batch(4)
    q8, qs = dsa.quantize_index_queries(c["q"])
    ss = 1 / np.sqrt(128)
    w_eff = dsa.fold_index_weights(c["w"], qs)
    np.testing.assert_array_equal(w_eff, c["w"] * qs.astype(np.float64) * ss)
    logits = dsa.indexer_logits(q8, w_eff, c["pool"], c["table"], CONTEXT, c["qsl"])
    q_deq = dequantize_e4m3(q8, 1.0) * qs[..., None]  # the queries the model quantized
    for t, (b, p) in enumerate(zip(c["seq"], c["pos"])):
        k_deq = dsa.dequantize_index_keys(*dsa.quantize_index_keys(c["keys"][b][:p + 1]))
        want = np.zeros(p + 1)
        for h in range(dsa.INDEX_HEADS):
            want += c["w"][t, h] * ss * np.maximum(k_deq @ q_deq[t, h], 0.0)
        np.testing.assert_allclose(logits[t, :p + 1], want, rtol=1e-12, atol=1e-12, err_msg=f"row {t}")
    # and fp8 is close to the unquantized model's scores
    unq = np.concatenate([dsa.index_scores(c["q"][t:t + 1], c["w"][t:t + 1] * ss, c["keys"][b][:p + 1])[0]
                          for t, (b, p) in enumerate(zip(c["seq"], c["pos"]))])
    got = np.concatenate([logits[t, :p + 1] for t, p in enumerate(c["pos"])])
    assert np.linalg.norm(got - unq) < 0.05 * np.linalg.norm(unq)


def test_fold_refuses_what_the_relu_does_not_commute_with():
    with pytest.raises(ValueError, match="> 0"):
        dsa.fold_index_weights(np.ones((1, 2)), np.array([[1.0, 0.0]]))
    with pytest.raises(ValueError, match="num_cols"):
        c = indexer_batch(5)
        q8, qs = dsa.quantize_index_queries(c["q"])
        dsa.indexer_logits(q8, dsa.fold_index_weights(c["w"], qs), c["pool"], c["table"], CONTEXT,
                           c["qsl"], num_cols=39)


# ---- Top-k -------------------------------------------------------------------------------

def test_tie_rule_smaller_position_wins():
    # Rejects: the larger position winning a tie, a sort that is not stable on positions.
    row = np.array([[1.0, 5.0, 5.0, 5.0, 2.0, 5.0]])
    assert dsa.topk_positions(row, 2).tolist() == [[1, 2]]
    assert dsa.topk_positions(row, 4).tolist() == [[1, 2, 3, 5]]
    assert dsa.topk_positions(row, 5).tolist() == [[1, 2, 3, 4, 5]]
    for bits in (8, 11):
        assert dsa.radix_select(row[0], 2, bits)[0].tolist() == [1, 2]


def test_minus_zero_ties_plus_zero_and_values_compare_in_float32():
    # Rejects: raw sign-flipped bits as the key (-0 below +0: position 1 would win), a
    # comparison in float64 (1 + 1e-12 is 1 in the float32 logits buffer).
    row = np.array([[-0.0, 0.0, -1.0]])
    assert dsa.topk_positions(row, 1).tolist() == [[0]]
    assert dsa.radix_select(row[0], 1)[0].tolist() == [0]
    row = np.array([[0.0, 0.0, 1.0, 0.0, 0.0, 1.0 + 1e-12]])
    assert dsa.topk_positions(row, 1).tolist() == [[2]]


def test_masked_positions_are_never_selected_and_short_rows_pad_with_minus_one():
    # Rejects: -inf taken to fill k, padding with 0 (a real slot) or a repeated position.
    inf = np.inf
    rows = np.array([[-inf, 3.0, -inf, -3e38], [-inf, -inf, -inf, -inf], [1.0, 2.0, 3.0, 4.0]])
    assert dsa.topk_positions(rows, 4).tolist() == [[1, 3, -1, -1], [-1] * 4, [0, 1, 2, 3]]
    assert dsa.topk_positions(rows, 6).dtype == np.int32
    for bad in (0, 2049):
        with pytest.raises(ValueError, match="k <="):
            dsa.topk_positions(rows, bad)
    with pytest.raises(ValueError, match="NaN"):
        dsa.topk_positions(np.array([[1.0, np.nan]]), 1)


def test_topk_over_the_indexer_stays_causal_and_fills_min_k_visible():
    # Rejects: a selection past the row's position, fewer than min(k, p + 1) picks.
    c = indexer_batch(6)
    q8, qs = dsa.quantize_index_queries(c["q"])
    logits = dsa.indexer_logits(q8, dsa.fold_index_weights(c["w"], qs), c["pool"], c["table"],
                                CONTEXT, c["qsl"])
    k = 12
    pos = dsa.topk_positions(logits, k)
    slots = dsa.topk_slots(logits, k, c["table"], c["qsl"], 16, len(c["pool"]))
    for t, (b, p) in enumerate(zip(c["seq"], c["pos"])):
        picked = pos[t][pos[t] >= 0]
        assert len(picked) == min(k, p + 1) and picked.max() <= p
        assert np.all(pos[t][len(picked):] == -1)
        best = np.argsort(-logits[t, :p + 1], kind="stable")[:k]  # distinct N(0,1)-made logits
        assert sorted(best) == picked.tolist()
        assert slots[t].tolist() == [token_slot(c["table"][b], x, 16) for x in picked] + [-1] * (k - len(picked))


def test_slots_go_through_the_block_table_and_must_fit_int32():
    # Rejects: slot = position (no table), block * block_size taken from the logical block,
    # an int32 slot computed past 2^31 - 1 instead of refused.
    table = np.array([[7, 2, 9, -1], [4, 0, -1, -1]])
    positions = np.array([[0, 17, 35, -1], [16, 3, -1, -1]])
    got = dsa.positions_to_slots(positions, table, [0, 1, 2], 16, 10)
    assert got.dtype == np.int32
    assert got.tolist() == [[112, 33, 147, -1], [0, 67, -1, -1]]
    big = 2**31 // 64
    last = dsa.positions_to_slots(np.array([[63, 0]]), np.array([[big - 1]]), [0, 1], 64, big)
    assert last.tolist() == [[2**31 - 1, (big - 1) * 64]]
    with pytest.raises(ValueError, match="int32"):
        dsa.positions_to_slots(np.array([[0]]), np.array([[0]]), [0, 1], 64, big + 1)
    with pytest.raises(ValueError, match="int32"):
        dsa.topk_slots(np.zeros((1, 4)), 2, np.array([[0]]), [0, 1], 64, big + 1)
    with pytest.raises(ValueError, match="outside"):
        dsa.positions_to_slots(np.array([[40]]), table[:1], [0, 1], 16, 9)  # block 9 of 9


# ---- The radix select ----------------------------------------------------------------------

def test_order_key_preserves_float_order():
    # Rejects: negatives not inverted (their order reversed), the sign bit not set on
    # positives (every positive below every negative), -0 keyed apart from +0.
    f32 = np.finfo(np.float32)
    values = np.array([-np.inf, -f32.max, -1.5, -1.0, -f32.smallest_subnormal, -0.0, 0.0,
                       f32.smallest_subnormal, f32.tiny, 1.0, 1.5, f32.max, np.inf], dtype=np.float32)
    keys = dsa.order_key(values).astype(np.int64)
    assert keys.dtype == np.int64 and np.all(np.diff(keys[:6]) > 0) and np.all(np.diff(keys[6:]) > 0)
    assert keys[5] == keys[6] == 0x80000000
    assert dsa.radix_digits(11) == [(21, 11), (10, 11), (0, 10)]
    assert dsa.radix_digits(8) == [(24, 8), (16, 8), (8, 8), (0, 8)]


def random_row(rng):
    """A NaN-free row with many ties, -inf masks, +-0, and extreme magnitudes."""
    n = int(rng.integers(1, 300))
    kind = rng.integers(4)
    if kind == 0:
        row = rng.integers(-3, 4, n).astype(np.float64)                     # a handful of values
    elif kind == 1:
        row = rng.standard_normal(n)                                           # distinct
    elif kind == 2:
        row = rng.choice([-0.0, 0.0, 1e-45, -1e-45, 3e38, -3e38, 1.0], n)      # zeros, subnormals
    else:
        row = np.round(rng.standard_normal(n) * 4) / 4                         # ties in the low bits
    row[rng.random(n) < rng.random() * 0.6] = -np.inf
    return row


@pytest.mark.parametrize("bits", [8, 11])
def test_radix_select_equals_the_sort_based_topk(bits):
    # Rejects: a threshold bucket chosen one bucket off, candidates of buckets above the
    # threshold dropped, ties broken by the larger position, -inf counted as a candidate.
    rng = np.random.default_rng(bits)
    for trial in range(250):
        row = random_row(rng)
        k = int(rng.integers(1, min(len(row) + 6, dsa.INDEX_TOPK + 1)))
        want = dsa.topk_positions(row[None], k)[0]
        got, passes = dsa.radix_select(row, k, bits)
        assert got.tolist() == want[want >= 0].tolist(), (trial, k, row.tolist())


def test_radix_passes_bookkeeping():
    # What the book's figure and the C++ pass-by-pass test read: per pass the histogram of
    # the candidates in play, the threshold bucket with `above` < need <= above + its count.
    rng = np.random.default_rng(9)
    row = rng.permutation(np.concatenate([rng.uniform(1, 100, 200), np.full(50, 0.75),
                                          rng.uniform(-5, 0.5, 40), np.full(30, -np.inf)]))
    k = 220  # the 200 values above 0.75 and 20 of the 50 equal ones: a tie to break
    for bits, num_passes in ((8, 4), (11, 3)):
        got, passes = dsa.radix_select(row, k, bits)
        assert len(passes) == num_passes  # the tie survives every digit
        assert passes[0].histogram.sum() == 290 and passes[0].need == k
        for i, p in enumerate(passes):
            assert p.histogram.shape == (1 << p.width,)
            assert p.histogram[p.bucket + 1:].sum() == p.above < p.need <= p.above + p.histogram[p.bucket]
            if i:
                prev = passes[i - 1]
                assert p.histogram.sum() == prev.histogram[prev.bucket] and p.need == prev.need - prev.above
        last = passes[-1]
        assert last.need - last.above == 20  # equal 0.75s still to pick
        ties = np.flatnonzero(row == 0.75)
        assert set(ties[:last.need - last.above]) <= set(got) and not set(ties[last.need - last.above:]) & set(got)
    # No tie at the boundary: it stops at the pass whose bucket is taken whole.
    distinct = rng.standard_normal(1000)
    _, passes = dsa.radix_select(distinct, 10, 11)
    assert passes[-1].histogram[passes[-1].bucket] == passes[-1].need - passes[-1].above
    assert dsa.radix_select(np.array([1.0, -np.inf, 2.0]), 5) == (pytest.approx([0, 2]), [])


# ---- Token-sparse MLA decode ----------------------------------------------------------------

def latent_batch(seed, lens, block_size=16, dtype="bf16"):
    rng = np.random.default_rng(seed)
    table, num_blocks, slots = paged_batch(rng, lens, block_size)
    pool = np.full((num_blocks, block_size, mla.FP8_ROW_BYTES), 0xFF, dtype=np.uint8)  # NaN
    rows = []
    for b, n in enumerate(lens):
        c_kv = rng.standard_normal((n, mla.D_C))
        k_rope = round_to(rng.standard_normal((n, mla.D_ROPE)), dtype)
        mla.reshape_and_cache_latent_fp8(c_kv, k_rope, pool, slots[b], dtype)
        # the rows a correct gather must see, derived from the values, not from the pool
        rows.append(mla.dequantize_latent_fp8(mla.quantize_latent_fp8(c_kv, k_rope, dtype), dtype))
    return rng, table, pool, slots, rows


SCALE = mla.mla_scale(128, mla.D_ROPE)


@pytest.mark.parametrize("s_q", [1, 2, 4])
def test_sparse_over_every_visible_slot_is_dense_mla(s_q):
    # Rejects: all queries of a sequence sharing query 0's list, -1 read as slot 0 (or ending
    # the list), an lse in base 2 or without its max, a row read from the wrong block.
    lens, heads, block_size = (4, 16, 17, 37), 8, 16
    rng, table, pool, slots, _ = latent_batch(10 + s_q, lens, block_size)
    q = rng.standard_normal((len(lens), s_q, heads, mla.D_C + mla.D_ROPE))
    width = max(lens) + 5
    indices = np.full((len(lens), s_q, width), -1, dtype=np.int32)
    for b, n in enumerate(lens):
        for i in range(s_q):
            visible = np.array(slots[b][:n - s_q + i + 1])
            at = np.sort(rng.choice(width, len(visible), replace=False))  # -1s between them
            indices[b, i, at] = rng.permutation(visible)
    out, lse = dsa.sparse_mla_decode(q, pool, indices, SCALE, "bf16")
    qsl = np.arange(len(lens) + 1) * s_q
    dense_pool = mla.dequantize_latent_fp8(pool, "bf16")
    flat_q = q.reshape(-1, heads, q.shape[3])
    want = mla.paged_mla_decode(flat_q, dense_pool, table, lens, qsl, SCALE, mla.D_C)
    np.testing.assert_allclose(out.reshape(want.shape), want, rtol=1e-10, atol=1e-12)
    s2 = mla.paged_mla_scores(flat_q, dense_pool, table, lens, qsl, SCALE, max(lens))  # base 2
    want_lse = np.logaddexp.reduce(s2 * np.log(2.0), axis=2)
    np.testing.assert_allclose(lse.reshape(want_lse.shape), want_lse, rtol=1e-12)


def test_sparse_over_a_subset_is_dense_attention_on_the_gathered_rows():
    # Rejects: a slot turned into (slot // block_size, slot % block_size) of another block
    # size, rows dequantized with the wrong tile's scale, the value taken as all 576 columns.
    lens, heads = (30, 50), 4
    rng, table, pool, slots, rows = latent_batch(20, lens)
    q = rng.standard_normal((2, 2, heads, mla.D_C + mla.D_ROPE))
    picks = [[rng.choice(n, size, replace=False) for size in (1, 7)] for n in lens]
    indices = np.full((2, 2, 8), -1)
    for b in range(2):
        for i in range(2):
            indices[b, i, :len(picks[b][i])] = np.array(slots[b])[picks[b][i]]
    out, lse = dsa.sparse_mla_decode(q, pool, indices, SCALE, "bf16")
    assert np.isfinite(out).all()  # the 0xFF (NaN) rows nobody listed were not read
    for b in range(2):
        for i in range(2):
            gathered = rows[b][picks[b][i]]
            want = mla.latent_attention(q[b, i][None], gathered, SCALE, mla.D_C)[0]
            np.testing.assert_allclose(out[b, i], want, rtol=1e-10, atol=1e-12)
            assert np.all(lse[b, i] >= (SCALE * q[b, i] @ gathered.T).max(axis=1))


def test_sparse_absorbed_times_w_uv_is_naive_mla_on_the_subset():
    # Chapter 11's two forms agree on the selected tokens too.
    rng, table, pool, slots, rows = latent_batch(30, (40,), dtype="fp16")
    heads, d_nope, d_v = 4, 128, 128
    w_uk = rng.standard_normal((heads, mla.D_C, d_nope)) / np.sqrt(mla.D_C)
    w_uv = rng.standard_normal((heads, mla.D_C, d_v)) / np.sqrt(mla.D_C)
    q_nope, q_rope = rng.standard_normal((1, heads, d_nope)), rng.standard_normal((1, heads, mla.D_ROPE))
    pick = np.sort(rng.choice(40, 11, replace=False))
    q_abs = mla.absorb_query(q_nope, q_rope, w_uk)[None]        # [1, 1, H, 576]
    indices = np.array(slots[0])[pick][None, None]
    out, _ = dsa.sparse_mla_decode(q_abs, pool, indices, mla.mla_scale(d_nope, mla.D_ROPE), "fp16")
    got = np.einsum("hc,hcv->hv", out[0, 0], w_uv)
    sub = rows[0][pick]
    want = mla.mla_naive(q_nope, q_rope, sub[:, :mla.D_C], sub[:, mla.D_C:], w_uk, w_uv)[0]
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_two_halves_merged_by_their_lse_are_the_whole():
    # Rejects an lse that is not ln sum exp of the scaled scores (base 2, max only, unscaled):
    # the merge a split kernel does would then be wrong.
    rng, _, pool, slots, _ = latent_batch(40, (60,))
    q = rng.standard_normal((1, 1, 8, mla.D_C + mla.D_ROPE)) * 3
    every = rng.permutation(slots[0])
    whole = dsa.sparse_mla_decode(q, pool, every[None, None], SCALE, "bf16")
    a = dsa.sparse_mla_decode(q, pool, every[None, None, :25], SCALE, "bf16")
    b = dsa.sparse_mla_decode(q, pool, every[None, None, 25:], SCALE, "bf16")
    lse = np.logaddexp(a[1], b[1])
    merged = (np.exp(a[1] - lse)[..., None] * a[0] + np.exp(b[1] - lse)[..., None] * b[0])
    np.testing.assert_allclose(merged, whole[0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(lse, whole[1], rtol=1e-12)


def test_empty_lists_and_bad_slots():
    # Rejects: NaN (0 / 0) for a query with no slot, a silently doubled token, -2 as padding.
    rng, _, pool, slots, _ = latent_batch(50, (20,))
    q = rng.standard_normal((1, 2, 2, mla.D_C + mla.D_ROPE))
    indices = np.array([[[-1, -1, -1], [slots[0][3], -1, slots[0][5]]]])
    out, lse = dsa.sparse_mla_decode(q, pool, indices, SCALE, "bf16")
    assert not out[0, 0].any() and np.all(lse[0, 0] == -np.inf) and np.isfinite(lse[0, 1]).all()
    for bad, why in (([slots[0][3], slots[0][3]], "twice"), ([-2], "outside"), ([pool.shape[0] * 16], "outside")):
        with pytest.raises(ValueError, match=why):
            dsa.sparse_mla_decode(q[:, :1], pool, np.array([[bad]]), SCALE, "bf16")
