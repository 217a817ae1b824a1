"""Draw chapter 12's benchmark plot from the CSV files of one call: bench_ch12 --csv and
bench_flashinfer.py --part window --csv.

    python bench/plot_ch12.py OUT.svg OURS.csv FLASHINFER.csv

One group of bars per decode case (the prefill chunks, compute-bound, are left to the
table), one bar each for this chapter's kernel, FlashInfer's fastest kernel on the case and
the read kernel alone over the same bytes (the floor, where OURS.csv has it): % of the read
ceiling bench_ch12 measured in that call, on the bytes the case must move (the blocks its
windows touch, plus q and out), so the bars compare times; with chapter 12's target of 90%.
Every number comes from the CSVs; nothing is typed in.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_ch12 import fastest, floors, read_csv  # noqa: E402  (the table's choices)
from plot import bars, pct_of  # noqa: E402

OURS = "chapter 12 (window, sinks)"
FLASHINFER = "FlashInfer (window_left, AttentionSink)"
READ_ALONE = "the read kernel alone (floor)"
TARGET = 90.0  # % of the read ceiling (chapter 12's target)


def rows_of(ours_rows, fi_rows):
    """bars()'s rows: kernel (a series), shape, pct (against our run's read ceiling), device;
    decode cases only, in our file's order."""
    ceiling = float(ours_rows[0]["read_ceiling_tbps"])
    device = ours_rows[0]["device"]
    picked = [(OURS, fastest(ours_rows)), (FLASHINFER, fastest(fi_rows)), (READ_ALONE, floors(ours_rows))]
    out = []
    for case in dict.fromkeys(r["shape"] for r in ours_rows):
        if " chunk " in case:
            continue
        for series, best in picked:
            r = best.get(case)
            if r:
                out.append({"kernel": series, "shape": case, "pct": pct_of(r, ceiling), "device": device})
    return out


def main(argv):
    if len(argv) != 4:
        sys.exit("usage: plot_ch12.py OUT.svg OURS.csv FLASHINFER.csv")
    out, ours_rows, fi_rows = argv[1], read_csv(argv[2]), read_csv(argv[3])
    if not ours_rows:
        sys.exit(f"plot_ch12.py: {argv[2]} has no rows")
    ceiling = float(ours_rows[0]["read_ceiling_tbps"])
    rows = rows_of(ours_rows, fi_rows)
    if not bars(rows, {s: [s] for s in (OURS, FLASHINFER, READ_ALONE)}, "pct",
                f"% of the read ceiling of our run ({ceiling:.2f} TB/s): bytes / time",
                "Sliding-window decode (B 32, 32/8 heads, D 128, page 16) on {device}", out,
                limit=105, target=(TARGET, f"target: {TARGET:.0f}% of the read ceiling")):
        sys.exit("plot_ch12.py: no decode case in " + argv[2])


if __name__ == "__main__":
    main(sys.argv)
