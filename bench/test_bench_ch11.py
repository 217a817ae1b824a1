"""Tests of chapter 11's benchmark plumbing that need no GPU.

    python -m pytest -q bench/test_bench_ch11.py

- the case file (bench/ch11_cases.txt): the book's seven cases by their names, the issue's
  sweep, every case within what the kernel takes and what a run may allocate;
- the C++ parser (bench/ch11_cases.h, compiled here with the host compiler; skipped without
  one) reads the file exactly as ch11_cases.py does, lengths included, and refuses the same
  bad lines at the same line;
- bench_flashinfer_mla.py: --list, and its CSV (both backends' rows) read back by
  compare_ch11.py, whose tables are checked against the numbers put in; with --flashmla,
  FlashMLA's rows (bench_flashmla.py's CSV, the same columns) join them.
"""

import csv
import importlib.util
import pathlib
import shutil
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import ch11_cases  # noqa: E402

BOOK_CASES = [
    "tp8 shard: Hq 16, B 64, L 4096",
    "Hq 128, B 64, L 4096",
    "Hq 128, B 128, L 1024",
    "Kimi K2 MTP: Hq 64, s_q 2, B 64, L 4096",
    "spec: Hq 16, s_q 4, B 64, L 4096",
    "ragged: Hq 128, 128 lengths 64..8192",
    "Hq 128, B 64, L 4096, page 16",
]


def load(name):
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_book_cases_kept_by_name_and_shape():
    cases, _ = ch11_cases.read()
    by = {c[0]: c for c in cases}
    assert [c[0] for c in cases[:7]] == BOOK_CASES
    assert by["Hq 128, B 64, L 4096"][1:] == (128, 1, [4096] * 64, 64)
    assert by["Kimi K2 MTP: Hq 64, s_q 2, B 64, L 4096"][1:] == (64, 2, [4096] * 64, 64)
    assert by["spec: Hq 16, s_q 4, B 64, L 4096"][1:3] == (16, 4)
    assert by["Hq 128, B 64, L 4096, page 16"][4] == 16
    ragged = by["ragged: Hq 128, 128 lengths 64..8192"][3]
    assert len(ragged) == 128 and 64 <= min(ragged) and max(ragged) <= 8192 and len(set(ragged)) > 100


def test_sweep_covers_the_issue_grid():
    cases, sections = ch11_cases.read()
    shapes = {(hq, s_q, len(ls), ls[0], blk) for _, hq, s_q, ls, blk in cases if len(set(ls)) == 1}
    for hq in (8, 16, 64, 128):
        for s_q in (1, 2):
            assert (hq, s_q, 64, 4096, 64) in shapes, (hq, s_q)
    for hq in (16, 128):
        for b in (1, 8, 32, 64, 128):
            assert (hq, 1, b, 4096, 64) in shapes, (hq, b)
        for L in (1024, 8192, 32768, 65536):
            assert (hq, 1, 16, L, 64) in shapes, (hq, L)
    assert any(len(set(c[3])) > 1 for c in cases)  # a ragged batch
    names = {c[0] for c in cases}
    assert len(sections) >= 4 and all(n in names for _, ns in sections for n in ns)
    assert {n for _, ns in sections for n in ns} == names  # every case is in some table


def test_every_case_fits_the_kernel_and_the_memory():
    bench = load("bench_flashinfer_mla")
    cases, _ = ch11_cases.read()
    l2 = 50 * 2**20  # the H100's; rotation keeps the working set >= 10x L2
    for name, hq, s_q, lengths, block in cases:
        assert 1 <= hq <= 128 and 1 <= s_q <= 4 and block in (16, 32, 64), name
        nbytes, _ = bench.counts(hq, s_q, lengths)
        copies = max(1, -(-10 * l2 // nbytes))
        pool = sum(-(-L // block) for L in lengths) * block * 1152
        assert copies * pool < 20e9, name
        assert sum(-(-L // block) for L in lengths) * block * 576 < 2**31, name  # int32 element offsets


BAD = [
    ("x | 16 | 1 | 64 x 4096\n", 1),                        # 4 fields
    ("x | 16 | 5 | 4 x 8 | 64\n", 1),                       # s_q 5
    ("x | 129 | 1 | 4 x 8 | 64\n", 1),                      # h_q 129
    ("# c\nx | 16 | 1 | 4 x 8 | 48\n", 2),                  # block 48
    ("x | 16 | 1 | 4 by 8 | 64\n", 1),                      # lengths
    ("x | 16 | 1 | ragged 4 9 8 1 | 64\n", 1),              # hi < lo
    ("x | 16 | 2 | 4 x 1 | 64\n", 1),                       # L < s_q
    ("x | 16 | 1 | 4 x 8 | 64\n\nx | 8 | 1 | 4 x 8 | 64\n", 3),  # twice
    ("x | 1 6 | 1 | 4 x 8 | 64\n", 1),                      # not a number
    ("x | 16 | 1 | 4 x 8 | 64\n= y\n", 2),                  # '= y' names no case
]


@pytest.mark.parametrize("text,line", BAD)
def test_python_parser_refuses_bad_lines(text, line):
    with pytest.raises(ValueError, match=rf"^{line}: "):
        ch11_cases.parse(text)


DRIVER = r"""
#include <cstdio>
#include <fstream>
#include <sstream>
#include "ch11_cases.h"
int main(int argc, char** argv) {
  std::stringstream t;
  t << std::ifstream(argv[1]).rdbuf();
  try {
    for (const auto& c : pa::bench::ch11cases::parse_cases(t.str())) {
      std::printf("%s|%d|%d|%d|", c.name.c_str(), c.hq, c.s_q, c.block);
      for (size_t i = 0; i < c.lens.size(); ++i) std::printf(i ? ",%d" : "%d", c.lens[i]);
      std::printf("\n");
    }
  } catch (const std::exception& e) {
    std::printf("ERROR %s\n", e.what());
  }
}
"""


@pytest.fixture(scope="module")
def cpp_parser(tmp_path_factory):
    cxx = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if not cxx:
        pytest.skip("no host C++ compiler")
    d = tmp_path_factory.mktemp("cpp")
    (d / "driver.cpp").write_text(DRIVER)
    exe = d / "driver"
    subprocess.run([cxx, "-std=c++17", "-O1", f"-I{HERE}", str(d / "driver.cpp"), "-o", str(exe)], check=True)

    def parse(text):
        f = d / "cases.txt"
        f.write_text(text)
        return subprocess.run([str(exe), str(f)], check=True, capture_output=True, text=True).stdout
    return parse


def test_cpp_parser_reads_the_file_as_python_does(cpp_parser):
    cases, _ = ch11_cases.read()
    want = "".join(f"{n}|{hq}|{s_q}|{blk}|{','.join(map(str, ls))}\n" for n, hq, s_q, ls, blk in cases)
    assert cpp_parser((HERE / "ch11_cases.txt").read_text()) == want


@pytest.mark.parametrize("text,line", BAD)
def test_cpp_parser_refuses_the_same_lines(cpp_parser, text, line):
    assert cpp_parser(text).startswith(f"ERROR {line}: ")


def write_ours_csv(path, rows):
    """bench_ch11's CSV columns: each row is case, us, bytes, tbps, pct_read, flops, tflops."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow("kernel,case,us,bytes,tbps,pct_read,flops,tflops,read_ceiling_tbps,copy_ceiling_tbps,device".split(","))
        for r in rows:
            w.writerow(["ch11 mla decode", *r, "3.1", "5.0", "GPU X"])


def test_flashinfer_bench_lists_cases_without_a_gpu():
    out = subprocess.run([sys.executable, str(HERE / "bench_flashinfer_mla.py"), "--list", "--only", "Hq 128, B 16"],
                         check=True, capture_output=True, text=True).stdout
    assert "Hq 128, B 16, L 65536" in out and out.rstrip().endswith("5 cases")


def test_both_backends_reach_the_comparison(tmp_path):
    bench, compare = load("bench_flashinfer_mla"), load("compare_ch11")
    ceil = {"read_tbps": 3.0}
    rows = [dict(case="A", backend="fa3", us=50.0, tbps=2.0, pct=66.7, tflops=100.0, bytes=10, flops=20),
            dict(case="A", backend="fa2", us=200.0, tbps=0.5, pct=16.7, tflops=25.0, bytes=10, flops=20),
            dict(case="B", backend="fa2", us=30.0, tbps=1.0, pct=33.3, tflops=5.0, bytes=10, flops=20)]
    fi_csv = tmp_path / "fi.csv"
    bench.write_csv(fi_csv, rows, ceil, "GPU X")
    ours_csv = tmp_path / "ours.csv"
    write_ours_csv(ours_csv, [["A", "100.000", "1", "1", "45.60", "2", "123.40"],
                              ["B, with a comma", "10.000", "1", "1", "1", "2", "3"]])
    cases = tmp_path / "cases.txt"
    cases.write_text("## T1\nA | 16 | 1 | 2 x 8 | 64\nB | 16 | 1 | 2 x 8 | 64\n## T2\n= A\n")
    out = tmp_path / "cmp.md"
    assert compare.main([str(ours_csv), str(fi_csv), "--cases", str(cases), "--out", str(out)]) == 0
    text = out.read_text()
    assert text.count("| A | 100.0 | 200.0 | 50.0 | 2.00x | 0.50x | 45.6 | 123.4 |") == 2  # in T1 and T2
    assert "| B | — | 30.0 | — | — | — | — | — |" in text
    assert "## Cases not in the case file" in text and "| B, with a comma | 10.0 |" in text
    assert "FA2 / ours 2.00, FA3 / ours 0.50" in text
    assert "Without a time in one of the runs: B; B, with a comma." in text


def test_flashmla_joins_the_comparison(tmp_path):
    bench, compare = load("bench_flashinfer_mla"), load("compare_ch11")
    ceil = {"read_tbps": 3.0}
    fi_csv, fm_csv, ours_csv = tmp_path / "fi.csv", tmp_path / "fm.csv", tmp_path / "ours.csv"
    bench.write_csv(fi_csv, [dict(case="A", backend=b, us=u, tbps=1.0, pct=30.0, tflops=1.0, bytes=1, flops=2)
                             for b, u in (("fa2", 300.0), ("fa3", 80.0))], ceil, "GPU X")
    bench.write_csv(fm_csv, [dict(case="A", backend="flashmla", us=75.0, tbps=1.0, pct=30.0, tflops=1.0,
                                  bytes=1, flops=2)], ceil, "GPU X")
    write_ours_csv(ours_csv, [["A", "100.000", "1", "1", "45.60", "2", "123.40"]])
    cases = tmp_path / "cases.txt"
    cases.write_text("## T1\nA | 16 | 1 | 2 x 8 | 64\n")
    out = tmp_path / "cmp.md"
    assert compare.main([str(ours_csv), str(fi_csv), "--flashmla", str(fm_csv), "--cases", str(cases),
                         "--out", str(out)]) == 0
    text = out.read_text()
    assert "| case | ours (us) | FA2 (us) | FA3 (us) | FlashMLA (us) | FA2 / ours | FA3 / ours | FlashMLA / ours |" in text
    assert "| A | 100.0 | 300.0 | 80.0 | 75.0 | 3.00x | 0.80x | 0.75x | 45.6 | 123.4 |" in text
    assert "FA2 / ours 3.00, FA3 / ours 0.80, FlashMLA / ours 0.75" in text


def test_flashinfer_main_writes_every_backend_row(tmp_path, monkeypatch):
    """main()'s loop and outputs, with stand-ins for torch, flashinfer, the timer and
    run_case (the GPU parts): every case of --only, both backends, in the CSV and the table."""
    import types
    bench = load("bench_flashinfer_mla")
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(
        is_available=lambda: True, get_device_name=lambda i: "Fake GPU", empty_cache=lambda: None))
    fake_fi = types.ModuleType("flashinfer")
    fake_fi.mla = types.ModuleType("flashinfer.mla")
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.setitem(sys.modules, "flashinfer", fake_fi)
    monkeypatch.setitem(sys.modules, "flashinfer.mla", fake_fi.mla)
    monkeypatch.setattr(bench.bt, "Timer", lambda torch: None)
    monkeypatch.setattr(bench.bt, "measure_ceilings",
                        lambda torch, timer, n: {"read_tbps": 3.0, "read_how": "fake"})
    seen = []

    def fake_run_case(torch, fi, timer, ceil, case, backends, log):
        seen.append((case[0], tuple(backends)))
        return [dict(case=case[0], backend=b, us=10.0 * (i + 1), tbps=1.0, pct=33.3, tflops=5.0,
                     bytes=1, flops=2) for i, b in enumerate(backends)]
    monkeypatch.setattr(bench, "run_case", fake_run_case)
    fi_csv, md = tmp_path / "fi.csv", tmp_path / "fi.md"
    assert bench.main(["--csv", str(fi_csv), "--md", str(md), "--only", "Hq 16, B 16"]) == 0
    names = [n for n, _ in seen]
    assert names == [f"Hq 16, B 16, L {L}" for L in (1024, 4096, 8192, 32768, 65536)]
    assert all(b == ("fa3", "fa2") for _, b in seen)
    with open(fi_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 10 and {r["backend"] for r in rows} == {"fa2", "fa3"}
    assert rows[0]["device"] == "Fake GPU" and md.read_text().count("| Hq 16, B 16, L ") == 10
