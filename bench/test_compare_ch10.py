"""Tests of bench/compare_ch10.py that need no GPU: each comparison table names its GPU and its
files, and the CSV files of two GPUs are refused rather than put in one table.

    python -m pytest -q bench/test_compare_ch10.py
"""

import csv
import pathlib
import shutil
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
HEADER = "kernel,shape,us,bytes,tbps,pct,ceiling,read_ceiling_tbps,copy_ceiling_tbps,device"
FLOPS = "kernel,shape,us,flops,tflops,device"


def write(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header.split(","))
        w.writerows(rows)


def results(d, fi_device):
    """A tiny results folder: chapter 10 and chapter 9 on the H200, FlashInfer on fi_device."""
    h200 = "NVIDIA H200"
    write(d / "ch10-varlen.csv", HEADER, [
        ["ch10 varlen", "32/8/32/4096", 130.0, 5.4e8, 4.1, 90.0, "read", 4.5, 4.2, h200],
        ["ch09 tensor_core", "32/8/32/4096", 131.0, 5.4e8, 4.1, 91.0, "read", 4.5, 4.2, h200]])
    write(d / "ch10-varlen-flops.csv", FLOPS, [["ch10 varlen", "32/8 chunk 512 ctx 0", 60.0, 4e9, 62.0, h200]])
    write(d / "flashinfer-baselines.csv", HEADER, [
        ["FlashInfer decode (best)", "32/8/32/4096", 131.5, 5.4e8, 4.1, 93.0, "read", 4.4, 4.3, fi_device]])
    write(d / "flashinfer-baselines-flops.csv", FLOPS, [
        ["torch SDPA (dense, flash, causal)", "32/8 chunk 512 ctx 0", 40.0, 4e9, 93.0, fi_device]])


def run(d):
    return subprocess.run([sys.executable, str(HERE / "compare_ch10.py"), str(d)],
                          capture_output=True, text=True)


def test_each_table_names_its_gpu_and_files(tmp_path):
    results(tmp_path, "NVIDIA H200")
    r = run(tmp_path)
    assert r.returncode == 0, r.stderr
    first = (tmp_path / "ch10-vs-baselines.md").read_text().splitlines()[0]
    assert first.startswith("Measured on NVIDIA H200 (`bench/results/ch10-varlen.csv`, "
                            "`bench/results/flashinfer-baselines.csv`)"), first
    first = (tmp_path / "ch10-prefill-vs-baselines.md").read_text().splitlines()[0]
    assert first.startswith("Measured on NVIDIA H200 (`bench/results/ch10-varlen-flops.csv`, "
                            "`bench/results/flashinfer-baselines-flops.csv`)"), first
    assert "(this run: H200)" in (tmp_path / "ch10-targets.md").read_text()


def test_two_gpus_are_refused_not_mixed(tmp_path):
    results(tmp_path, "NVIDIA H100 80GB HBM3")
    r = run(tmp_path)
    assert r.returncode != 0
    assert "one table per GPU" in r.stderr
    assert "ch10-varlen.csv ran on NVIDIA H200" in r.stderr
    assert "flashinfer-baselines.csv ran on NVIDIA H100 80GB HBM3" in r.stderr
    assert not (tmp_path / "ch10-vs-baselines.md").exists()


def test_a_ladder_stage_of_two_gpus_is_refused(tmp_path):
    results(tmp_path, "NVIDIA H200")
    (tmp_path / "ch10-ladder").mkdir()
    for version, device in (("v1-a", "NVIDIA H100 80GB HBM3"), ("v1.1-b", "NVIDIA H200")):
        shutil.copy(tmp_path / "ch10-varlen.csv", tmp_path / "ch10-ladder" / f"{version}.csv")
        shutil.copy(tmp_path / "ch10-varlen-flops.csv", tmp_path / "ch10-ladder" / f"{version}-flops.csv")
        text = (tmp_path / "ch10-ladder" / f"{version}.csv").read_text().replace("NVIDIA H200", device)
        (tmp_path / "ch10-ladder" / f"{version}.csv").write_text(text)
    r = run(tmp_path)
    assert r.returncode != 0 and "one table per GPU" in r.stderr
