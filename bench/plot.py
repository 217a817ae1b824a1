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
matplotlib.rcParams["svg.hashsalt"] = "pa"  # element ids fixed: the same CSV, the same file
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


def pct_of(row, ceiling_tbps):
    """A result row's bytes over its time ("bytes", "us" columns) as % of a ceiling in TB/s:
    the plots of chapters 11 and 12 put every kernel against one run's ceiling with it."""
    return 100.0 * float(row["bytes"]) / (float(row["us"]) * 1e-6) / (ceiling_tbps * 1e12)


def bars(rows, series, value, xlabel, title, out_path, limit=None, target=None, marks=None):
    """Horizontal grouped bars: one group per case (top to bottom in file order), one bar
    per series present. rows: dicts with "kernel", "shape", the column `value` and
    "device"; series: {bar label: [kernels]}, a bar taking the first kernel a case has.
    limit: an x range of 0..limit with a line at 100 (percentages). target: (x, label), a
    dashed line across every case. marks: (label, {case: x}), a tick on each case's group."""
    wanted = {k for ks in series.values() for k in ks}
    rows = [r for r in rows if r["kernel"] in wanted]
    cases = list(dict.fromkeys(r["shape"] for r in rows))
    if not cases:
        return False
    vals = {}
    for name, kernels in series.items():
        for case in cases:
            for k in kernels:
                got = [float(r[value]) for r in rows if r["kernel"] == k and r["shape"] == case]
                if got:
                    vals.setdefault(name, {})[case] = got[0]
                    break
    present = [n for n in series if n in vals]
    height = 0.8 / max(1, len(present))
    # 8 inches wide: shown at the book's column width (750 px) with every text >= 12 px.
    fig_h = 0.15 * len(cases) * max(2, len(present)) + 2.0
    fig, ax = plt.subplots(figsize=(8, fig_h))
    for i, name in enumerate(present):
        ys = [c + (i - (len(present) - 1) / 2) * height for c in range(len(cases))]
        ax.barh(ys, [vals[name].get(s, 0.0) for s in cases], height, label=name)
    ax.set_yticks(range(len(cases)), cases, fontsize=10)
    ax.tick_params(axis="x", labelsize=10)
    ax.set_ylim(len(cases) - 0.5, -0.5)  # top to bottom in file order, no empty margin
    ax.set_xlabel(xlabel, fontsize=10.5)
    if limit:
        ax.set_xlim(0, limit)
        ax.axvline(100, color="grey", linewidth=0.8)
    if target:
        ax.axvline(target[0], color="black", linewidth=1.0, linestyle="--", label=target[1])
    if marks:
        got = [(c, marks[1][s]) for c, s in enumerate(cases) if s in marks[1]]
        ax.scatter([x for _, x in got], [c for c, _ in got], marker="|", s=900, linewidths=2.0,
                   color="black", zorder=3, label=marks[0])
    device = rows[0].get("device", "")
    labels = len(present) + bool(target) + bool(marks)
    ncol = 2 if labels <= 4 else 3
    legend_rows = -(-labels // ncol)
    # Room above the axes for the title and the legend: 0.75 inches, 0.2 more a third row on.
    top = 1 - (0.75 + 0.2 * max(0, legend_rows - 2)) / fig_h
    fig.suptitle(title.format(device=device), fontsize=11.5, y=1 - 0.08 / fig_h, va="top")
    ax.spines[["top", "right"]].set_visible(False)
    fig.legend(fontsize=10, loc="lower center", bbox_to_anchor=(0.5, top - 0.1 / fig_h), ncol=ncol,
               frameon=False, markerscale=0.5)
    fig.tight_layout(rect=(0, 0, 1, top))
    # A white background: the plot reads the same in the book's light and dark themes.
    fig.savefig(out_path, metadata={"Date": None}, facecolor="white")  # no date: the same CSV, the same file
    plt.close(fig)
    return True


def main(argv):
    if len(argv) < 3:
        sys.exit("usage: plot.py OUT.svg RESULTS.csv [RESULTS.csv ...]")
    plot(load(argv[2:]), argv[1])


if __name__ == "__main__":
    main(sys.argv)
