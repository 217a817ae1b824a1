"""Tests of bench_flashinfer.py --part window (chapter 12's cases) and bench/compare_ch12.py
that need no GPU.

    python -m pytest -q bench/test_bench_flashinfer_window.py

The compare tests run with any Python. The dry runs need torch (a CPU build is enough): they
drive the window part on the CPU at tiny cases with a stand-in for flashinfer written here
(the two wrappers' plan/run with window_left, the sink variant through jit_args, and a
run(sinks=...) that the plain wrapper ignores, as FlashInfer 0.7.2's fa2 path does), to
check the plumbing: the window and sink arguments, the checks, the rows and the notes.
"""

import csv
import pathlib
import subprocess
import sys
import types

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import test_bench_flashinfer as tbf  # noqa: E402  (load, load_bench, dry_run)

HEADER = "kernel,shape,us,bytes,tbps,pct,ceiling,read_ceiling_tbps,copy_ceiling_tbps,device"


# ----------------------------------------------------------------------------- compare_ch12


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(HEADER.split(","))
        for kernel, shape, us, nbytes, pct in rows:
            w.writerow([kernel, shape, us, nbytes, 1.0, pct, "read", 3.0, 2.5, "H100"])


def test_compare_table(tmp_path):
    ours, fi, md = tmp_path / "o.csv", tmp_path / "f.csv", tmp_path / "f.md"
    write_csv(ours, [
        ("ch10 varlen", "32/8/32 ctx 1024 full", 50.0, 1.35e8, 90.0),
        ("ch12 window", "32/8/32 ctx 32768 window 1024", 52.0, 1.35e8, 91.0),
        ("ch12 window", "32/8/32 ctx 32768 window 1024 sinks", 53.0, 1.35e8, 89.0),
        ("ch12 window", "32/8 chunk 2048 ctx 32768 window 1024", 400.0, 1.2e7, 10.0),
    ])  # fmt: skip
    write_csv(fi, [
        ("FlashInfer decode (tensor cores)", "32/8/32 ctx 1024 full", 55.0, 1.35e8, 80.0),
        ("FlashInfer decode (tensor cores, window_left)", "32/8/32 ctx 32768 window 1024", 65.0, 1.35e8, 70.0),
        ("FlashInfer prefill (fa2, window_left)", "32/8 chunk 2048 ctx 32768 window 1024", 500.0, 1.2e7, 8.0),
        ("FlashInfer prefill (fa3, window_left)", "32/8 chunk 2048 ctx 32768 window 1024", 300.0, 1.3e7, 13.0),
    ])  # fmt: skip
    md.write_text(
        "## Cases without a FlashInfer time\n\n| case | why |\n|---|---|\n"
        "| 32/8/32 ctx 32768 window 1024 sinks | skipped: not supported by FlashInfer 0.7.2 |\n\n- a note\n"
    )
    out = tmp_path / "c.md"
    r = subprocess.run(
        [sys.executable, str(HERE / "compare_ch12.py"), str(ours), str(fi), "--fi-md", str(md), "--out", str(out)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert "| 32/8/32 ctx 1024 full | 50.0 | 55.0 | FlashInfer decode (tensor cores) | 1.10x | 90.0 | 80.0 |" in text
    assert "| 32/8/32 ctx 32768 window 1024 | 52.0 | 65.0 |" in text and "| 1.25x | 91.0 | 70.0 |" in text
    # the fastest FlashInfer kernel of a case is the one compared
    assert "| 32/8 chunk 2048 ctx 32768 window 1024 | 400.0 | 300.0 | FlashInfer prefill (fa3, window_left) | 0.75x |" in text
    # a case FlashInfer could not run says why, with dashes
    assert "| 32/8/32 ctx 32768 window 1024 sinks | 53.0 | — | skipped: not supported by FlashInfer 0.7.2 | — | 89.0 | — |" in text
    # byte counts that differ are flagged (the fa3 row above counts other bytes on purpose)
    assert "count different bytes for: 32/8 chunk 2048 ctx 32768 window 1024" in text
    assert "91.0% of the read ceiling (target 90%): met" in text
    assert "(1.04x)" in text and "FlashInfer / ours on it: 1.25x (target 1.0x or more): met" in text
    # the prefill chunk's rate counts the keys its rows' windows see: 2,048 rows x 1,024 keys
    # x 32 heads x 4 x 128 = 34.4 GFLOP; 400 us is 86 TFLOP/s, FlashInfer's fastest 300 us 115
    assert "| 32/8 chunk 2048 ctx 32768 window 1024 | 34.4 | 86 | 115 |" in text


def test_compare_floor_rows_are_not_contenders(tmp_path):
    """bench_ch12's read-kernel floor rows (same case names) never win a case; the target
    lines compare the window case with its floor."""
    ours, fi = tmp_path / "o.csv", tmp_path / "f.csv"
    write_csv(ours, [
        ("ch12 window", "32/8/32 ctx 32768 window 1024", 55.0, 1.35e8, 80.0),
        ("read kernel (floor)", "32/8/32 ctx 32768 window 1024", 50.0, 1.35e8, 88.0),
    ])  # fmt: skip
    write_csv(fi, [("FlashInfer decode (tensor cores, window_left)", "32/8/32 ctx 32768 window 1024", 55.0, 1.35e8, 80.0)])
    out = tmp_path / "c.md"
    r = subprocess.run(
        [sys.executable, str(HERE / "compare_ch12.py"), str(ours), str(fi), "--out", str(out)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert "| 32/8/32 ctx 32768 window 1024 | 55.0 | 55.0 |" in text
    assert "80.0% of the read ceiling (target 90%): missed" in text
    assert "alone in a launch, timed the same way: 50.0 us (88.0% of the read ceiling); ours takes 1.10x its time" in text


def test_compare_without_flashinfer_rows(tmp_path):
    cmp = tbf.load("compare_ch12", HERE / "compare_ch12.py")
    ours = [{"kernel": "ch12 window", "shape": "32/8/32 ctx 32768 window 1024", "us": "60", "bytes": "1e8",
             "pct": "80", "read_ceiling_tbps": "3", "device": "H100"}]  # fmt: skip
    text = "\n".join(cmp.build(ours, []))
    assert "| 32/8/32 ctx 32768 window 1024 | 60.0 | — | no row | — | 80.0 | — |" in text
    assert "(target 90%): missed" in text and "FlashInfer / ours on it" not in text


# ----------------------------------------------------------------------------- dry runs


def fake_flashinfer(torch, ignore_window=False, variant_drops_sinks=False):
    """The wrappers with window_left; a jit_args wrapper takes (sinks, sm_scale) after the
    cache and applies the sinks; the plain wrapper accepts run(sinks=...) and ignores it."""
    fi = types.SimpleNamespace(__version__="fake")
    calls = []

    def attend(q, kc, vc, qo, ind, ptr, last, page, hkv, sm, window_left, sinks):
        out = torch.empty_like(q)
        g = q.shape[1] // hkv
        for b in range(len(ptr) - 1):
            pages = ind[ptr[b] : ptr[b + 1]].long()
            length = (len(pages) - 1) * page + int(last[b])
            k = kc[pages].float().permute(1, 0, 2, 3).reshape(hkv, -1, q.shape[2])[:, :length]
            v = vc[pages].float().permute(1, 0, 2, 3).reshape(hkv, -1, q.shape[2])[:, :length]
            n = int(qo[b + 1] - qo[b])
            for i in range(n):
                pos = length - n + i
                lo = max(0, pos - window_left) if window_left >= 0 and not ignore_window else 0
                row = q[int(qo[b]) + i].float().view(hkv, g, -1)
                s = torch.einsum("hgd,hkd->hgk", row, k[:, lo : pos + 1]) * sm
                if sinks is not None:
                    s = torch.cat([s, sinks.float().view(hkv, g, 1)], -1)
                p = torch.softmax(s, -1)[..., : pos + 1 - lo]
                out[int(qo[b]) + i] = torch.einsum("hgk,hkd->hgd", p, v[:, lo : pos + 1]).reshape(q.shape[1], -1)
        return out

    class Decode:
        def __init__(self, ws, layout, use_tensor_cores=False, backend="auto", jit_args=None):
            assert layout == "HND" and use_tensor_cores
            self.variant = jit_args is not None

        def plan(self, indptr, indices, last, hq, hkv, d, page, window_left=-1, **kw):
            calls.append(("decode", "variant" if self.variant else "plain", window_left))
            self.args = (indptr.cpu(), indices.cpu(), last.cpu(), hkv, page, kw["sm_scale"], window_left)

        def run(self, q, kv, *extra, out=None, sinks=None):
            indptr, indices, last, hkv, page, sm, wl = self.args
            qo = list(range(q.shape[0] + 1))
            sk = extra[0] if self.variant and not variant_drops_sinks else None  # run(sinks=): ignored
            out.copy_(attend(q, kv[0], kv[1], qo, indices, indptr, last, page, hkv, sm, wl, sk))
            return out

    class Prefill:
        def __init__(self, ws, layout, backend="auto", jit_args=None):
            assert layout == "HND"
            self.variant, self.backend = jit_args is not None, backend

        def plan(self, qo, indptr, indices, last, hq, hkv, d, page, causal=False, window_left=-1, **kw):
            assert causal
            calls.append(("prefill " + self.backend, "variant" if self.variant else "plain", window_left))
            self.args = (qo.cpu(), indptr.cpu(), indices.cpu(), last.cpu(), hkv, page, kw["sm_scale"], window_left)

        def run(self, q, kv, *extra, out=None, sinks=None):
            qo, indptr, indices, last, hkv, page, sm, wl = self.args
            sk = extra[0] if self.variant else None
            out.copy_(attend(q, kv[0], kv[1], qo, indices, indptr, last, page, hkv, sm, wl, sk))
            return out

    fi.BatchDecodeWithPagedKVCacheWrapper = Decode
    fi.BatchPrefillWithPagedKVCacheWrapper = Prefill
    fi.calls = calls
    return fi


def tiny_window_cases(bench):
    W = bench.WindowCase
    return [
        W("tiny full", 2, 40, 1, 0, False, hq=4, hkv=2, d=32),
        W("tiny window 20", 2, 70, 1, 20, False, hq=4, hkv=2, d=32),
        W("tiny window 20 sinks", 2, 70, 1, 20, True, hq=4, hkv=2, d=32),
        W("tiny chunk 9 window 7", 1, 45, 9, 7, False, hq=4, hkv=1, d=32),
        W("tiny chunk 9 window 7 sinks", 1, 45, 9, 7, True, hq=4, hkv=1, d=32),
    ]


def test_window_dry_run_with_the_sink_variant(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    bench = tbf.load_bench()
    monkeypatch.setattr(bench, "sink_jit_args", lambda fi, torch, d, kind: ["fake_sink_" + kind])
    cases = tiny_window_cases(bench)
    fi = fake_flashinfer(torch)
    status, rows, flops, md = tbf.dry_run(bench, monkeypatch, tmp_path, cases, fi)
    assert status == 0, md
    got = [(r["kernel"], r["shape"]) for r in rows]
    assert got == [
        (bench.FI_DECODE_TC, "tiny full"),
        (bench.FI_WINDOW, "tiny window 20"),
        (bench.FI_WINDOW_SINKS, "tiny window 20 sinks"),
        (bench.FI_CHUNK_WINDOW, "tiny chunk 9 window 7"),
        (bench.FI_CHUNK_WINDOW.replace("fa2", "fa3"), "tiny chunk 9 window 7"),
        (bench.FI_CHUNK_SINKS, "tiny chunk 9 window 7 sinks"),
    ]
    for r in rows:  # bench_ch12's bytes: the blocks the windows touch
        case = [c for c in cases if c.name == r["shape"]][0]
        assert r["bytes"] == bench.bt.g6(case.bytes_moved())
    assert flops == [] and "## Prefill chunks" not in md
    # window_left = window - 1; the full case passes none (FlashInfer's default, -1)
    assert ("decode", "plain", -1) in fi.calls and ("decode", "plain", 19) in fi.calls
    assert ("decode", "variant", 19) in fi.calls and ("prefill fa2", "variant", 6) in fi.calls
    assert ("prefill fa3", "plain", 6) in fi.calls
    # the plain wrapper's run(sinks=...) is probed and found ignored, as a note
    assert "run(sinks=...) on tiny window 20 sinks" in md and "sinks ignored" in md
    assert "Cases without a FlashInfer time" not in md and "FAILED" not in md


def test_window_sinks_without_the_variant_say_so(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    bench = tbf.load_bench()

    def no_variant(fi, torch, d, kind):
        raise bench.NotSupported("not supported by FlashInfer fake: no AttentionSink variant")

    monkeypatch.setattr(bench, "sink_jit_args", no_variant)
    cases = tiny_window_cases(bench)
    status, rows, flops, md = tbf.dry_run(bench, monkeypatch, tmp_path, cases, fake_flashinfer(torch))
    assert status == 0, md
    assert {r["shape"] for r in rows} == {"tiny full", "tiny window 20", "tiny chunk 9 window 7"}
    assert "## Cases without a FlashInfer time" in md
    for name in ("tiny window 20 sinks", "tiny chunk 9 window 7 sinks"):
        assert "| %s | skipped: " % name in md and "not supported by FlashInfer fake" in md
    cmp = tbf.load("compare_ch12", HERE / "compare_ch12.py")
    reasons = cmp.missing_reasons(str(tmp_path / "t.md"))
    assert set(reasons) == {"tiny window 20 sinks", "tiny chunk 9 window 7 sinks"}


def test_a_kernel_that_ignores_the_window_fails(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    bench = tbf.load_bench()
    cases = tiny_window_cases(bench)[1:2]
    status, rows, flops, md = tbf.dry_run(bench, monkeypatch, tmp_path, cases, fake_flashinfer(torch, ignore_window=True))
    assert status == 1 and rows == []
    assert "FAILED: %s tiny window 20" % bench.FI_WINDOW in md


def test_a_variant_that_drops_the_sinks_fails(tmp_path, monkeypatch):
    """At the cases' own sink logits a dropped sink hides under the tolerance; the check with
    raised logits must catch it."""
    torch = pytest.importorskip("torch")
    bench = tbf.load_bench()
    monkeypatch.setattr(bench, "sink_jit_args", lambda fi, torch, d, kind: ["fake_sink_" + kind])
    W = bench.WindowCase
    case = W("tiny wide window sinks", 2, 300, 1, 256, True, hq=4, hkv=2, d=32)
    fi = fake_flashinfer(torch, variant_drops_sinks=True)
    status, rows, flops, md = tbf.dry_run(bench, monkeypatch, tmp_path, [case], fi)
    assert status == 1 and rows == []
    assert "FAILED: %s tiny wide window sinks" % bench.FI_WINDOW_SINKS in md and "raised by 8" in md
    # the same outputs at the case's own logits would have passed the plain check
    paged = bench.WindowPaged(torch, case, copies=1)
    picks = paged.picks()
    err = bench.bt.rel_err(torch, paged.reference(torch, picks, sinks=None), paged.reference(torch, picks))
    assert err < bench.TOL
