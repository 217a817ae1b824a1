"""Draw chapter 10's benchmark plots from the CSV files bench_ch10 and bench_flashinfer.py write.

    python bench/plot_ch10.py OUT_PREFIX bench/results/ch10-varlen.csv bench/results/flashinfer-baselines.csv

Two files: OUT_PREFIX-decode.svg, one group of bars per decode-like case (decode, e4m3,
speculative decoding, mixed steps), one bar per kernel, the percentage of the read ceiling
measured in the same run as bench/plot.py draws it; and OUT_PREFIX-prefill.svg, TFLOP/s of
the prefill chunks from the -flops.csv files beside the given ones. Only the kernels worth
comparing are drawn (chapter 10, chapter 9, FlashInfer's best, SDPA); every number comes
from the CSVs; nothing is typed in.
"""

import csv
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plot import bars, load  # noqa: E402  (grouped bars; rows of the read ceiling, in file order)
from compare_ch10 import flashinfer_best  # noqa: E402  (the table's choice of FlashInfer's mode)

BEST_FLASHINFER = "FlashInfer (best mode)"  # rows made by with_flashinfer_best

# One bar per series; a series takes the first of its kernels that a case has (each case
# has at most one of them: the fp16 or the e4m3 kernel, decode or prefill wrapper).
DECODE_SERIES = {
    "chapter 10 (varlen)": ["ch10 varlen", "ch10 varlen e4m3"],
    "chapter 9 (tensor_core decode)": ["ch09 tensor_core", "ch09 fp8 (tensor_core)"],
    "FlashInfer (best mode, as in the table)": [BEST_FLASHINFER],
}
PREFILL_SERIES = {
    "chapter 10 (varlen)": ["ch10 varlen"],
    "FlashInfer prefill (best of fa2, fa3)": ["FlashInfer prefill (best)"],
    "torch SDPA flash (dense)": ["torch SDPA (dense, flash, causal)"],
    "torch SDPA cuDNN (dense)": ["torch SDPA (dense, cudnn, causal)"],
}


def flops_path(path):
    root, ext = os.path.splitext(path)
    return root + "-flops" + ext


def load_flops(paths):
    rows = []
    for path in paths:
        p = flops_path(path)
        if os.path.exists(p):
            with open(p, newline="") as f:
                rows += list(csv.DictReader(f))
    return rows


def with_flashinfer_best(rows):
    """The rows, each case's FlashInfer bar added as the table picks it (its decode or prefill
    wrapper, or both in two launches, whichever is fastest), placed after the case's rows."""
    best = {**flashinfer_best(rows, False), **flashinfer_best(rows, True)}
    out, seen = [], set()
    for r in rows:
        out.append(r)
        if r["shape"] in best and r["shape"] not in seen and r["kernel"].startswith("ch10 varlen"):
            seen.add(r["shape"])
            out.append({**best[r["shape"]], "kernel": BEST_FLASHINFER})
    return out


def main(argv):
    if len(argv) < 3:
        sys.exit("usage: plot_ch10.py OUT_PREFIX RESULTS.csv [RESULTS.csv ...]")
    prefix, paths = argv[1], argv[2:]
    bars(
        with_flashinfer_best(load(paths)),
        DECODE_SERIES,
        "pct",
        "% of the read ceiling (bytes that must move / time)",
        "Varlen paged attention, decode-like batches, on {device}",
        prefix + "-decode.svg",
        limit=105,
    )
    chunks = [r for r in load_flops(paths) if " chunk " in r["shape"]]
    bars(
        chunks,
        PREFILL_SERIES,
        "tflops",
        "TFLOP/s (causal FLOPs counted exactly)",
        "Prefill chunks (Hq/Hkv 32/8, D 128) on {device}",
        prefix + "-prefill.svg",
    )


if __name__ == "__main__":
    main(sys.argv)
