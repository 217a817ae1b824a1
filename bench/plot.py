"""Draw the book's benchmark plot from the CSV files the GPU benchmarks write.

    python bench/plot.py OUT.svg bench/results/ch01-dense.csv bench/results/ch04-paged-attention.csv ...

One group of bars per shape (Hq/Hkv/B/L), one bar per kernel: the percentage of the
ceiling measured in the same run (read ceiling for attention kernels). Every number
comes from the CSV; nothing is typed in.
"""

import csv
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def load(paths):
    """Rows of every CSV whose ceiling is the read ceiling, in file order."""
    rows = []
    for path in paths:
        with open(path, newline="") as f:
            rows += [r for r in csv.DictReader(f) if r["ceiling"] == "read"]
    return rows


def plot(rows, out_path):
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    kernels = list(dict.fromkeys(r["kernel"] for r in rows))
    width = 0.8 / len(kernels)
    # 8 inches: shown at the book's column width (750 px) with every text >= 12 px.
    fig, ax = plt.subplots(figsize=(8, 5.2))
    for i, kernel in enumerate(kernels):
        pct = {r["shape"]: float(r["pct"]) for r in rows if r["kernel"] == kernel}
        xs = [s + (i - (len(kernels) - 1) / 2) * width for s in range(len(shapes))]
        ax.bar(xs, [pct.get(s, 0.0) for s in shapes], width, label=kernel)
    ax.set_xticks(range(len(shapes)), shapes, fontsize=10)
    ax.tick_params(axis="y", labelsize=10)
    ax.set_xlabel("shape: query heads / KV heads / batch / context length (fp16, D = 128)", fontsize=10.5)
    ax.set_ylabel("% of the read ceiling", fontsize=10.5)
    ax.set_ylim(0, 105)
    ax.axhline(100, color="grey", linewidth=0.8)
    device = rows[0]["device"] if rows else ""
    ax.set_title(f"Decode attention on {device}:\nbytes that must move / time", fontsize=11.5)
    ax.spines[["top", "right"]].set_visible(False)
    # Below the bars, across the width: the column is too narrow for a legend beside them.
    ax.legend(fontsize=10, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    fig.tight_layout()
    # A white background: the plot reads the same in the book's light and dark themes.
    fig.savefig(out_path, metadata={"Date": None}, facecolor="white")  # no date: the same CSV, the same file


def main(argv):
    if len(argv) < 3:
        sys.exit("usage: plot.py OUT.svg RESULTS.csv [RESULTS.csv ...]")
    plot(load(argv[2:]), argv[1])


if __name__ == "__main__":
    main(sys.argv)
