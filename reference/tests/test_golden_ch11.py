"""Chapter 11's golden cases are what the C++ tests assume they are."""

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
