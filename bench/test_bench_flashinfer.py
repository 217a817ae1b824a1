"""Tests of bench/bench_flashinfer.py that need no GPU.

    python -m pytest -q bench/test_bench_flashinfer.py

The skip path runs with any Python; the rest needs torch (a CPU build is enough) and NumPy,
and is skipped without them. The dry run drives the whole benchmark on the CPU at tiny
cases, with a stand-in for flashinfer written here (the wrappers' plan/run interface over
the same paged pool, computed with plain torch) and a wall-clock timer in place of CUDA
events: it checks the plumbing (cases, correctness checks, CSV and Markdown), not the
numbers, and not FlashInfer itself (the self-test runs a tiny FlashInfer decode and prefill
where there is a GPU and flashinfer).
"""

import csv
import importlib.util
import math
import os
import pathlib
import subprocess
import sys
import types

import pytest

HERE = pathlib.Path(__file__).resolve().parent
SCRIPT = HERE / "bench_flashinfer.py"


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_bench():
    sys.path.insert(0, str(HERE))
    return load("bench_flashinfer", SCRIPT)


def test_skips_cleanly_without_a_gpu(tmp_path):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")  # no GPU even where there is one
    out_csv, out_md = tmp_path / "t.csv", tmp_path / "t.md"
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--csv", str(out_csv), "--md", str(out_md)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("skipped: ")
    bench = load_bench()
    assert out_csv.read_text() == bench.bt.CSV_HEADER + "\n"
    assert (tmp_path / "t-flops.csv").read_text() == bench.FLOPS_CSV_HEADER + "\n"
    assert out_md.read_text().startswith("<!-- skipped: ")


def test_self_test_passes():
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--self-test"], capture_output=True, text=True, timeout=900
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert " 0 failed" in r.stdout


def test_cases_match_the_brief():
    bench = load_bench()
    names = [c.name for c in bench.all_cases("decode")]
    assert names[:5] == ["32/8/32/4096", "32/8/8/32768", "32/8/128/1024", "32/32/32/4096", "32/8/64/32"]
    assert "64/8/32/4096" in names and "32/1/32/4096" in names
    assert "32/8/32/4096 D64" in names and "32/8/32/4096 D256" in names
    assert sum(1 for n in names if n.endswith(" e4m3")) == 8
    pre = {c.name: c for c in bench.all_cases("prefill")}
    assert [c.q_lens[0] for c in pre.values() if c.kind == "spec"] == [4, 8]
    chunks = [c for c in pre.values() if c.kind == "prefill"]
    assert len(chunks) == 16 and all(c.b == 1 for c in chunks)
    assert {(c.q_lens[0], c.seq_lens[0] - c.q_lens[0]) for c in chunks} == {
        (c, p) for c in (512, 1024, 2048, 4096) for p in (0, 4096, 16384, 32768)
    }
    rag = bench.ragged_cases()
    assert sorted(rag[0].seq_lens) == [256] * 63 + [32768]
    assert rag[2].seq_lens == [16384] * 16 + [128] * 16


# ----------------------------------------------------------------------------- dry run


def fake_flashinfer(torch, scale_out=1.0, broken=()):
    """The two wrappers' interface, computed with torch from the paged pool (HND layout).
    scale_out multiplies every output (a wrong result); `broken` names backends that raise."""
    fi = types.SimpleNamespace(__version__="fake")

    def attend(q, k_cache, v_cache, qo, kv_ind, kv_ptr, last, page, hkv, sm_scale, ks, vs):
        out = torch.empty_like(q)
        g = q.shape[1] // hkv
        for b in range(len(kv_ptr) - 1):
            pages = kv_ind[kv_ptr[b] : kv_ptr[b + 1]].long()
            n_pages = len(pages)
            length = (n_pages - 1) * page + int(last[b])
            k = k_cache[pages].float().permute(1, 0, 2, 3).reshape(hkv, -1, q.shape[2])[:, :length] * ks
            v = v_cache[pages].float().permute(1, 0, 2, 3).reshape(hkv, -1, q.shape[2])[:, :length] * vs
            n = int(qo[b + 1] - qo[b])
            for i in range(n):
                pos = length - n + i  # bottom-right causal
                row = q[int(qo[b]) + i].float().view(hkv, g, -1)
                s = torch.einsum("hgd,hkd->hgk", row, k[:, : pos + 1]) * sm_scale
                o = torch.einsum("hgk,hkd->hgd", torch.softmax(s, -1), v[:, : pos + 1])
                out[int(qo[b]) + i] = (o.reshape(q.shape[1], -1) * scale_out).to(out.dtype)
        return out

    class Decode:
        def __init__(self, ws, layout, use_tensor_cores=False):
            assert layout == "HND"
            if ("tc" if use_tensor_cores else "cuda") in broken:
                raise NotImplementedError("this fake has no such decode")

        def plan(self, indptr, indices, last, hq, hkv, d, page, **kw):
            self.args = (indptr.cpu(), indices.cpu(), last.cpu(), hq, hkv, d, page, kw["sm_scale"])

        def run(self, q, kv, out=None, k_scale=1.0, v_scale=1.0):
            indptr, indices, last, hq, hkv, d, page, sm = self.args
            qo = list(range(q.shape[0] + 1))
            o = attend(q, kv[0], kv[1], qo, indices, indptr, last, page, hkv, sm, k_scale, v_scale)
            out.copy_(o)
            return out

    class Prefill:
        def __init__(self, ws, layout, backend="auto"):
            assert layout == "HND"
            if backend in broken:
                raise NotImplementedError("this fake has no %s" % backend)

        def plan(self, qo, indptr, indices, last, hq, hkv, d, page, causal=False, **kw):
            assert causal
            self.args = (qo.cpu(), indptr.cpu(), indices.cpu(), last.cpu(), hkv, page, kw["sm_scale"])

        def run(self, q, kv, out=None):
            qo, indptr, indices, last, hkv, page, sm = self.args
            out.copy_(attend(q, kv[0], kv[1], qo, indices, indptr, last, page, hkv, sm, 1.0, 1.0))
            return out

    fi.BatchDecodeWithPagedKVCacheWrapper = Decode
    fi.BatchPrefillWithPagedKVCacheWrapper = Prefill
    return fi


def tiny_cases(bench):
    C = bench.Case
    return [
        bench.uniform(4, 2, 3, 40, d=32),
        C("decode", "tiny ragged", 4, 2, [70, 5, 16], [1, 1, 1], d=32),
        C("decode", "tiny ragged e4m3", 4, 2, [70, 5, 16], [1, 1, 1], d=32, fp8=True),
        bench.uniform(4, 2, 2, 40, d=32, part="prefill", n=4, suffix=" n=4"),
        C("prefill", "tiny chunk 24 ctx 16", 4, 2, [40], [24], d=32, kind="prefill"),
        C("prefill", "tiny chunk 24 ctx 0", 4, 2, [24], [24], d=32, kind="prefill"),
        C("prefill", "tiny mixed", 4, 2, [50, 20, 33], [18, 1, 1], d=32, kind="mixed"),
    ]


def dry_run(bench, monkeypatch, tmp_path, cases, fi):
    torch = pytest.importorskip("torch")
    pytest.importorskip("numpy")
    wall = load("test_bench_torch_for_timer", HERE / "test_bench_torch.py").WallTimer
    monkeypatch.setattr(bench, "DEVICE", "cpu")
    monkeypatch.setattr(bench.bt, "DEVICE", "cpu")
    monkeypatch.setattr(bench.bt, "CEILING_BYTES", 8 << 20)
    monkeypatch.setattr(bench.bt, "rotation_count", lambda torch, nbytes: 2)
    monkeypatch.setattr(bench, "WORKSPACE_BYTES", 1024)
    out_csv, out_md = tmp_path / "t.csv", tmp_path / "t.md"
    status = bench.run_benchmark(torch, fi, cases, str(out_csv), str(out_md), timer=wall(), do_prebuild=False)
    with open(out_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    with open(tmp_path / "t-flops.csv", newline="") as f:
        flops = list(csv.DictReader(f))
    return status, rows, flops, out_md.read_text()


def test_dry_run_on_cpu(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    bench = load_bench()
    cases = tiny_cases(bench)
    status, rows, flops, md = dry_run(bench, monkeypatch, tmp_path, cases, fake_flashinfer(torch))
    assert status == 0, md
    assert list(rows[0].keys()) == bench.bt.CSV_HEADER.split(",")
    assert list(flops[0].keys()) == bench.FLOPS_CSV_HEADER.split(",")
    by = {}
    for r in rows:
        by.setdefault(r["shape"], []).append(r["kernel"])
    assert by["4/2/3/40"] == [bench.FI_DECODE_CUDA, bench.FI_DECODE_TC, bench.FI_DECODE_BEST]
    assert by["tiny ragged e4m3"] == [bench.FI_DECODE_FP8]
    assert by["4/2/2/40 n=4"] == [
        bench.FI_PREFILL.format("fa2"),
        bench.FI_PREFILL.format("fa3"),
        bench.FI_PREFILL_BEST,
    ]
    assert bench.FI_SPLIT in by["tiny mixed"]
    assert "tiny chunk 24 ctx 16" not in by  # prefill chunks: TFLOP/s table only
    for r in rows:
        case = [c for c in cases if c.name == r["shape"]][0]
        assert r["bytes"] == bench.bt.g6(case.bytes_moved()) and r["ceiling"] == "read"
    fk = {(r["kernel"], r["shape"]) for r in flops}
    assert (bench.FI_PREFILL_BEST, "tiny chunk 24 ctx 16") in fk
    assert (bench.FI_SPLIT, "tiny mixed") in fk
    for r in flops:
        case = [c for c in cases if c.name == r["shape"]][0]
        assert r["flops"] == bench.bt.g6(case.flops())
    assert "| FlashInfer decode (CUDA cores) | tiny ragged |" in md
    assert "## Prefill chunks and mixed steps" in md and "## plan() on the host" in md
    # cuDNN has no CPU kernel: a note, not a failure (and never FAILED)
    assert "skipped: torch SDPA (dense, cudnn, causal) tiny chunk 24 ctx 16" in md
    assert "FAILED" not in md


def test_a_wrong_result_fails_loudly(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    bench = load_bench()
    cases = tiny_cases(bench)[:2]
    status, rows, flops, md = dry_run(
        bench, monkeypatch, tmp_path, cases, fake_flashinfer(torch, scale_out=1.1)
    )
    assert status == 1
    assert rows == []
    assert (
        "FAILED: FlashInfer decode (CUDA cores) tiny ragged: FlashInfer decode (CUDA cores) disagrees" in md
    )


def test_a_backend_that_cannot_run_is_skipped(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    bench = load_bench()
    cases = [tiny_cases(bench)[0], tiny_cases(bench)[4]]
    status, rows, flops, md = dry_run(
        bench, monkeypatch, tmp_path, cases, fake_flashinfer(torch, broken=("cuda", "fa3"))
    )
    assert status == 0, md
    assert [r["kernel"] for r in rows] == [bench.FI_DECODE_TC, bench.FI_DECODE_BEST]
    assert "skipped: FlashInfer decode (CUDA cores) 4/2/3/40: this fake has no such decode" in md
    assert "skipped: FlashInfer prefill (fa3) tiny chunk 24 ctx 16: this fake has no fa3" in md
    assert (bench.FI_PREFILL_BEST, "tiny chunk 24 ctx 16") in {(r["kernel"], r["shape"]) for r in flops}
