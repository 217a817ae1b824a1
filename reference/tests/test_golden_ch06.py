"""Chapter 6's golden cases: the fp8 cache write and decode over an fp8 cache."""

import re

import ml_dtypes
import numpy as np
import pytest

from pa_ref import (
    E4M3_NAN,
    dequantize_e4m3,
    paged_decode_attention_fp8,
    paged_gather,
    partitioned_decode_attention_fp8,
    quantize_e4m3,
    reshape_and_cache_fp8,
    round_to,
)
from pa_ref.golden import CHAPTERS, main
from pa_ref.golden_ch06 import CH06_DECODE, CH06_QUANT, FP8_ATOL, FP8_RTOL, UNWRITTEN
from pa_ref.golden_io import TOLERANCES
from pa_ref.paged import blocks_for
from pa_ref.paged_attention import PARTITION_SIZE

QUANT_ARRAYS = {
    "k": np.float32, "v": np.float32, "slot_mapping": np.int64, "k_scale": np.float32,
    "v_scale": np.float32, "k_pool": np.uint8, "v_pool": np.uint8,
}
DECODE_ARRAYS = {
    "q": np.float32, "k_pool": np.uint8, "v_pool": np.uint8, "k_scale": np.float32,
    "v_scale": np.float32, "block_table": np.int32, "unowned_block": np.int32,
    "context_lens": np.int32, "scale": np.float64, "expected": np.float64,
    "expected_unquantized": np.float64,
}


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    root = tmp_path_factory.mktemp("golden")
    assert main(["--out", str(root), "--chapter", "6"]) == 0
    return root


def read_case(case_dir):
    arrays = {p.stem: np.load(p) for p in case_dir.glob("*.npy")}
    params = dict(line.split(" ", 1) for line in (case_dir / "case.txt").read_text().splitlines())
    return arrays, params


@pytest.fixture(scope="module")
def quant_cases(golden):
    return [(spec, *read_case(golden / "ch06" / spec.name)) for spec in CH06_QUANT]


@pytest.fixture(scope="module")
def decode_cases(golden):
    return [(spec, *read_case(golden / "ch06" / spec.name)) for spec in CH06_DECODE]


def test_writes_every_case_and_a_stamp(golden):
    assert 6 in CHAPTERS
    names = sorted(p.name for p in (golden / "ch06").iterdir())
    assert names == sorted(c.name for c in CH06_QUANT + CH06_DECODE)
    assert (golden / "golden.stamp").read_text() == "ch06\n"


def test_rerun_gives_identical_bytes(golden, tmp_path):
    main(["--out", str(tmp_path), "--chapter", "6"])
    for old in (golden / "ch06").rglob("*.*"):
        assert (tmp_path / old.relative_to(golden)).read_bytes() == old.read_bytes(), old


def test_output_is_small(golden):
    total = sum(p.stat().st_size for p in (golden / "ch06").rglob("*") if p.is_file())
    assert total < 6e6, total


# ---------------------------------------------------------------- quantized writes


def exact_in(x, dtype):
    finite = np.isfinite(x)
    return np.array_equal(round_to(x[finite], dtype), x[finite])


def test_quant_arrays_and_params(quant_cases):
    for spec, a, params in quant_cases:
        assert re.fullmatch(rf"quant_{spec.dtype}_bs{spec.block_size}_d{spec.head_size}_\w+", spec.name)
        assert set(a) == set(QUANT_ARRAYS), spec.name
        for key, dtype in QUANT_ARRAYS.items():
            assert a[key].dtype == dtype, (spec.name, key)
        t, hkv, d, bs = spec.num_tokens, spec.num_kv_heads, spec.head_size, spec.block_size
        assert a["k"].shape == a["v"].shape == (t, hkv, d) and a["slot_mapping"].shape == (t,)
        assert a["k_pool"].shape == (spec.num_blocks, hkv, d // 16, bs, 16)
        assert a["v_pool"].shape == (spec.num_blocks, hkv, d, bs)
        assert a["k_scale"].shape == a["v_scale"].shape == ()
        assert len({float(a["k_scale"]), float(a["v_scale"]), 1.0}) == 3, spec.name
        assert exact_in(a["k"], spec.dtype) and exact_in(a["v"], spec.dtype), spec.name
        assert (a["slot_mapping"] == -1).sum() == spec.num_padding > 0
        assert params["x"] == "16" and params["dtype"] == spec.dtype
        assert {k: params[k] for k in ("num_blocks", "block_size", "num_kv_heads", "head_size")} == {
            "num_blocks": str(spec.num_blocks), "block_size": str(bs),
            "num_kv_heads": str(hkv), "head_size": str(d)}


def test_quant_expected_pools_are_the_reference_write(quant_cases):
    for spec, a, _ in quant_cases:
        k_pool = np.full(a["k_pool"].shape, UNWRITTEN, dtype=np.uint8)
        v_pool = np.full(a["v_pool"].shape, UNWRITTEN, dtype=np.uint8)
        reshape_and_cache_fp8(a["k"], a["v"], k_pool, v_pool, a["slot_mapping"],
                              a["k_scale"], a["v_scale"])
        np.testing.assert_array_equal(k_pool, a["k_pool"], err_msg=spec.name)
        np.testing.assert_array_equal(v_pool, a["v_pool"], err_msg=spec.name)
        # Exactly the real tokens' bytes are written, and none of them is 0xFF.
        real = int((a["slot_mapping"] >= 0).sum())
        per_token = spec.num_kv_heads * spec.head_size
        for pool in (a["k_pool"], a["v_pool"]):
            assert (pool == UNWRITTEN).sum() == pool.size - real * per_token, spec.name


def test_quant_cases_cover_the_special_values(quant_cases):
    edges = [(s, a) for s, a, _ in quant_cases if s.edges == "values"]
    for spec, a in edges:
        for data, pool in (("k", "k_pool"), ("v", "v_pool")):
            x = a[data][a["slot_mapping"] >= 0]
            assert np.isnan(x).any() and np.isposinf(x).any() and np.isneginf(x).any()
            assert any(np.signbit(v) and np.isnan(v) for v in x.ravel())  # -NaN too
            written = set(np.unique(a[pool][a[pool] != UNWRITTEN]).tolist())
            # zeros of both signs, every subnormal step used, 448 and -448, the NaN byte
            assert {0x00, 0x80, 0x01, 0x81, 0x02, 0x07, 0x08, 0x7E, 0xFE, E4M3_NAN} <= written, spec.name
    assert {s.dtype for s, _ in edges} == {"fp16", "bf16"}
    # The random values span the whole e4m3 range: most byte values appear.
    for spec, a, _ in quant_cases:
        assert len(np.unique(a["v_pool"])) > 120, spec.name


def test_division_cases_reject_other_division_rules(quant_cases):
    checked = 0
    for spec, a, _ in quant_cases:
        if spec.edges != "division":
            continue
        reciprocal_differs = 0
        for data, scale in (("k", "k_scale"), ("v", "v_scale")):
            x, s = a[data], a[scale]
            right = quantize_e4m3(x, s)
            # Multiplying by 1 / scale ...
            by_reciprocal = quantize_e4m3(x * (np.float32(1) / s), 1.0)
            # ... or rounding the float64 quotient straight to e4m3 (no float32 step).
            table = dequantize_e4m3(np.arange(0x7F, dtype=np.uint8), 1.0)
            q64 = np.abs(x.astype(np.float64) / np.float64(s)).ravel()
            nearest = np.abs(q64[:, None] - table[None, :]).argmin(axis=1)
            direct = (nearest | np.where(np.signbit(x.ravel()), 0x80, 0)).reshape(x.shape)
            assert (direct != right).sum() >= 8, (spec.name, data)
            reciprocal_differs += (by_reciprocal != right).sum()
        assert reciprocal_differs >= 4, spec.name
        checked += 1
    assert checked == 2


# ---------------------------------------------------------------- decode


def inputs(a):
    return (a["q"], a["k_pool"], a["v_pool"], a["block_table"], a["context_lens"], a["scale"],
            a["k_pool"].shape[3], a["k_scale"], a["v_scale"])


def test_decode_names_arrays_and_params(decode_cases):
    for spec, a, params in decode_cases:
        m = re.fullmatch(r"decode_fp8_(fp16|bf16|fp32)_d(\d+)_bs(\d+)_g(\d+)_\w+", spec.name)
        assert m and (m[1], int(m[2]), int(m[3]), int(m[4])) == (
            spec.dtype, spec.head_size, spec.block_size, spec.group), spec.name
        assert set(a) == set(DECODE_ARRAYS), spec.name
        for key, dtype in DECODE_ARRAYS.items():
            assert a[key].dtype == dtype, (spec.name, key)
        batch, hkv, d, bs = len(spec.context_lens), spec.num_kv_heads, spec.head_size, spec.block_size
        assert a["q"].shape == a["expected"].shape == a["expected_unquantized"].shape == (
            batch, spec.num_heads, d)
        assert a["k_pool"].shape == (spec.num_blocks, hkv, d // 16, bs, 16)
        assert a["v_pool"].shape == (spec.num_blocks, hkv, d, bs)
        assert a["block_table"].shape == (batch, spec.max_blocks_per_seq)
        for key in ("k_scale", "v_scale", "unowned_block", "scale"):
            assert a[key].shape == (), key
        assert a["scale"] == 1 / np.sqrt(d)
        assert len({float(a["k_scale"]), float(a["v_scale"]), 1.0}) == 3, spec.name
        atol, rtol = TOLERANCES[spec.dtype]
        expected = {
            "kind": "paged_decode_fp8", "dtype": spec.dtype, "kv_dtype": "fp8_e4m3", "x": "16",
            "num_blocks": str(spec.num_blocks), "block_size": str(bs), "num_kv_heads": str(hkv),
            "num_heads": str(spec.num_heads), "head_size": str(d),
            "max_blocks_per_seq": str(spec.max_blocks_per_seq),
            "context_lens": ",".join(map(str, spec.context_lens)),
            "partition_size": str(PARTITION_SIZE), "atol": str(atol), "rtol": str(rtol),
            "fp8_atol": str(FP8_ATOL), "fp8_rtol": str(FP8_RTOL), "batch": str(batch),
        }
        assert {k: params[k] for k in expected} == expected, spec.name


def test_decode_pools_are_permuted_and_nan_poisoned(decode_cases):
    for spec, a, _ in decode_cases:
        np.testing.assert_array_equal(round_to(a["q"], spec.dtype), a["q"])
        lens, table, bs = a["context_lens"], a["block_table"], spec.block_size
        owned = []
        for row, n in zip(table, lens):
            count = blocks_for(int(n), bs)
            assert (row[count:] == -1).all() and (row[:count] >= 0).all(), spec.name
            owned += row[:count].tolist()
        assert len(set(owned)) == len(owned) and int(a["unowned_block"]) not in owned
        assert len(owned) < 2 or owned != sorted(owned), spec.name
        # Owned slots hold real bytes (never NaN); every other byte is 0x7F.
        per_token = spec.num_kv_heads * spec.head_size
        for pool in (a["k_pool"], a["v_pool"]):
            assert not (pool == 0xFF).any()
            assert (pool != E4M3_NAN).sum() == lens.sum() * per_token, spec.name
            assert (pool[a["unowned_block"]] == E4M3_NAN).all()
        k, v = paged_gather(dequantize_e4m3(a["k_pool"], a["k_scale"]),
                            dequantize_e4m3(a["v_pool"], a["v_scale"]), table, lens,
                            table.shape[1] * bs)
        for b, n in enumerate(lens):
            assert np.isfinite(k[b, :n]).all() and np.isfinite(v[b, :n]).all(), spec.name


def test_decode_expected_is_the_reference_of_the_stored_inputs(decode_cases):
    for spec, a, _ in decode_cases:
        np.testing.assert_array_equal(paged_decode_attention_fp8(*inputs(a)), a["expected"])
        v2 = partitioned_decode_attention_fp8(*inputs(a), partition_size=PARTITION_SIZE)
        np.testing.assert_allclose(v2, a["expected"], rtol=1e-12, atol=1e-12, err_msg=spec.name)
        args = list(inputs(a))
        args[3] = np.where(a["block_table"] < 0, a["unowned_block"], a["block_table"])
        np.testing.assert_array_equal(paged_decode_attention_fp8(*args), a["expected"])
        for out in (a["expected"], a["expected_unquantized"]):
            assert np.isfinite(out).all() and (out[a["context_lens"] == 0] == 0).all()


# ---------------------------------------------------------------- tolerances


def kernel(a, dtype, k_scale=None, v_scale=None, kv_head=lambda h, group, hkv: h // group):
    """An honest fp8 kernel: each byte -> float * scale in fp32, rounded to the dtype
    (vLLM converts to the cache's compute type), fp32 math, weights and output rounded."""
    k_scale = np.float32(a["k_scale"] if k_scale is None else k_scale)
    v_scale = np.float32(a["v_scale"] if v_scale is None else v_scale)
    as_float = lambda pool: pool.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    k_pool = round_to(as_float(a["k_pool"]) * k_scale, dtype)
    v_pool = round_to(as_float(a["v_pool"]) * v_scale, dtype)
    lens, table = a["context_lens"], a["block_table"]
    k, v = paged_gather(k_pool, v_pool, table, lens, table.shape[1] * k_pool.shape[3])
    k, v = k.astype(np.float32), v.astype(np.float32)
    q, scale = a["q"], np.float32(a["scale"])
    batch, num_heads, _ = q.shape
    hkv = k.shape[2]
    out = np.zeros(q.shape)
    for b in range(batch):
        n = int(lens[b])
        for h in range(num_heads if n else 0):
            g = kv_head(h, num_heads // hkv, hkv)
            scores = scale * (k[b, :n, g] @ q[b, h])
            e = np.exp(scores - scores.max())
            weights = round_to(e / e.sum(), dtype).astype(np.float32)
            out[b, h] = round_to(weights @ v[b, :n, g], dtype)
    return out


def used(got, expected, atol, rtol):
    """The largest fraction of the bound atol + rtol * |expected| that got uses."""
    return float(np.max(np.abs(got - expected) / (atol + rtol * np.abs(expected)), initial=0.0))


def test_tolerances_admit_an_honest_kernel(decode_cases):
    for spec, a, _ in decode_cases:
        out = kernel(a, spec.dtype)
        # Half of each bound: room for kernels that round a little differently.
        assert used(out, a["expected"], *TOLERANCES[spec.dtype]) < 0.5, spec.name
        assert used(out, a["expected_unquantized"], FP8_ATOL, FP8_RTOL) < 0.5, spec.name
        assert used(a["expected"], a["expected_unquantized"], FP8_ATOL, FP8_RTOL) < 0.5, spec.name


def test_tolerances_reject_scale_bugs(decode_cases):
    for spec, a, _ in decode_cases:
        if not a["context_lens"].any():
            continue
        tol = TOLERANCES[spec.dtype]
        swapped = kernel(a, spec.dtype, k_scale=a["v_scale"], v_scale=a["k_scale"])
        no_scales = kernel(a, spec.dtype, k_scale=1.0, v_scale=1.0)
        no_v_scale = kernel(a, spec.dtype, v_scale=1.0)
        assert used(swapped, a["expected"], *tol) > 1, spec.name
        assert used(no_scales, a["expected"], *tol) > 1, spec.name
        assert used(no_v_scale, a["expected"], *tol) > 1, spec.name
        # K's scale only matters where there are two keys or more to weigh.
        if a["context_lens"].max() > 1:
            no_k_scale = kernel(a, spec.dtype, k_scale=1.0)
            assert used(no_k_scale, a["expected"], *tol) > 1, spec.name
        # Forgetting the scales is far outside even the loose fp8 bound.
        assert used(no_scales, a["expected_unquantized"], FP8_ATOL, FP8_RTOL) > 2, spec.name


def test_tolerances_reject_a_wrong_kv_head(decode_cases):
    checked = 0
    for spec, a, _ in decode_cases:
        if 1 < spec.num_kv_heads < spec.num_heads and a["context_lens"].any():
            wrong = kernel(a, spec.dtype, kv_head=lambda h, group, hkv: h % hkv)
            assert used(wrong, a["expected"], *TOLERANCES[spec.dtype]) > 1, spec.name
            checked += 1
    assert checked >= 5


# ---------------------------------------------------------------- coverage


def test_cases_cover_the_required_edges():
    specs = CH06_DECODE
    assert 10 <= len(specs) <= 14
    lens = {n for c in specs for n in c.context_lens}
    assert {0, 1, 511, 512, 513, 1025} <= lens
    for bs in (8, 16, 32):
        assert {bs - 1, bs, bs + 1} <= {n for c in specs if c.block_size == bs for n in c.context_lens}
    assert {c.group for c in specs} >= {1, 2, 4, 8}
    assert {c.head_size for c in specs} >= {64, 80, 128, 256}
    counts = {d: sum(c.dtype == d for c in specs) for d in ("fp16", "bf16", "fp32")}
    assert counts["fp32"] == 1 and counts["bf16"] >= 2 and counts["fp16"] > counts["bf16"]
    # Power-of-two and other scales, never equal for K and V.
    assert any(c.k_scale in (1.7, 0.45) for c in specs) and any(c.k_scale == 0.0625 for c in specs)
    assert all(c.k_scale != c.v_scale for c in specs)
    for c in specs:  # small enough for the CPU emulator
        assert len(c.context_lens) <= 3 and c.num_heads <= 16 and max(c.context_lens) <= 1025
    assert {c.dtype for c in CH06_QUANT} == {"fp16", "bf16", "fp32"}
    assert 3 <= len(CH06_QUANT) <= 4
