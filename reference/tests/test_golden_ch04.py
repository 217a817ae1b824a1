"""Chapter 4/5's golden cases: they agree with the reference, cover the edges and can see bugs."""

import re

import numpy as np
import pytest

from pa_ref import paged_gather, round_to
from pa_ref.golden import CHAPTERS, main
from pa_ref.golden_ch04 import CH04_DECODE
from pa_ref.golden_io import TOLERANCES
from pa_ref.paged import blocks_for, pack_x
from pa_ref.paged_attention import (
    PARTITION_SIZE,
    paged_decode_attention,
    partitioned_decode_attention,
)

ARRAYS = {
    "q": np.float32,
    "k_pool": np.float32,
    "v_pool": np.float32,
    "block_table": np.int32,
    "unowned_block": np.int32,
    "context_lens": np.int32,
    "scale": np.float64,
    "expected": np.float64,
}


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    root = tmp_path_factory.mktemp("golden")
    assert main(["--out", str(root), "--chapter", "4"]) == 0
    return root


def read_case(case_dir):
    arrays = {p.stem: np.load(p) for p in case_dir.glob("*.npy")}
    params = dict(line.split(" ", 1) for line in (case_dir / "case.txt").read_text().splitlines())
    return arrays, params


@pytest.fixture(scope="module")
def cases(golden):
    return [(spec, *read_case(golden / "ch04" / spec.name)) for spec in CH04_DECODE]


def inputs(a):
    """The reference's arguments, in order, from a case's arrays."""
    return (a["q"], a["k_pool"], a["v_pool"], a["block_table"], a["context_lens"], a["scale"],
            a["k_pool"].shape[3])


def test_writes_every_case_and_a_stamp(golden):
    assert 4 in CHAPTERS
    names = sorted(p.name for p in (golden / "ch04").iterdir())
    assert names == sorted(c.name for c in CH04_DECODE)
    assert len(set(names)) == len(CH04_DECODE)
    assert (golden / "golden.stamp").read_text() == "ch04\n"


def test_rerun_gives_identical_bytes(golden, tmp_path):
    main(["--out", str(tmp_path), "--chapter", "4"])
    for old in (golden / "ch04").rglob("*.*"):
        assert (tmp_path / old.relative_to(golden)).read_bytes() == old.read_bytes(), old


def test_output_is_small(golden):
    # The C++ tests load every case on a CPU emulator: keep the set small.
    total = sum(p.stat().st_size for p in (golden / "ch04").rglob("*") if p.is_file())
    assert total < 25e6, total


def test_names_and_params_describe_the_case(cases):
    for spec, a, params in cases:
        m = re.fullmatch(r"decode_(fp16|bf16|fp32)_d(\d+)_bs(\d+)_g(\d+)_\w+", spec.name)
        assert m, spec.name
        assert (m[1], int(m[2]), int(m[3]), int(m[4])) == (
            spec.dtype, spec.head_size, spec.block_size, spec.group), spec.name
        expected = {
            "kind": "paged_decode", "dtype": spec.dtype, "num_blocks": str(spec.num_blocks),
            "block_size": str(spec.block_size), "num_kv_heads": str(spec.num_kv_heads),
            "num_heads": str(spec.num_heads), "head_size": str(spec.head_size),
            "x": str(pack_x(spec.dtype)), "max_blocks_per_seq": str(spec.max_blocks_per_seq),
            "context_lens": ",".join(map(str, spec.context_lens)),
            "atol": str(TOLERANCES[spec.dtype][0]), "rtol": str(TOLERANCES[spec.dtype][1]),
            "partition_size": str(PARTITION_SIZE), "note": spec.note,
        }
        assert {k: params[k] for k in expected} == expected, spec.name
        assert int(params["seed"]) >= 0 and params["batch"] == str(len(spec.context_lens))


def test_array_names_dtypes_and_shapes(cases):
    for spec, a, _ in cases:
        assert set(a) == set(ARRAYS), spec.name
        for key, dtype in ARRAYS.items():
            assert a[key].dtype == dtype, (spec.name, key)
        batch, x = len(spec.context_lens), pack_x(spec.dtype)
        hkv, d, bs = spec.num_kv_heads, spec.head_size, spec.block_size
        assert a["q"].shape == (batch, spec.num_heads, d)
        assert a["k_pool"].shape == (spec.num_blocks, hkv, d // x, bs, x)
        assert a["v_pool"].shape == (spec.num_blocks, hkv, d, bs)
        assert a["block_table"].shape == (batch, spec.max_blocks_per_seq)
        assert a["unowned_block"].shape == a["scale"].shape == ()
        assert a["context_lens"].tolist() == list(spec.context_lens)
        assert a["expected"].shape == a["q"].shape
        assert a["scale"] == 1.0 / np.sqrt(d)


def test_inputs_hold_dtype_values_in_permuted_nan_poisoned_pools(cases):
    scattered = 0
    for spec, a, _ in cases:
        lens, table = a["context_lens"], a["block_table"]
        np.testing.assert_array_equal(round_to(a["q"], spec.dtype), a["q"])
        # Each row: the blocks it needs, then -1 padding; no block is shared.
        owned = []
        for row, n in zip(table, lens):
            count = blocks_for(int(n), spec.block_size)
            assert (row[count:] == -1).all() and (row[:count] >= 0).all(), spec.name
            owned += row[:count].tolist()
        assert len(set(owned)) == len(owned) and max(owned, default=0) < spec.num_blocks
        # Physical ids are scattered: never simply 0, 1, 2, ... (the logical index).
        assert len(owned) < 2 or owned != list(range(len(owned))), spec.name
        scattered += owned != sorted(owned)
        # Owned slots are finite dtype values ...
        k_dense, v_dense = paged_gather(a["k_pool"], a["v_pool"], table, lens,
                                        table.shape[1] * spec.block_size)
        for b, n in enumerate(lens):
            for dense in (k_dense, v_dense):
                assert np.isfinite(dense[b, :n]).all(), spec.name
                np.testing.assert_array_equal(round_to(dense[b, :n], spec.dtype), dense[b, :n])
        # ... and every other slot is NaN: past the ends, and in unowned blocks.
        per_token = spec.num_kv_heads * spec.head_size
        for pool in (a["k_pool"], a["v_pool"]):
            assert np.isfinite(pool).sum() == lens.sum() * per_token, spec.name
            assert np.isnan(pool[a["unowned_block"]]).all()
        assert int(a["unowned_block"]) not in owned
        assert spec.num_blocks >= len(owned) + 6  # far more blocks than needed
    assert scattered >= len(cases) - 5  # (a case with one block or none cannot be out of order)


def test_expected_is_the_reference_of_the_stored_inputs(cases):
    for spec, a, _ in cases:
        again = paged_decode_attention(*inputs(a))
        np.testing.assert_array_equal(again, a["expected"], err_msg=spec.name)
        assert np.isfinite(a["expected"]).all()
        assert (a["expected"][a["context_lens"] == 0] == 0).all()
        # v2 (partitions of 512, then the merge) gives the same output.
        v2 = partitioned_decode_attention(*inputs(a), partition_size=PARTITION_SIZE)
        np.testing.assert_allclose(v2, a["expected"], rtol=1e-12, atol=1e-12, err_msg=spec.name)
        # Padding entries replaced by the unowned, all-NaN block: still never read.
        table = np.where(a["block_table"] < 0, a["unowned_block"], a["block_table"])
        args = list(inputs(a))
        args[3] = table
        np.testing.assert_array_equal(paged_decode_attention(*args), a["expected"])


# ---------------------------------------------------------------- tolerances


def within_tolerance(got, expected, dtype, fraction=1.0):
    atol, rtol = TOLERANCES[dtype]
    return np.all(np.abs(got - expected) <= fraction * (atol + rtol * np.abs(expected)))


def per_head(a, kernel, kv_head=lambda h, group, hkv: h // group):
    """Run kernel(q_row [D], keys [n, D], values [n, D]) for every (b, h) in fp32."""
    q, lens = a["q"], a["context_lens"]
    bs = a["k_pool"].shape[3]
    k, v = paged_gather(a["k_pool"], a["v_pool"], a["block_table"], lens,
                        a["block_table"].shape[1] * bs)
    k, v = k.astype(np.float32), v.astype(np.float32)
    batch, num_heads, _ = q.shape
    hkv = k.shape[2]
    out = np.zeros(q.shape)
    for b in range(batch):
        n = int(lens[b])
        for h in range(num_heads if n else 0):
            g = kv_head(h, num_heads // hkv, hkv)
            out[b, h] = kernel(q[b, h], k[b, :n, g], v[b, :n, g])
    return out


def v1_kernel(a, dtype, **kw):
    """An honest v1: fp32 math, softmax weights and output rounded to the dtype."""
    scale = np.float32(a["scale"])

    def kernel(q, keys, values):
        scores = scale * (keys @ q)
        e = np.exp(scores - scores.max())
        weights = round_to(e / e.sum(), dtype).astype(np.float32)
        return round_to(weights @ values, dtype)

    return per_head(a, kernel, **kw)


def v2_kernel(a, dtype, rescale=True, partition_size=PARTITION_SIZE):
    """An honest v2: per-partition fp32 max and exp sum, partial outputs stored in the
    dtype (vLLM's tmp_out), then an fp32 merge. rescale=False forgets exp(m_p - M)."""
    scale = np.float32(a["scale"])

    def kernel(q, keys, values):
        ms, ls, os = [], [], []
        for start in range(0, len(keys), partition_size):
            scores = scale * (keys[start:start + partition_size] @ q)
            m = scores.max()
            e = np.exp(scores - m)
            weights = round_to(e / e.sum(), dtype).astype(np.float32)
            ms.append(m)
            ls.append(e.sum())
            os.append(round_to(weights @ values[start:start + partition_size], dtype))
        ms, ls, os = np.float32(ms), np.float32(ls), np.float32(os)
        w = ls * np.exp(ms - ms.max()) if rescale else ls
        return round_to((w / w.sum()) @ os, dtype)

    return per_head(a, kernel)


def test_tolerances_admit_honest_v1_and_v2_kernels(cases):
    for spec, a, _ in cases:
        # Half the tolerance: room for kernels that round a little differently.
        for kernel in (v1_kernel, v2_kernel):
            got = kernel(a, spec.dtype)
            assert within_tolerance(got, a["expected"], spec.dtype, 0.5), (spec.name, kernel)


def test_tolerances_reject_a_wrong_kv_head(cases):
    checked = 0
    for spec, a, _ in cases:
        # With one KV head, or one query head per KV head, h % Hkv is the right head.
        if 1 < spec.num_kv_heads < spec.num_heads and a["context_lens"].any():
            wrong = v1_kernel(a, spec.dtype, kv_head=lambda h, group, hkv: h % hkv)
            assert not within_tolerance(wrong, a["expected"], spec.dtype), spec.name
            checked += 1
    assert checked >= 10


def test_tolerances_reject_a_merge_without_rescaling(cases):
    checked = 0
    for spec, a, _ in cases:
        if (a["context_lens"] > PARTITION_SIZE).any():
            wrong = v2_kernel(a, spec.dtype, rescale=False)
            assert not within_tolerance(wrong, a["expected"], spec.dtype), spec.name
            checked += 1
    assert checked >= 8


def test_large_scores_overflow_without_the_max_subtraction(cases):
    (spec, a, _), = [c for c in cases if "large_scores" in c[0].name]
    scale = np.float32(a["scale"])

    def no_max(q, keys, values):
        e = np.exp(scale * (keys @ q))  # fp32: exp(>88.7) is inf, and inf / inf is NaN
        return (e / e.sum()) @ values

    with np.errstate(over="ignore", invalid="ignore"):
        assert not np.isfinite(per_head(a, no_max)).all()
    assert np.isfinite(a["expected"]).all()


# ---------------------------------------------------------------- coverage


def test_cases_cover_the_required_edges():
    specs = CH04_DECODE
    assert 30 <= len(specs) <= 40
    lens = {n for c in specs for n in c.context_lens}
    assert {0, 1, 511, 512, 513, 1024, 1025} <= lens
    for bs in (8, 16, 32):
        edge = {n for c in specs if c.block_size == bs for n in c.context_lens}
        assert {bs - 1, bs, bs + 1} <= edge, bs
    assert {c.group for c in specs} >= {1, 2, 4, 8}
    assert any(c.num_kv_heads == 1 and c.num_heads > 1 for c in specs)  # MQA
    assert any(c.num_kv_heads > 2 and c.group > 1 for c in specs)
    assert {c.head_size for c in specs} >= {64, 80, 96, 112, 128, 256}
    for dtype, sizes in (("fp16", {8, 16, 32}), ("bf16", {8, 16, 32}), ("fp32", {16, 32})):
        assert {c.block_size for c in specs if c.dtype == dtype} == sizes, dtype
    counts = {d: sum(c.dtype == d for c in specs) for d in ("fp16", "bf16", "fp32")}
    assert counts["fp32"] == 2 and counts["bf16"] >= 4 and counts["fp16"] > counts["bf16"]
    assert sum(c.q_std > 1 for c in specs) == 1
    assert any(set(c.context_lens) == {0} for c in specs)
    assert any(0 in c.context_lens and max(c.context_lens) > 0 for c in specs)  # mixed
    for c in specs:  # small enough for the CPU emulator
        assert len(c.context_lens) <= 3 and c.num_heads <= 16 and max(c.context_lens) <= 1100
    # Some rows fill their table exactly; some rows end in padding.
    assert any(c.spare_width == 0 for c in specs) and any(c.spare_width > 0 for c in specs)
