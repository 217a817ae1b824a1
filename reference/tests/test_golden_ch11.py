"""Chapter 11's golden cases are what the C++ tests assume they are."""

import ml_dtypes
import numpy as np
import pytest

from pa_ref import golden_ch11 as g11
from pa_ref import mla


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    out = tmp_path_factory.mktemp("ch11")
    g11.chapter_11(out)
    return out


def load(case_dir):
    return {p.stem: np.load(p) for p in case_dir.glob("*.npy")}


@pytest.mark.parametrize("case", g11.CH11_MLA, ids=lambda c: c.name)
def test_decode_cases(cases, case):
    a = load(cases / case.name)
    assert a["q"].shape == (sum(case.new_lens), case.heads, mla.D_C + mla.D_ROPE)
    assert a["expected"].shape == (sum(case.new_lens), case.heads, mla.D_C)
    assert np.isfinite(a["expected"]).all(), "a NaN-poisoned slot was read"
    assert all(n <= 4 for n in case.new_lens)  # the kernel's s_q limit
    pool, table, bs = a["latent_pool"], a["block_table"], case.block_size
    for b, n in enumerate(case.seq_lens):  # every slot a sequence holds is written, the rest NaN
        owned = table[b][table[b] >= 0]
        rows = pool[owned].reshape(-1, pool.shape[2])
        assert np.isfinite(rows[:n]).all() and np.isnan(rows[n:]).all()
    used = set(table[table >= 0].tolist())
    assert len(used) == (table >= 0).sum(), "a block in two tables"
    assert np.isnan(pool[[i for i in range(len(pool)) if i not in used]]).all()


def test_writer_cases_have_distinct_slots_and_both_ends(cases):
    for dtype in ("fp16", "bf16"):
        for bs in (16, 32, 64):
            a = load(cases / f"writer_{dtype}_bs{bs}")
            slots = a["slot_mapping"][a["slot_mapping"] >= 0]
            assert len(set(slots.tolist())) == len(slots), "two tokens to one slot: a race"
            assert 0 in slots and 4 * bs - 1 in slots and (a["slot_mapping"] < 0).sum() == 2


def test_naive_case_agrees_with_absorbed(cases):
    a = load(cases / "naive_fp16")
    lat = mla.paged_mla_decode(a["q"], a["latent_pool"], a["block_table"], a["seq_lens"], a["query_start_loc"],
                               float(a["scale"]), mla.D_C)
    got = np.einsum("shc,hcv->shv", lat, a["w_uv"])
    np.testing.assert_allclose(got, a["expected_naive"], atol=5e-3, rtol=0)  # q' rounded to fp16 only


@pytest.mark.parametrize("name", g11.WITH_FIRST_KEYS)
def test_first_keys_cases(cases, name):
    a = load(cases / name)
    got, full = a[f"expected_first{g11.FIRST_KEYS}"], a["expected"]
    qsl, lens = a["query_start_loc"], a["seq_lens"]
    assert np.isfinite(got).all()
    for b, n in enumerate(lens):  # a sequence of at most 37 tokens: nothing is cut
        rows = slice(qsl[b], qsl[b + 1])
        if n <= g11.FIRST_KEYS:
            np.testing.assert_array_equal(got[rows], full[rows])
        elif qsl[b + 1] > qsl[b]:
            assert not np.allclose(got[rows], full[rows]), "the cut changes nothing: a test that cannot fail"


@pytest.mark.parametrize("case", g11.CH11_MLA, ids=lambda c: c.name)
def test_score_cases_give_the_decode(cases, case):
    """expected_scores are the decode's scores: for a sequence of at most 64 tokens, their
    softmax (base 2) times the latent rows is `expected`; masked keys are those past the row."""
    a = load(cases / case.name)
    s, qsl = a["expected_scores"], a["query_start_loc"]
    assert s.shape == (sum(case.new_lens), case.heads, g11.SCORE_KEYS)
    for b, n in enumerate(case.seq_lens):
        new = int(qsl[b + 1] - qsl[b])
        if new == 0:
            continue
        lat = mla.gather_latent(a["latent_pool"], a["block_table"][b], int(n))
        for i in range(new):
            row = s[qsl[b] + i]
            pos = n - new + i  # the row sees keys 0 .. pos
            seen = np.isfinite(row)
            assert (seen == (np.arange(g11.SCORE_KEYS) <= pos)[None, :]).all()
            if n <= g11.SCORE_KEYS:
                p = np.exp2(row - row.max(axis=1, keepdims=True))
                p /= p.sum(axis=1, keepdims=True)
                np.testing.assert_allclose(p[:, :n] @ lat[:, :mla.D_C], a["expected"][qsl[b] + i], atol=1e-12)


@pytest.mark.parametrize("case", g11.CH11_MLA, ids=lambda c: c.name)
def test_first_keys_scores_are_cut_at_37(cases, case):
    a = load(cases / case.name)
    full, cut = a["expected_scores"], a[f"expected_scores_first{g11.FIRST_KEYS}"]
    np.testing.assert_array_equal(cut[:, :, :g11.FIRST_KEYS], full[:, :, :g11.FIRST_KEYS])
    assert np.isneginf(cut[:, :, g11.FIRST_KEYS:]).all()


def test_some_cut_hides_keys_a_row_attends(cases):
    """Over the cases, the cut at 37 masks keys that rows see: a test of it can fail."""
    hidden = 0
    for case in g11.CH11_MLA:
        a = load(cases / case.name)
        hidden += np.isfinite(a["expected_scores"][:, :, g11.FIRST_KEYS:]).sum()
    assert hidden > 0


# ---- The fp8 latent cache ----------------------------------------------------------------

def test_fp8_row_is_656_bytes_and_round_trips_within_2_to_the_minus_4():
    rng = np.random.default_rng(11)
    c_kv = g11.round_to(rng.standard_normal((5, mla.D_C)) * 2.0 ** rng.integers(-8, 9, (5, 1)), "bf16")
    c_kv[2, 128:256] = 0.0
    k_rope = g11.round_to(rng.standard_normal((5, mla.D_ROPE)), "bf16")
    rows = mla.quantize_latent_fp8(c_kv, k_rope, "bf16")
    assert rows.shape == (5, 656) == (5, mla.mla_fp8_bytes_per_token())
    back = mla.dequantize_latent_fp8(rows, "bf16")
    assert (back[:, mla.D_C:] == k_rope).all(), "the RoPE part is kept exactly"
    scales = rows[:, 512:528].copy().view("<f4")
    assert scales[2, 1] == 1.0, "a zero tile's scale is 1"
    assert (back[2, 128:256] == 0).all()
    err = np.abs(back[:, :mla.D_C] - c_kv)
    tile_amax = np.repeat(np.abs(c_kv).reshape(5, 4, 128).max(axis=2), 128, axis=1)
    assert (err <= 2.0**-4 * np.abs(c_kv) + 2.0**-10 * tile_amax / 448 * 1.0001).all()
    # the tile's largest value maps to (about) 448: the whole e4m3 range is used
    big = np.abs(rows[:, :mla.D_C].view(ml_dtypes.float8_e4m3fn).astype(np.float64)).reshape(5, 4, 128).max(axis=2)
    assert (big[np.abs(c_kv).reshape(5, 4, 128).max(axis=2) > 0] == 448).all()


@pytest.mark.parametrize("case", g11.CH11_FP8, ids=lambda c: c.name)
def test_fp8_decode_cases_and_their_bound(cases, case):
    a = load(cases / case.name)
    assert a["latent_pool"].dtype == np.uint8 and a["latent_pool"].shape[2] == 656
    assert np.isfinite(a["expected"]).all() and np.isfinite(a["expected_16bit"]).all()
    bound = g11.FP8_ATOL + g11.FP8_RTOL * np.abs(a["expected_16bit"])
    used = np.abs(a["expected"] - a["expected_16bit"]) / bound
    assert used.max() < 0.5, f"the honest answer uses {used.max():.2f} of the fp8 bound"
    # A kernel that forgets the tile scales (e4m3 values read as they are) exceeds it.
    pool = a["latent_pool"].copy()
    pool.reshape(-1, 656)[:, 512:528] = np.tile(np.array([1.0], "<f4").view(np.uint8), 4)
    table, qsl = a["block_table"], a["query_start_loc"]
    wrong = mla.paged_mla_decode(a["q"], mla.dequantize_latent_fp8(pool, case.dtype), table, case.seq_lens, qsl,
                                 g11.SCALE, mla.D_C)
    assert (np.abs(wrong - a["expected_16bit"]) / bound).max() > 2


def test_fp8_writer_cases(cases):
    for dtype in ("fp16", "bf16"):
        for bs in (16, 64):
            a = load(cases / f"fp8_writer_{dtype}_bs{bs}")
            slots = a["slot_mapping"]
            flat = a["expected"].reshape(-1, 656)
            written = sorted(int(s) for s in slots if s >= 0)
            assert len(set(written)) == len(written) and 0 in written and len(flat) - 1 in written
            untouched = [i for i in range(len(flat)) if i not in set(written)]
            assert (flat[untouched] == 0xFF).all()
            scales = flat[written, 512:528].copy().view("<f4")
            assert (scales == 1.0).any() and scales.max() / scales.min() > 2**8  # zero tiles, wide range
