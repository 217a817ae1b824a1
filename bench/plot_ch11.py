"""Draw chapter 11's benchmark plots from the CSV files of one call: bench_ch11 --csv,
bench_flashinfer_mla.py --csv and, if given, bench_flashmla.py --csv.

    python bench/plot_ch11.py OUT_PREFIX OURS.csv FLASHINFER.csv [FLASHMLA.csv]

Two files, one bar per kernel and case (chapter 11, FlashInfer's FA2 and FA3 backends,
FlashMLA):
  OUT_PREFIX-memory.svg   the memory-bound cases (h_q * s_q <= 32, 64 or more sequences):
                          % of the read ceiling bench_ch11 measured in that call, for every
                          kernel (bytes the case must move / time / that one ceiling, so the
                          bars compare times), with chapter 11's 90% target;
  OUT_PREFIX-compute.svg  the compute-bound cases (h_q * s_q >= 128, 64 or more sequences):
                          TFLOP/s, with the target, 1.3 times FA2, marked on each case.
Cases are chosen by those rules from bench/ch11_cases.txt, in its order; a kernel with no
row for a case (FlashMLA refuses pages of 16 tokens) has no bar there. Every number comes
from the CSVs; nothing is typed in.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ch11_cases  # noqa: E402
from compare_ch11 import read_csv  # noqa: E402
from plot import bars, pct_of  # noqa: E402

OURS = "chapter 11 (mma.sync)"
LABEL = {"fa2": "FlashInfer FA2 (mma.sync)", "fa3": "FlashInfer FA3 (wgmma)",
         "flashmla": "FlashMLA (wgmma)"}
MEMORY_TARGET = 90.0   # % of the read ceiling (chapter 11's target)
COMPUTE_TARGET = 1.3   # times FA2's TFLOP/s (chapter 11's target)
MIN_BATCH = 64         # both targets are for batches of 64 sequences or more


def rows_of(ours_rows, other_rows):
    """One row a (kernel, case) in bars()'s terms: kernel, shape, pct (against our run's read
    ceiling), tflops, device."""
    ceiling = float(ours_rows[0]["read_ceiling_tbps"])
    device = ours_rows[0]["device"]
    return [{"kernel": kernel, "shape": r["case"], "device": device, "pct": pct_of(r, ceiling),
             "tflops": float(r["flops"]) / (float(r["us"]) * 1e-6) / 1e12}
            for kernel, r in [(OURS, r) for r in ours_rows] + [(LABEL[r["backend"]], r) for r in other_rows]]


def select(cases, rule):
    """The names of the cases (file order) whose (h_q * s_q, batch) satisfy rule."""
    return [name for name, hq, s_q, lengths, _ in cases if rule(hq * s_q, len(lengths))]


def plot(prefix, ours_rows, other_rows, cases):
    rows = rows_of(ours_rows, other_rows)
    series = {OURS: [OURS], **{LABEL[b]: [LABEL[b]] for b in ("fa2", "fa3", "flashmla")}}
    ceiling = float(ours_rows[0]["read_ceiling_tbps"])
    memory = select(cases, lambda rows_per_key, batch: rows_per_key <= 32 and batch >= MIN_BATCH)
    compute = select(cases, lambda rows_per_key, batch: rows_per_key >= 128 and batch >= MIN_BATCH)
    in_order = lambda names: [r for n in names for r in rows if r["shape"] == n]  # noqa: E731
    drawn = bars(in_order(memory), series, "pct",
                 f"% of the read ceiling of our run ({ceiling:.2f} TB/s): bytes / time",
                 "MLA decode, memory-bound cases (h_q x s_q <= 32), bf16, on {device}",
                 prefix + "-memory.svg", limit=105,
                 target=(MEMORY_TARGET, f"target: {MEMORY_TARGET:.0f}% of the read ceiling"))
    fa2 = {r["shape"]: r["tflops"] for r in rows if r["kernel"] == LABEL["fa2"]}
    drawn &= bars(in_order(compute), series, "tflops",
                  "TFLOP/s (2 x (576 + 512) FLOPs per query row and key)",
                  "MLA decode, compute-bound cases (h_q x s_q >= 128), bf16, on {device}",
                  prefix + "-compute.svg",
                  marks=(f"target: {COMPUTE_TARGET} x FA2", {c: COMPUTE_TARGET * t for c, t in fa2.items()}))
    return drawn


def main(argv):
    if len(argv) not in (4, 5):
        sys.exit("usage: plot_ch11.py OUT_PREFIX OURS.csv FLASHINFER.csv [FLASHMLA.csv]")
    prefix, ours_path, others = argv[1], argv[2], argv[3:]
    cases, _ = ch11_cases.read(ch11_cases.CASES_FILE)
    ours_rows = read_csv(ours_path)
    other_rows = [r for path in others for r in read_csv(path)]
    if not ours_rows:
        sys.exit(f"plot_ch11.py: {ours_path} has no rows")
    if not plot(prefix, ours_rows, other_rows, cases):
        sys.exit("plot_ch11.py: no case of the case file matched a plot's rule")


if __name__ == "__main__":
    main(sys.argv)
