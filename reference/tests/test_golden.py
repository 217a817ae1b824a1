"""The golden writer: files exist, agree with the reference, and can see bugs."""

import numpy as np
import pytest

from pa_ref import decode_attention, round_to, synthetic_trace
from pa_ref.golden import CH01_ATTENTION, TOLERANCES, main


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    root = tmp_path_factory.mktemp("golden")
    assert main(["--out", str(root), "--chapter", "1"]) == 0
    return root


def read_case(case_dir):
    arrays = {p.stem: np.load(p) for p in case_dir.glob("*.npy")}
    params = dict(line.split(" ", 1) for line in (case_dir / "case.txt").read_text().splitlines())
    return arrays, params


def attention_cases(golden):
    return [read_case(golden / "ch01" / case.name) for case in CH01_ATTENTION]


def test_writes_every_case_and_a_stamp(golden):
    names = sorted(p.name for p in (golden / "ch01").iterdir())
    assert names == sorted([c.name for c in CH01_ATTENTION] + ["trace_default"])
    assert (golden / "golden.stamp").read_text() == "ch01\n"


def test_rerun_gives_identical_bytes(golden, tmp_path):
    main(["--out", str(tmp_path), "--chapter", "1"])
    for old in (golden / "ch01").rglob("*.*"):
        assert (tmp_path / old.relative_to(golden)).read_bytes() == old.read_bytes(), old


def test_attention_case_arrays(golden):
    for arrays, params in attention_cases(golden):
        q, k, v = arrays["q"], arrays["k_cache"], arrays["v_cache"]
        lens = arrays["context_lens"]
        assert q.dtype == np.float32 and k.dtype == np.float32 and lens.dtype == np.int32
        assert arrays["scale"].shape == () and arrays["expected"].dtype == np.float64
        assert {"dtype", "note", "atol", "rtol"} <= params.keys()
        # Inputs hold exact values of the case's dtype.
        np.testing.assert_array_equal(round_to(q, params["dtype"]), q)
        for b, n in enumerate(lens):
            assert not np.isnan(k[b, :n]).any() and np.isnan(k[b, n:]).all()
            assert np.isnan(v[b, n:]).all()
        # The expected output is the reference applied to the stored inputs.
        again = decode_attention(q, k, v, lens, arrays["scale"])
        np.testing.assert_array_equal(again, arrays["expected"])


def test_cases_cover_the_required_edges():
    lens = {n for c in CH01_ATTENTION for n in c.context_lens}
    assert {0, 1, 15, 16, 17, 31, 32, 33} <= lens
    assert any(c.max_seq_len in c.context_lens for c in CH01_ATTENTION)
    assert {c.num_heads // c.num_kv_heads for c in CH01_ATTENTION} >= {1, 2, 4, 8}
    assert {c.head_size for c in CH01_ATTENTION} >= {64, 80, 128, 256}
    assert {c.dtype for c in CH01_ATTENTION} == {"fp16", "bf16", "fp32"}
    for c in CH01_ATTENTION:  # small enough for the CPU emulator
        assert len(c.context_lens) <= 4 and c.max_seq_len <= 160 and c.num_heads <= 16


def low_precision_kernel(q, k, v, lens, scale, dtype, kv_head=lambda h, group, hkv: h // group):
    """What an honest kernel does: fp32 math, weights and output rounded to the dtype."""
    batch, num_heads, _ = q.shape
    group = num_heads // k.shape[2]
    out = np.zeros(q.shape)
    for b in range(batch):
        n = lens[b]
        for h in range(num_heads if n else 0):
            g = kv_head(h, group, k.shape[2])
            scores = np.float32(scale) * (k[b, :n, g] @ q[b, h])
            weights = np.exp(scores - scores.max())
            weights = round_to(weights / weights.sum(), dtype).astype(np.float32)
            out[b, h] = round_to(weights @ v[b, :n, g], dtype)
    return out


def within_tolerance(got, expected, dtype, fraction=1.0):
    atol, rtol = TOLERANCES[dtype]
    return np.all(np.abs(got - expected) <= fraction * (atol + rtol * np.abs(expected)))


def test_tolerances_admit_an_honest_kernel_and_reject_a_wrong_head(golden):
    for arrays, params in attention_cases(golden):
        inputs = [arrays[key] for key in ("q", "k_cache", "v_cache", "context_lens", "scale")]
        dtype = params["dtype"]
        # Half the tolerance: room for kernels that round a little differently.
        honest = low_precision_kernel(*inputs, dtype)
        assert within_tolerance(honest, arrays["expected"], dtype, fraction=0.5), params["note"]
        # (With one KV head (MQA) or one query head per KV head, the bug reads the right head.)
        if 1 < int(params["num_kv_heads"]) < int(params["num_heads"]) and arrays["context_lens"].any():
            # A common bug: query head h reading KV head h % Hkv instead of h // group.
            wrong = low_precision_kernel(*inputs, dtype, kv_head=lambda h, group, hkv: h % hkv)
            assert not within_tolerance(wrong, arrays["expected"], dtype), params["note"]


def test_trace_case(golden):
    arrays, params = read_case(golden / "ch01" / "trace_default")
    prompts, outputs = synthetic_trace()
    np.testing.assert_array_equal(arrays["prompt_lens"], prompts)
    np.testing.assert_array_equal(arrays["output_lens"], outputs)
    assert arrays["prompt_lens"].dtype == np.int32 and arrays["reserved_bytes"].dtype == np.int64
    bytes_per_token = int(params["bytes_per_token"])
    assert arrays["reserved_bytes"] == 256 * 2048 * bytes_per_token
    assert arrays["used_bytes"] == (prompts.sum() + outputs.sum()) * bytes_per_token
    assert arrays["dense_seqs_in_budget"] == 64  # 16 GiB / (2048 tokens * 128 KiB)
    assert 0 < arrays["waste_fraction"] < 1
