"""Chapter 10's golden cases: a ragged batch of decodes, verifications and prefill chunks.

They agree with chapter 8's prefill reference and with chapter 4's decode reference, the
inputs are poisoned where a kernel must not read, the tolerance admits an honest
tensor-core flash kernel (split or not) and rejects the classic varlen mistakes.
"""

import re

import numpy as np
import pytest

from pa_ref import (
    E4M3_NAN,
    dequantize_pools,
    paged_decode_attention,
    paged_decode_attention_fp8,
    paged_gather,
    round_to,
)
from pa_ref.golden import CHAPTERS, main
from pa_ref.golden_ch06 import FP8_ATOL, FP8_RTOL
from pa_ref.golden_ch10 import CH10_VARLEN, FIRST_KEYS_CASES, TILE_ROWS
from pa_ref.golden_ch10_plan import CH10_PLANS
from pa_ref.golden_io import TOLERANCES
from pa_ref.paged import blocks_for, pack_x
from pa_ref.prefill import paged_prefill_attention

COMMON = {
    "q": np.float32, "block_table": np.int32, "unowned_block": np.int32, "seq_lens": np.int32,
    "query_start_loc": np.int32, "scale": np.float64, "expected": np.float64,
}
MODEL_ARRAYS = dict(COMMON, k_pool=np.float32, v_pool=np.float32)
FP8_ARRAYS = dict(COMMON, k_pool=np.uint8, v_pool=np.uint8, k_scale=np.float32,
                  v_scale=np.float32, expected_unquantized=np.float64)
KV_TILE = 32  # the kernel's KV tokens per pipeline stage


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    root = tmp_path_factory.mktemp("golden")
    assert main(["--out", str(root), "--chapter", "10"]) == 0
    return root


def read_case(case_dir):
    arrays = {p.stem: np.load(p) for p in case_dir.glob("*.npy")}
    params = dict(line.split(" ", 1) for line in (case_dir / "case.txt").read_text().splitlines())
    return arrays, params


@pytest.fixture(scope="module")
def cases(golden):
    return [(spec, *read_case(golden / "ch10" / spec.name)) for spec in CH10_VARLEN]


def read_pools(a):
    """The pools as the kernel reads them: float64, dequantized for fp8."""
    if a["k_pool"].dtype == np.uint8:
        return dequantize_pools(a["k_pool"], a["v_pool"], a["k_scale"], a["v_scale"])
    return a["k_pool"].astype(np.float64), a["v_pool"].astype(np.float64)


def reference(a, **changes):
    k, v = read_pools(a)
    args = dict(q=a["q"], k_pool=k, v_pool=v, block_table=a["block_table"],
                context_lens=a["seq_lens"], query_start_loc=a["query_start_loc"],
                scale=float(a["scale"]))
    args.update(changes)
    return paged_prefill_attention(**args)


# ---------------------------------------------------------------- files


def test_writes_every_case_and_a_stamp(golden):
    assert CHAPTERS[10].__name__ == "chapter_10"
    names = sorted(p.name for p in (golden / "ch10").iterdir() if p.name.startswith("varlen_"))
    assert names == sorted(c.name for c in CH10_VARLEN)
    assert len(set(names)) == len(CH10_VARLEN)
    plans = sorted(p.name for p in (golden / "ch10").iterdir() if p.name.startswith("plan_"))
    assert plans == sorted(c.name for c in CH10_PLANS)  # the planner's (golden_ch10_plan.py)
    assert (golden / "golden.stamp").read_text() == "ch10\n"


def test_rerun_gives_identical_bytes(golden, tmp_path):
    main(["--out", str(tmp_path), "--chapter", "10"])
    for old in (golden / "ch10").rglob("*.*"):
        assert (tmp_path / old.relative_to(golden)).read_bytes() == old.read_bytes(), old


def test_output_is_small(golden):
    total = sum(p.stat().st_size for p in (golden / "ch10").rglob("*") if p.is_file())
    assert total < 25e6, total


def test_names_and_params_describe_the_case(cases):
    for spec, a, params in cases:
        m = re.fullmatch(r"varlen_(fp8_)?(fp16|bf16)_d(\d+)_bs(\d+)_g(\d+)_\w+", spec.name)
        assert m, spec.name
        assert (bool(m[1]), m[2], int(m[3]), int(m[4]), int(m[5])) == (
            spec.fp8, spec.dtype, spec.head_size, spec.block_size, spec.group), spec.name
        atol, rtol = TOLERANCES[spec.dtype]
        expected = {
            "kind": "varlen_attention", "batch_kind": spec.kind, "dtype": spec.dtype,
            "kv_dtype": "fp8_e4m3" if spec.fp8 else spec.dtype, "fp8": str(int(spec.fp8)),
            "batch": str(len(spec.new_lens)), "num_tokens": str(sum(spec.new_lens)),
            "num_heads": str(spec.num_heads), "num_kv_heads": str(spec.num_kv_heads),
            "head_size": str(spec.head_size), "block_size": str(spec.block_size),
            "num_blocks": str(spec.num_blocks), "max_blocks_per_seq": str(spec.max_blocks_per_seq),
            "x": str(16 if spec.fp8 else pack_x(spec.dtype)),
            "prefix_lens": ",".join(map(str, spec.prefix_lens)),
            "new_lens": ",".join(map(str, spec.new_lens)),
            "seq_lens": ",".join(map(str, spec.seq_lens)),
            "atol": str(atol), "rtol": str(rtol), "note": spec.note,
        }
        assert {k: params[k] for k in expected} == expected, spec.name
        assert ("fp8_atol" in params) == spec.fp8
        if spec.fp8:
            assert (params["fp8_atol"], params["fp8_rtol"]) == (str(FP8_ATOL), str(FP8_RTOL))


def test_array_names_dtypes_and_shapes(cases):
    for spec, a, _ in cases:
        want = dict(FP8_ARRAYS if spec.fp8 else MODEL_ARRAYS)
        if spec.name in FIRST_KEYS_CASES:
            want["expected_first_keys"] = np.float64
        assert set(a) == set(want), spec.name
        for key, dtype in want.items():
            assert a[key].dtype == dtype, (spec.name, key)
        batch, tokens = len(spec.new_lens), sum(spec.new_lens)
        hkv, d, bs = spec.num_kv_heads, spec.head_size, spec.block_size
        x = 16 if spec.fp8 else pack_x(spec.dtype)
        assert a["q"].shape == a["expected"].shape == (tokens, spec.num_heads, d)
        assert a["k_pool"].shape == (spec.num_blocks, hkv, d // x, bs, x)
        assert a["v_pool"].shape == (spec.num_blocks, hkv, d, bs)
        assert a["block_table"].shape == (batch, spec.max_blocks_per_seq)
        assert a["seq_lens"].tolist() == list(spec.seq_lens)
        qsl = a["query_start_loc"]
        assert qsl.shape == (batch + 1,) and qsl[0] == 0 and qsl[-1] == tokens
        assert np.diff(qsl).tolist() == list(spec.new_lens)
        assert (np.diff(qsl) <= a["seq_lens"]).all()
        assert a["unowned_block"].shape == a["scale"].shape == ()
        assert a["scale"] == 1.0 / np.sqrt(d)
        if spec.fp8:
            assert a["k_scale"].shape == a["v_scale"].shape == ()
            assert a["expected_unquantized"].shape == a["expected"].shape
            assert len({float(a["k_scale"]), float(a["v_scale"]), 1.0}) == 3, spec.name


def test_inputs_hold_dtype_values_in_permuted_nan_poisoned_pools(cases):
    for spec, a, _ in cases:
        np.testing.assert_array_equal(round_to(a["q"], spec.dtype), a["q"])
        lens, table = a["seq_lens"], a["block_table"]
        owned = []
        for row, n in zip(table, lens):
            count = blocks_for(int(n), spec.block_size)
            assert (row[count:] == -1).all() and (row[:count] >= 0).all(), spec.name
            owned += row[:count].tolist()
        distinct = set(owned)
        shared = sum(spec.prefix_lens[s] // spec.block_size for s, _ in spec.twins)
        assert len(owned) - len(distinct) == shared, spec.name  # only twins share blocks
        assert max(owned, default=0) < spec.num_blocks
        assert len(owned) < 2 or owned != list(range(len(owned))), spec.name
        assert int(a["unowned_block"]) not in distinct
        if spec.fp8:  # NaN is the byte 0x7F: nowhere but in unused slots
            for pool in (a["k_pool"], a["v_pool"]):
                assert (pool[a["unowned_block"]] == E4M3_NAN).all()
        k, v = read_pools(a)
        k_dense, v_dense = paged_gather(k, v, table, lens, table.shape[1] * spec.block_size)
        for b, n in enumerate(lens):
            for dense in (k_dense, v_dense):
                assert np.isfinite(dense[b, :n]).all(), spec.name
                if not spec.fp8:
                    np.testing.assert_array_equal(round_to(dense[b, :n], spec.dtype), dense[b, :n])
        # Finite exactly in the owned slots: past each end, and in other blocks, NaN.
        per_token = spec.num_kv_heads * spec.head_size
        stored = sum(n for b, n in enumerate(lens) if b not in {t for _, t in spec.twins})
        twin_tails = sum(int(lens[t]) - spec.prefix_lens[s] // spec.block_size * spec.block_size
                         for s, t in spec.twins)
        for pool in (k, v):
            assert np.isfinite(pool).sum() == (stored + twin_tails) * per_token, spec.name
            assert np.isnan(pool[a["unowned_block"]]).all()
        assert spec.num_blocks >= len(owned) + 6


# ---------------------------------------------------------------- expected


def test_expected_is_the_reference_of_the_stored_inputs(cases):
    for spec, a, _ in cases:
        np.testing.assert_array_equal(reference(a), a["expected"], err_msg=spec.name)
        assert np.isfinite(a["expected"]).all(), spec.name
        # Padding entries replaced by the unowned, all-NaN block: still never read.
        table = np.where(a["block_table"] < 0, a["unowned_block"], a["block_table"])
        np.testing.assert_array_equal(reference(a, block_table=table), a["expected"])


def test_first_keys_cut_rows_that_see_further_and_only_those(cases):
    """expected_first_keys (the core kv_end test's): every row's keys cut at the sequence's
    first `first_keys` tokens. The cases must have rows that see past the cut (else a mask
    without kv_end would pass) and rows whose causal end is already inside it."""
    seen = set()
    for spec, a, p in cases:
        if spec.name not in FIRST_KEYS_CASES:
            assert "first_keys" not in p, spec.name
            continue
        seen.add(spec.name)
        k = int(p["first_keys"])
        assert k % 8 == 0 and k % 16 != 0 or spec.fp8, (spec.name, k)  # inside a 16-token half
        cut = reference(a, kv_limit=k)
        np.testing.assert_array_equal(cut, a["expected_first_keys"], err_msg=spec.name)
        qsl, lens = a["query_start_loc"], a["seq_lens"]
        pos = np.concatenate([np.arange(l - (qsl[b + 1] - qsl[b]), l) for b, l in enumerate(lens)])
        assert (pos >= k).any(), spec.name
        differs = np.abs(cut - a["expected"]).max(axis=(1, 2)) > 0
        np.testing.assert_array_equal(differs, pos >= k, err_msg=spec.name)
    assert seen == set(FIRST_KEYS_CASES)


def test_rows_of_a_sequence_without_new_tokens_are_absent(cases):
    checked = 0
    for spec, a, _ in cases:
        qsl = a["query_start_loc"]
        idle = [b for b, n in enumerate(spec.new_lens) if n == 0]
        if not idle:
            continue
        # Dropping the idle sequences from the batch changes no row.
        busy = [b for b, n in enumerate(spec.new_lens) if n > 0]
        k, v = read_pools(a)
        qsl_busy = np.concatenate([[0], np.cumsum([spec.new_lens[b] for b in busy])])
        again = paged_prefill_attention(a["q"], k, v, a["block_table"][busy], a["seq_lens"][busy],
                                        qsl_busy, float(a["scale"]))
        np.testing.assert_array_equal(again, a["expected"], err_msg=spec.name)
        assert all(qsl[b] == qsl[b + 1] for b in idle)
        checked += 1
    assert checked >= 3


def test_decode_batches_equal_the_decode_reference(cases):
    checked = 0
    for spec, a, _ in cases:
        if spec.kind != "decode":
            continue
        args = (a["q"], a["k_pool"], a["v_pool"], a["block_table"], a["seq_lens"],
                float(a["scale"]), spec.block_size)
        if spec.fp8:
            dec = paged_decode_attention_fp8(*args, a["k_scale"], a["v_scale"])
        else:
            dec = paged_decode_attention(*args)
        np.testing.assert_allclose(a["expected"], dec, rtol=1e-12, atol=1e-12, err_msg=spec.name)
        checked += 1
    assert checked >= 4


def test_last_new_token_of_every_sequence_equals_decode(cases):
    for spec, a, _ in cases:
        qsl, lens = a["query_start_loc"], a["seq_lens"]
        busy = np.array([n > 0 for n in spec.new_lens])
        rows = [int(qsl[b + 1]) - 1 for b in range(len(lens)) if busy[b]]
        k, v = read_pools(a)
        dec = paged_decode_attention(a["q"][rows], k, v, a["block_table"][busy], lens[busy],
                                     float(a["scale"]), spec.block_size)
        np.testing.assert_allclose(a["expected"][rows], dec, rtol=1e-12, atol=1e-12,
                                   err_msg=spec.name)


def test_twins_give_equal_rows(cases):
    checked = 0
    for spec, a, params in cases:
        qsl = a["query_start_loc"]
        for s, t in spec.twins:
            assert params["twins"] == f"{s},{t}"
            np.testing.assert_array_equal(a["expected"][qsl[s]:qsl[s + 1]],
                                          a["expected"][qsl[t]:qsl[t + 1]])
            shared = spec.prefix_lens[s] // spec.block_size
            assert shared >= 2
            assert (a["block_table"][s, :shared] == a["block_table"][t, :shared]).all()
            count = spec.blocks_needed[s]
            assert not set(a["block_table"][s, shared:count]) & set(a["block_table"][t, shared:count])
            checked += 1
    assert checked >= 1


def test_fp8_price_stays_within_chapter_6_bound(cases):
    for spec, a, _ in cases:
        if spec.fp8:
            err = np.abs(a["expected"] - a["expected_unquantized"])
            bound = FP8_ATOL + FP8_RTOL * np.abs(a["expected_unquantized"])
            # Chapter 6's decodes use at most 0.44 of it; a prefill row that sees only
            # ~20 tokens uses up to ~0.62: the kernel's own rounding (the dtype's
            # tolerance) still fits in what is left.
            assert (err <= 0.7 * bound).all(), (spec.name, (err / bound).max())
            # ... and forgetting the scales is far outside it.
            unscaled = reference(a, k_pool=read_pools(a)[0] / float(a["k_scale"]),
                                 v_pool=read_pools(a)[1] / float(a["v_scale"]))
            assert not (np.abs(unscaled - a["expected_unquantized"]) <= bound).all(), spec.name


# ---------------------------------------------------------------- tolerances


def within_tolerance(got, expected, dtype, fraction=1.0):
    atol, rtol = TOLERANCES[dtype]
    return np.all(np.abs(got - expected) <= fraction * (atol + rtol * np.abs(expected)))


def flash_kernel(a, dtype, chunk=None, causal_shift=0, positions="end", kv_tile=KV_TILE):
    """An honest tensor-core flash kernel in float32: per KV tile of 32 tokens, scores with
    fp32 accumulation, a running max and sum, softmax weights rounded to the dtype before
    the P.V product; with `chunk`, the KV is cut into chunks whose normalized partials are
    merged by log-sum-exp (the split items). The output is rounded to the dtype.
    causal_shift=1 lets each token see the next one; positions="start" places the new
    tokens at 0 .. n_b - 1 instead of at the end of the sequence (two classic mistakes)."""
    qsl, lens = a["query_start_loc"], a["seq_lens"]
    k, v = read_pools(a)
    bs = k.shape[3]
    k_dense, v_dense = paged_gather(k, v, a["block_table"], lens, a["block_table"].shape[1] * bs)
    k_dense, v_dense = k_dense.astype(np.float32), v_dense.astype(np.float32)
    hq, hkv = a["q"].shape[1], k.shape[1]
    group = hq // hkv
    scale = np.float32(a["scale"])
    out = np.zeros(a["q"].shape)
    for b in range(len(lens)):
        start, n, length = int(qsl[b]), int(qsl[b + 1] - qsl[b]), int(lens[b])
        if n == 0:
            continue
        first = length - n if positions == "end" else 0
        pos = first + np.arange(n) + causal_shift  # the last position each row sees
        visible = min(length, int(pos.max()) + 1)
        for h in range(hq):
            g = h // group
            q = a["q"][start:start + n, h].astype(np.float32)
            s_all = scale * (q @ k_dense[b, :visible, g].T)  # [n, visible]
            s_all = np.where(np.arange(visible)[None, :] <= pos[:, None], s_all, -np.inf)
            step = chunk or visible
            parts = []
            for c0 in range(0, visible, step):
                m = np.full(n, -np.inf, np.float32)
                l = np.zeros(n, np.float32)
                acc = np.zeros((n, q.shape[1]), np.float32)
                for t0 in range(c0, min(c0 + step, visible), kv_tile):
                    t1 = min(t0 + kv_tile, c0 + step, visible)
                    s = s_all[:, t0:t1]
                    m_new = np.maximum(m, s.max(axis=1))
                    safe = np.where(np.isfinite(m_new), m_new, 0).astype(np.float32)
                    p = np.exp(s - safe[:, None])
                    alpha = np.where(np.isfinite(m), np.exp(m - safe), 0).astype(np.float32)
                    p_low = round_to(p, dtype).astype(np.float32)
                    l = alpha * l + p.sum(axis=1)
                    acc = alpha[:, None] * acc + p_low @ v_dense[b, t0:t1, g]
                    m = m_new
                parts.append((m, l, acc / np.where(l > 0, l, 1)[:, None]))
            if len(parts) == 1:
                o = parts[0][2]
            else:
                ms = np.stack([p[0] for p in parts])
                big = ms.max(axis=0)
                w = np.stack([p[1] for p in parts]) * np.where(np.isfinite(ms), np.exp(ms - big), 0)
                o = np.einsum("cn,cnd->nd", w, np.stack([p[2] for p in parts])) / w.sum(axis=0)[:, None]
            out[start:start + n, h] = round_to(o, dtype)
    return out


def test_tolerances_admit_an_honest_flash_kernel_split_or_not(cases):
    for spec, a, _ in cases:
        for chunk in (None, 32, 64, 96):  # the C++ tests force these chunk sizes
            got = flash_kernel(a, spec.dtype, chunk=chunk)
            assert within_tolerance(got, a["expected"], spec.dtype, 0.5), (spec.name, chunk)


def test_tolerances_reject_classic_varlen_mistakes(cases):
    seen_future, at_start = 0, 0
    for spec, a, _ in cases:
        # Seeing one token too far: wrong wherever a row is not its sequence's last.
        if any(n > 1 for n in spec.new_lens):
            assert not within_tolerance(flash_kernel(a, spec.dtype, causal_shift=1),
                                        a["expected"], spec.dtype), spec.name
            seen_future += 1
        # New tokens placed at the sequence's start, ignoring the cached prefix.
        if any(p > 0 and n > 0 for p, n in zip(spec.prefix_lens, spec.new_lens)):
            assert not within_tolerance(flash_kernel(a, spec.dtype, positions="start"),
                                        a["expected"], spec.dtype), spec.name
            at_start += 1
    assert seen_future >= 12 and at_start >= 18


def test_large_scores_move_the_running_max_between_kv_tiles(cases):
    (spec, a, _), = [c for c in cases if "large_scores" in c[0].name]
    assert spec.q_std > 1
    # Forgetting to rescale the running sum when the max moves is visible.
    k, v = read_pools(a)
    qsl, lens = a["query_start_loc"], a["seq_lens"]
    b = 1
    n, length = int(qsl[b + 1] - qsl[b]), int(lens[b])
    k_dense, _ = paged_gather(k, v, a["block_table"], lens, a["block_table"].shape[1] * spec.block_size)
    q = a["q"][qsl[b]:qsl[b + 1], 0]
    scores = float(a["scale"]) * q @ k_dense[b, :length, 0].T
    tile_max = [scores[:, t:t + KV_TILE].max(axis=1) for t in range(0, length, KV_TILE)]
    assert np.ptp(np.stack(tile_max), axis=0).max() > 10


# ---------------------------------------------------------------- coverage


def test_cases_cover_the_required_edges():
    specs = CH10_VARLEN
    model = [c for c in specs if not c.fp8]
    fp8 = [c for c in specs if c.fp8]
    assert 20 <= len(specs) <= 30 and len(fp8) >= 3
    assert {c.dtype for c in specs} == {"fp16", "bf16"}
    assert {c.dtype for c in fp8} == {"fp16", "bf16"}
    # Pure decode batches reach 1, block_size - 1, block_size, block_size + 1, 33, ~100.
    decode = [c for c in model if c.kind == "decode"]
    lens = {n for c in decode for n in c.seq_lens}
    assert {1, 33} <= lens and any(95 <= n <= 105 for n in lens)
    for bs in (8, 16, 32):
        edge = {n for c in decode if c.block_size == bs for n in c.seq_lens}
        assert {bs - 1, bs, bs + 1} <= edge, bs
    # Spec-decode verification: n_b from 2 to 8.
    assert {n for c in specs if c.kind == "spec_decode" for n in c.new_lens} >= {2, 3, 4, 5, 8}
    # Chunked prefill: chunks of 20..150 over prefixes up to 300, starting mid-block.
    chunks = [(p, n, c.block_size) for c in model for p, n in zip(c.prefix_lens, c.new_lens) if n >= 20]
    assert min(n for _, n, _ in chunks) == 20 and max(n for _, n, _ in chunks) == 150
    assert max(p for p, _, _ in chunks) == 300 and min(p for p, _, _ in chunks) == 0
    assert sum(p % bs != 0 for p, _, bs in chunks) >= 4  # starting mid-block
    # Mixed batches with an idle sequence between others, and one before the first.
    mixed = [c for c in specs if 0 in c.new_lens]
    assert any(0 in c.new_lens[1:-1] for c in mixed) and any(c.new_lens[0] == 0 for c in mixed)
    assert any(0 in c.seq_lens for c in specs)  # an entirely empty sequence
    assert any(c.kind == "mixed" and max(c.new_lens) >= 20 and 1 in c.new_lens for c in specs)
    # GQA groups 1, 2, 4, 8, MQA with more than 16 rows per token's tile... and one of 3.
    assert {c.group for c in specs} >= {1, 2, 3, 4, 8, 16, 32}
    assert any(c.num_kv_heads == 1 and c.num_heads >= 8 and max(c.new_lens) * c.group > 64
               for c in specs)
    assert {c.head_size for c in model} >= {64, 80, 96, 112, 128, 256}
    for dtype in ("fp16", "bf16"):
        assert {c.block_size for c in model if c.dtype == dtype} == {8, 16, 32}, dtype
    # Some tile of 64 rows is not a sequence's only one.
    assert sum(max(c.new_lens) * c.group > TILE_ROWS for c in specs) >= 4
    # fp8: block sizes 16 and 32, head sizes multiples of 16, scales that are not 1.
    assert {c.block_size for c in fp8} == {16, 32}
    assert all(c.head_size % 16 == 0 and 1.0 not in (c.k_scale, c.v_scale) for c in fp8)
    assert {c.kind for c in fp8} >= {"decode", "mixed"}
    # Small for the emulator.
    for c in specs:
        assert c.work <= 3000 and len(c.new_lens) <= 8 and c.num_heads <= 32, c.name
    assert sum(c.work for c in specs) <= 12000
    assert sum(c.q_std > 1 for c in specs) == 1
    assert sum(bool(c.twins) for c in specs) >= 1
