"""Tests for tools/perf/ab_table.py (the A/B tables of bench/results). Run: .venv/bin/python -m pytest tools/"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "perf"))
import ab_table  # noqa: E402

HEADER = "kernel,shape,us,read_ceiling_tbps\n"


def write(tmp_path, name, rows, ceiling="4.50"):
    path = tmp_path / name
    path.write_text(HEADER + "".join(f"{k},{s},{us},{ceiling}\n" for k, s, us in rows))
    return str(path)


def test_ratio_is_mean_over_mean_and_geomean_over_rows(tmp_path):
    a = [write(tmp_path, "a1.csv", [("ch10 varlen", "x", 100), ("ch10 varlen", "y", 10)]),
         write(tmp_path, "a2.csv", [("ch10 varlen", "x", 300), ("ch10 varlen", "y", 10)])]
    b = [write(tmp_path, "b1.csv", [("ch10 varlen", "x", 100), ("ch10 varlen", "y", 40)]),
         write(tmp_path, "b2.csv", [("ch10 varlen", "x", 100), ("ch10 varlen", "y", 40)])]
    lines = ab_table.table(a, b)
    assert "| ch10 varlen | x | 100.0, 300.0 | 100.0, 100.0 | 0.500 |" in lines
    assert "| ch10 varlen | y | 10.0, 10.0 | 40.0, 40.0 | 4.000 |" in lines
    assert "Geometric mean of B / A over these 2 rows: 1.414." in lines
    assert "Read ceiling in each run (TB/s): A1 4.50, A2 4.50, B1 4.50, B2 4.50." in lines


def test_rows_missing_from_a_run_and_other_kernels_are_left_out(tmp_path):
    a = [write(tmp_path, "a.csv", [("ch10 varlen", "x", 1), ("ch09 tensor_core", "x", 1), ("ch10 varlen", "z", 1)])]
    b = [write(tmp_path, "b.csv", [("ch10 varlen", "x", 2), ("ch09 tensor_core", "x", 1)])]
    lines = ab_table.table(a, b, kernel="ch10")
    rows = [line for line in lines if line.startswith("| ch")]
    assert rows == ["| ch10 varlen | x | 1.0 | 2.0 | 2.000 |"]


def test_no_common_row_is_an_error(tmp_path):
    a = [write(tmp_path, "a.csv", [("ch10 varlen", "x", 1)])]
    b = [write(tmp_path, "b.csv", [("ch10 varlen", "y", 1)])]
    with pytest.raises(SystemExit, match="no \\(kernel, shape\\) row"):
        ab_table.table(a, b)
