#!/usr/bin/env python3
"""Chapter 11's MLA decode beside FlashInfer's, as Markdown tables, from the two CSV files.

    python3 bench/compare_ch11.py OURS.csv FLASHINFER.csv [--flashmla FLASHMLA.csv]
        [--cases bench/ch11_cases.txt] [--out OUT.md]

OURS.csv is bench_ch11 --csv (one row per case: us, pct_read, tflops), FLASHINFER.csv is
bench_flashinfer_mla.py --csv (one row per case and backend, fa2 and fa3). One table per
'## title' of the case file, its cases in the file's order ('= name' lines show a case again
in another table); cases of the CSVs the file does not list go to a last table. Columns:
case, our time, FA2's, FA3's, FlashInfer's time / ours (above 1: ours is faster), our % of
the read ceiling measured in our run, our TFLOP/s. With --flashmla (bench_flashmla.py
--csv), FlashMLA's time and FlashMLA / ours join them. A dash: that run has no row for the
case (the backend refused it or failed its check: the bench scripts' notes say which).
Nothing is typed in: every number comes from the CSV files. Prints to stdout without --out.
"""

import argparse
import csv
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ch11_cases  # noqa: E402

DASH = "—"


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def fmt(x, spec):
    return DASH if x is None else format(x, spec)


def ratio(theirs, ours):
    return None if theirs is None or ours is None else theirs / ours


def geomean(xs):
    xs = [x for x in xs if x is not None]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def build(ours_rows, fi_rows, sections, ours_name="", fi_name="", fm_rows=(), fm_name=""):
    """The Markdown text (a list of lines)."""
    ours = {r["case"]: r for r in ours_rows}
    fi = {}
    for r in list(fi_rows) + list(fm_rows):
        fi.setdefault(r["case"], {})[r["backend"]] = r
    backends = ("fa2", "fa3") + (("flashmla",) if fm_rows else ())
    label = {"fa2": "FA2", "fa3": "FA3", "flashmla": "FlashMLA"}
    listed = {n for _, names in sections for n in names}
    extra = [n for n in list(ours) + list(fi) if n not in listed]
    if extra:
        sections = sections + [("Cases not in the case file", list(dict.fromkeys(extra)))]
    names = f"{ours_name}, {fi_name} and {fm_name}" if fm_rows else f"{ours_name} and {fi_name}"
    out = [f"<!-- written by bench/compare_ch11.py from {names}: edit those, not this -->",
           "# Chapter 11's MLA decode beside FlashInfer's" + (" and FlashMLA's" if fm_rows else ""), ""]
    if ours_rows:
        r = ours_rows[0]
        out.append(f"Ours: bench_ch11 on {r['device']}, read ceiling in its run "
                   f"{float(r['read_ceiling_tbps']):.2f} TB/s.")
    if fi_rows:
        r = fi_rows[0]
        out.append(f"FlashInfer: bench_flashinfer_mla.py (BatchMLAPagedAttentionWrapper) on {r['device']}, "
                   f"read ceiling in its run {float(r['read_ceiling_tbps']):.2f} TB/s.")
    if fm_rows:
        r = fm_rows[0]
        out.append(f"FlashMLA: bench_flashmla.py (sgl-flash-mla, SM90 dense decode) on {r['device']}, "
                   f"read ceiling in its run {float(r['read_ceiling_tbps']):.2f} TB/s.")
    out += [" and ".join(f"{label[b]} / ours" for b in backends) + " are that kernel's time over ours: "
            "above 1, ours is faster. "
            "TFLOP/s counts 2 * (576 + 512) * h_q FLOPs per (query row, key it attends).", ""]
    ratios = {b: [] for b in backends}
    missing = []
    seen = set()
    for title, names in sections:
        out += [f"## {title}", "",
                "| case | ours (us) | " + " | ".join(f"{label[b]} (us)" for b in backends) + " | "
                + " | ".join(f"{label[b]} / ours" for b in backends)
                + " | ours % of read ceiling | ours TFLOP/s |",
                "|---|" + "---:|" * (3 + 2 * len(backends))]
        for name in names:
            o = ours.get(name)
            us = float(o["us"]) if o else None
            fa = {b: float(fi[name][b]["us"]) if b in fi.get(name, {}) else None for b in backends}
            if name not in seen:  # a case shown twice counts once in the summary
                seen.add(name)
                for b in fa:
                    ratios[b].append(ratio(fa[b], us))
                if o is None or None in fa.values():
                    missing.append(name)
            cells = [name, fmt(us, ".1f")] + [fmt(fa[b], ".1f") for b in backends]
            cells += [fmt(ratio(fa[b], us), ".2f") + ("x" if ratio(fa[b], us) else "") for b in backends]
            cells += [fmt(float(o["pct_read"]) if o else None, ".1f"),
                      fmt(float(o["tflops"]) if o else None, ".1f")]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    out.append(f"Over the {len(seen)} cases (geometric mean of the ratios where both ran): "
               + ", ".join(f"{label[b]} / ours {fmt(geomean(ratios[b]), '.2f')}" for b in backends) + ".")
    if missing:
        out += ["", "Without a time in one of the runs: " + "; ".join(missing) + "."]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ours", help="bench_ch11 --csv output")
    ap.add_argument("flashinfer", help="bench_flashinfer_mla.py --csv output")
    ap.add_argument("--flashmla", default="", help="bench_flashmla.py --csv output (optional)")
    ap.add_argument("--cases", default=ch11_cases.CASES_FILE, help="the case file (its '## ' tables)")
    ap.add_argument("--out", default="", help="write the Markdown here (default: stdout)")
    args = ap.parse_args(argv)
    _, sections = ch11_cases.read(args.cases)
    ours_rows = read_csv(args.ours)
    fi_rows = read_csv(args.flashinfer) if os.path.exists(args.flashinfer) else []
    fm_rows = read_csv(args.flashmla) if args.flashmla else []
    text = "\n".join(build(ours_rows, fi_rows, sections, os.path.basename(args.ours),
                           os.path.basename(args.flashinfer), fm_rows,
                           os.path.basename(args.flashmla))) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
