"""Tests of the book's benchmark plots for chapters 11 and 12 (bench/plot_ch11.py,
bench/plot_ch12.py and the bars they share, bench/plot.py), with no GPU.

    python -m pytest -q bench/test_plots.py

- which cases each plot takes (the rules, on the real case file) and which it leaves out;
- every bar against the one read ceiling of our run (bytes / time / ceiling), so a faster
  kernel always has the longer bar, whatever ceiling its own run measured;
- a kernel with no row for a case has no bar there; the targets are drawn;
- the same CSV gives the same file, byte for byte.
"""

import csv
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import ch11_cases  # noqa: E402
import plot_ch11  # noqa: E402
import plot_ch12  # noqa: E402

DEVICE = "Test GPU"


def write(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return str(path)


def ch11_csvs(tmp_path, cases):
    """Ours at 100 us a case with a 2.0 TB/s ceiling; FA2 at 200 us, FA3 at 50 us (their
    run's ceiling 4.0); FlashMLA at 80 us, with no row for the page-16 case."""
    ours = write(tmp_path / "ours.csv",
                 ["kernel", "case", "us", "bytes", "tbps", "pct_read", "flops", "tflops",
                  "read_ceiling_tbps", "copy_ceiling_tbps", "device"],
                 [["ch11 mla decode", c, 100.0, 1.5e8, 0, 0, 4e10, 0, 2.0, 2.0, DEVICE] for c in cases])
    head = ["case", "backend", "us", "tbps", "pct_read", "tflops", "bytes", "flops",
            "read_ceiling_tbps", "device"]
    fi = write(tmp_path / "fi.csv", head,
               [[c, b, us, 0, 0, 0, 1.5e8, 4e10, 4.0, DEVICE] for c in cases
                for b, us in (("fa3", 50.0), ("fa2", 200.0))])
    fm = write(tmp_path / "fm.csv", head,
               [[c, "flashmla", 80.0, 0, 0, 0, 1.5e8, 4e10, 4.0, DEVICE] for c in cases if "page 16" not in c])
    return ours, fi, fm


def test_ch11_cases_by_rule():
    cases, _ = ch11_cases.read()
    memory = plot_ch11.select(cases, lambda k, b: k <= 32 and b >= plot_ch11.MIN_BATCH)
    compute = plot_ch11.select(cases, lambda k, b: k >= 128 and b >= plot_ch11.MIN_BATCH)
    assert [n for n in memory if n.startswith("target:")] == [c[0] for c in cases if c[0].startswith("target:")]
    assert "tp8 shard: Hq 16, B 64, L 4096" in memory and "Hq 16, B 32, L 4096" not in memory
    assert "Hq 128, B 64, L 4096" in compute and "Kimi K2 MTP: Hq 64, s_q 2, B 64, L 4096" in compute
    assert "Hq 128, B 16, L 65536" not in compute  # 16 sequences: outside the targets' batches
    spec = "spec: Hq 16, s_q 4, B 64, L 4096"  # 64 rows a key: between the two
    assert spec not in memory and spec not in compute


def test_ch11_bars_against_our_ceiling(tmp_path):
    cases = [c[0] for c in ch11_cases.read()[0]]
    ours, fi, fm = ch11_csvs(tmp_path, cases)
    rows = plot_ch11.rows_of(plot_ch11.read_csv(ours), plot_ch11.read_csv(fi) + plot_ch11.read_csv(fm))
    case = "target: Hq 16, B 64, L 8192"
    got = {r["kernel"]: r for r in rows if r["shape"] == case}
    # 1.5e8 bytes in 100 us is 1.5 TB/s: 75% of our 2.0 TB/s; FA3 (50 us) 150%, whatever its run measured.
    assert abs(got[plot_ch11.OURS]["pct"] - 75.0) < 1e-9
    assert abs(got[plot_ch11.LABEL["fa3"]]["pct"] - 150.0) < 1e-9
    assert abs(got[plot_ch11.LABEL["fa2"]]["tflops"] - 200.0) < 1e-9  # 4e10 FLOPs in 200 us
    assert all(r["device"] == DEVICE for r in rows)
    page16 = {r["kernel"] for r in rows if r["shape"] == "Hq 128, B 64, L 4096, page 16"}
    assert plot_ch11.LABEL["flashmla"] not in page16 and plot_ch11.OURS in page16


def test_ch11_writes_both_plots_the_same_each_time(tmp_path):
    cases = [c[0] for c in ch11_cases.read()[0]]
    ours, fi, fm = ch11_csvs(tmp_path, cases)
    texts = []
    for run in ("a", "b"):
        plot_ch11.main(["plot_ch11.py", str(tmp_path / run), ours, fi, fm])
        texts.append([(tmp_path / f"{run}-{part}.svg").read_text() for part in ("memory", "compute")])
    memory, compute = texts[0]
    assert texts[0] == texts[1]
    assert "target: Hq 32, B 64, L 8192" in memory and "Hq 128, s_q 2, B 64, L 4096" not in memory
    assert "Hq 128, s_q 2, B 64, L 4096" in compute and "target: Hq 32" not in compute
    assert "target: 90% of the read ceiling" in memory and "target: 1.3 x FA2" in compute
    assert "FlashMLA (wgmma)" in memory and DEVICE in memory


def ch12_csvs(tmp_path):
    head = ["kernel", "shape", "us", "bytes", "tbps", "pct", "ceiling", "read_ceiling_tbps",
            "copy_ceiling_tbps", "device"]
    ours = write(tmp_path / "ours.csv", head, [
        ["ch10 varlen", "32/8/32 ctx 1024 full", 50.0, 1e8, 0, 0, "read", 2.5, 2.4, DEVICE],
        ["read kernel (floor)", "32/8/32 ctx 1024 full", 40.0, 1e8, 0, 0, "read", 2.5, 2.4, DEVICE],
        ["ch12 window", "32/8/32 ctx 32768 window 1024", 50.0, 1e8, 0, 0, "read", 2.5, 2.4, DEVICE],
        ["ch12 window", "32/8 chunk 2048 ctx 32768 window 1024", 150.0, 4e7, 0, 0, "read", 2.5, 2.4, DEVICE]])
    fi = write(tmp_path / "fi.csv", head, [
        ["FlashInfer decode (tensor cores)", "32/8/32 ctx 1024 full", 45.0, 1e8, 0, 0, "read", 3.0, 2.9, DEVICE],
        ["FlashInfer decode (cuda cores)", "32/8/32 ctx 1024 full", 60.0, 1e8, 0, 0, "read", 3.0, 2.9, DEVICE],
        ["FlashInfer prefill (fa2, window_left)", "32/8 chunk 2048 ctx 32768 window 1024", 100.0, 4e7, 0, 0,
         "read", 3.0, 2.9, DEVICE]])
    return ours, fi


def test_ch12_decode_cases_against_our_ceiling(tmp_path):
    ours, fi = ch12_csvs(tmp_path)
    rows = plot_ch12.rows_of(plot_ch12.read_csv(ours), plot_ch12.read_csv(fi))
    got = {(r["kernel"], r["shape"]): r["pct"] for r in rows}
    assert not any(" chunk " in shape for _, shape in got)  # prefill chunks: the table's
    # 1e8 bytes in 50 us is 2.0 TB/s, 80% of our 2.5; FlashInfer's fastest (45 us) 88.9%; the floor 100%.
    assert abs(got[(plot_ch12.OURS, "32/8/32 ctx 1024 full")] - 80.0) < 1e-9
    assert abs(got[(plot_ch12.FLASHINFER, "32/8/32 ctx 1024 full")] - 100.0 * 1e8 / 45e-6 / 2.5e12) < 1e-9
    assert abs(got[(plot_ch12.READ_ALONE, "32/8/32 ctx 1024 full")] - 100.0) < 1e-9
    assert (plot_ch12.FLASHINFER, "32/8/32 ctx 32768 window 1024") not in got  # no row: no bar


def test_ch12_writes_the_plot(tmp_path):
    ours, fi = ch12_csvs(tmp_path)
    out = tmp_path / "ch12.svg"
    plot_ch12.main(["plot_ch12.py", str(out), ours, fi])
    text = out.read_text()
    assert "32/8/32 ctx 32768 window 1024" in text and " chunk " not in text
    assert "target: 90% of the read ceiling" in text and DEVICE in text
