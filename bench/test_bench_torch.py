"""Tests of bench/bench_torch.py that need no GPU.

    python -m pytest -q bench/test_bench_torch.py

The skip path runs with any Python; the rest needs torch (a CPU build is enough) and
NumPy, and is skipped without them. The dry run drives the whole benchmark on the CPU at
tiny shapes, with a wall-clock timer in place of CUDA events: it checks the plumbing
(correctness checks, paged cache, CSV and Markdown), not the numbers.
"""

import csv
import importlib.util
import os
import pathlib
import subprocess
import sys
import time

import pytest

HERE = pathlib.Path(__file__).resolve().parent
SCRIPT = HERE / "bench_torch.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_torch", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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
    assert out_csv.read_text() == load_bench().CSV_HEADER + "\n"
    assert out_md.read_text().startswith("<!-- skipped: ")


def test_self_test_passes():
    pytest.importorskip("torch")
    pytest.importorskip("numpy")
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--self-test"], capture_output=True, text=True, timeout=900
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert " 0 failed" in r.stdout


class WallTimer:
    """Stands in for the CUDA-event timer on the CPU."""

    def median_ms(self, fn, warmup=1, reps=3, pad=True):
        for i in range(warmup):
            fn(i)
        ms = []
        for i in range(reps):
            t = time.perf_counter()
            fn(warmup + i)
            ms.append((time.perf_counter() - t) * 1e3)
        return sorted(ms)[reps // 2]

    def both(self, fn):
        return self.median_ms(fn), self.median_ms(fn, pad=False)


def dry_run(bench, monkeypatch, tmp_path, shapes):
    import torch

    monkeypatch.setattr(bench, "DEVICE", "cpu")
    monkeypatch.setattr(bench, "CEILING_BYTES", 8 << 20)
    monkeypatch.setattr(bench, "rotation_count", lambda torch, nbytes: 2)
    out_csv, out_md = tmp_path / "t.csv", tmp_path / "t.md"
    status = bench.run_benchmark(torch, shapes, str(out_csv), str(out_md), timer=WallTimer())
    with open(out_csv, newline="") as f:
        return status, list(csv.DictReader(f)), out_md.read_text()


def test_dry_run_on_cpu(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("numpy")
    bench = load_bench()
    shapes = [(4, 2, 3, 200), (4, 4, 2, 32)]
    status, rows, md = dry_run(bench, monkeypatch, tmp_path, shapes)
    assert status == 0, md
    assert list(rows[0].keys()) == bench.CSV_HEADER.split(",")
    for sh in shapes:
        mine = [r for r in rows if r["shape"] == bench.shape_name(sh)]
        kernels = [r["kernel"] for r in mine]
        assert any(k.startswith("torch SDPA (dense, ") for k in kernels), kernels
        assert bench.FLEX_KERNEL in kernels, md
        for r in mine:
            assert r["bytes"] == bench.g6(bench.bytes_moved(*sh))
            assert r["ceiling"] == "read" and float(r["pct"]) > 0
    assert "| torch FlexAttention paged (page 128) | 4/2/3/200 |" in md


def test_a_wrong_flex_result_fails_loudly(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    bench = load_bench()
    real = bench.flex_setup

    def off_by_a_bit(torch, q, l, seed, **kw):
        table, call, how = real(torch, q, l, seed, compiled=False, **kw)
        return table, (lambda *a: call(*a) * 1.1), how

    monkeypatch.setattr(bench, "flex_setup", off_by_a_bit)
    status, rows, md = dry_run(bench, monkeypatch, tmp_path, [(4, 2, 3, 200)])
    assert status == 1
    assert [r["kernel"] for r in rows if r["kernel"] == bench.FLEX_KERNEL] == []
    assert len(rows) == 1  # the SDPA row stands
    assert "FAILED: torch FlexAttention paged (page 128) 4/2/3/200: FlexAttention paged disagrees" in md


def test_a_flex_that_cannot_run_is_skipped(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    bench = load_bench()

    def missing(*a, **kw):
        raise ImportError("no flex_attention in this torch")

    monkeypatch.setattr(bench, "flex_setup", missing)
    status, rows, md = dry_run(bench, monkeypatch, tmp_path, [(4, 2, 3, 200)])
    assert status == 0
    assert len(rows) == 1 and rows[0]["kernel"].startswith("torch SDPA (dense, ")
    assert "skipped: torch FlexAttention paged (page 128) 4/2/3/200: no flex_attention in this torch" in md
