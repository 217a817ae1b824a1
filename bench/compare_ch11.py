#!/usr/bin/env python3
"""Chapter 11's MLA decode beside FlashInfer's, as Markdown tables, from the two CSV files.

    python3 bench/compare_ch11.py OURS.csv FLASHINFER.csv [--cases bench/ch11_cases.txt] [--out OUT.md]

OURS.csv is bench_ch11 --csv (one row per case: us, pct_read, tflops), FLASHINFER.csv is
bench_flashinfer_mla.py --csv (one row per case and backend, fa2 and fa3). One table per
'## title' of the case file, its cases in the file's order ('= name' lines show a case again
in another table); cases of the CSVs the file does not list go to a last table. Columns:
case, our time, FA2's, FA3's, FlashInfer's time / ours (above 1: ours is faster), our % of
the read ceiling measured in our run, our TFLOP/s. A dash: that run has no row for the case
(the backend refused it or failed its check: bench_flashinfer_mla.py's notes say which).
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


def build(ours_rows, fi_rows, sections, ours_name="", fi_name=""):
    """The Markdown text (a list of lines)."""
    ours = {r["case"]: r for r in ours_rows}
    fi = {}
    for r in fi_rows:
        fi.setdefault(r["case"], {})[r["backend"]] = r
    listed = {n for _, names in sections for n in names}
    extra = [n for n in list(ours) + list(fi) if n not in listed]
    if extra:
        sections = sections + [("Cases not in the case file", list(dict.fromkeys(extra)))]
    out = [f"<!-- written by bench/compare_ch11.py from {ours_name} and {fi_name}: edit those, not this -->",
           "# Chapter 11's MLA decode beside FlashInfer's", ""]
    if ours_rows:
        r = ours_rows[0]
        out.append(f"Ours: bench_ch11 on {r['device']}, read ceiling in its run "
                   f"{float(r['read_ceiling_tbps']):.2f} TB/s.")
    if fi_rows:
        r = fi_rows[0]
        out.append(f"FlashInfer: bench_flashinfer_mla.py (BatchMLAPagedAttentionWrapper) on {r['device']}, "
                   f"read ceiling in its run {float(r['read_ceiling_tbps']):.2f} TB/s.")
    out += ["FA2 / ours and FA3 / ours are FlashInfer's time over ours: above 1, ours is faster. "
            "TFLOP/s counts 2 * (576 + 512) * h_q FLOPs per (query row, key it attends).", ""]
    ratios = {"fa2": [], "fa3": []}
    missing = []
    seen = set()
    for title, names in sections:
        out += [f"## {title}", "",
                "| case | ours (us) | FA2 (us) | FA3 (us) | FA2 / ours | FA3 / ours "
                "| ours % of read ceiling | ours TFLOP/s |",
                "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for name in names:
            o = ours.get(name)
            us = float(o["us"]) if o else None
            fa = {b: float(fi[name][b]["us"]) if b in fi.get(name, {}) else None for b in ("fa2", "fa3")}
            if name not in seen:  # a case shown twice counts once in the summary
                seen.add(name)
                for b in fa:
                    ratios[b].append(ratio(fa[b], us))
                if o is None or None in fa.values():
                    missing.append(name)
            out.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                name, fmt(us, ".1f"), fmt(fa["fa2"], ".1f"), fmt(fa["fa3"], ".1f"),
                fmt(ratio(fa["fa2"], us), ".2f") + ("x" if ratio(fa["fa2"], us) else ""),
                fmt(ratio(fa["fa3"], us), ".2f") + ("x" if ratio(fa["fa3"], us) else ""),
                fmt(float(o["pct_read"]) if o else None, ".1f"),
                fmt(float(o["tflops"]) if o else None, ".1f")))
        out.append("")
    g2, g3 = geomean(ratios["fa2"]), geomean(ratios["fa3"])
    out.append(f"Over the {len(seen)} cases (geometric mean of the ratios where both ran): "
               f"FA2 / ours {fmt(g2, '.2f')}, FA3 / ours {fmt(g3, '.2f')}.")
    if missing:
        out += ["", "Without a time in one of the runs: " + "; ".join(missing) + "."]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ours", help="bench_ch11 --csv output")
    ap.add_argument("flashinfer", help="bench_flashinfer_mla.py --csv output")
    ap.add_argument("--cases", default=ch11_cases.CASES_FILE, help="the case file (its '## ' tables)")
    ap.add_argument("--out", default="", help="write the Markdown here (default: stdout)")
    args = ap.parse_args(argv)
    _, sections = ch11_cases.read(args.cases)
    ours_rows = read_csv(args.ours)
    fi_rows = read_csv(args.flashinfer) if os.path.exists(args.flashinfer) else []
    text = "\n".join(build(ours_rows, fi_rows, sections, os.path.basename(args.ours),
                           os.path.basename(args.flashinfer))) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
