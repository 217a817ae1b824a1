#!/usr/bin/env python3
"""Chapter 10's results as the book shows them, from the benchmarks' CSV files.

    python3 bench/compare_ch10.py RESULTS_DIR

reads RESULTS_DIR/ch10-varlen.csv and -flops.csv (bench_ch10) and, if present,
flashinfer-baselines.csv (bench_flashinfer.py), and writes
  ch10-varlen.md       bench_ch10's decode-like and prefill tables (the same columns);
  ch10-vs-baselines.md per shape: chapter 10, chapter 9 and FlashInfer's best mode, each as
                       time and % of its own run's read ceiling, and chapter 10's speed-up;
                       its first line names the GPU and the CSV files (one GPU a table: CSV
                       files of two GPUs are refused, not mixed);
  ch10-prefill-vs-baselines.md  per prefill chunk and mixed step: chapter 10's TFLOP/s beside
                       dense flash SDPA's (the issue's reference: chapter 10 / SDPA), cuDNN
                       SDPA's and FlashInfer's best, from FILE-flops.csv of both runs (the
                       GPU and the files named first, as above);
  ch10-ladder.md       if RESULTS_DIR/ch10-ladder/vN-NAME.csv exist (one bench_ch10 run per
                       kernel version): chapter 10's % of the read ceiling (TFLOP/s for the
                       prefill chunks) per version, side by side;
  ch10-ladder-N.md     the same ladder cut into narrow tables, one per stage of the story
                       (LADDER_GROUPS), each opening with the previous stage's last version,
                       and with a line naming the GPU its versions ran on;
  ch10-targets.md      the targets set before the kernel was written, beside this run's
                       results, met or missed (the header names the run's GPU);
  ch10-numbers.md      the few numbers the chapter's prose quotes, as mdBook anchors
                       ({{#include ch10-numbers.md:mqa}}), so that a new run changes the prose too.
Nothing is typed in: every number comes from the CSV files.
"""
import csv
import re
import sys
from pathlib import Path


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def decode_table(decode):
    out = [f"Measured on {decode[0]['device']}. Ceilings in the same run: read "
           f"{float(decode[0]['read_ceiling_tbps']):.2f} TB/s, device-to-device copy "
           f"{float(decode[0]['copy_ceiling_tbps']):.2f} TB/s (read + write).", "",
           "| kernel | shape (Hq/Hkv/B/L) | time (us) | MB moved | TB/s | % of ceiling |",
           "|---|---|---:|---:|---:|---:|"]
    for r in decode:
        out.append(f"| {r['kernel']} | {r['shape']} | {float(r['us']):.1f} | "
                   f"{float(r['bytes']) / 1e6:.1f} | {float(r['tbps']):.2f} | "
                   f"{float(r['pct']):.1f}% of {r['ceiling']} |")
    return out


def flops_table(flops):
    out = ["", "## Prefill chunks and mixed steps (causal FLOPs counted exactly)", "",
           "| kernel | case | time (us) | GFLOP | TFLOP/s |", "|---|---|---:|---:|---:|"]
    for r in flops:
        out.append(f"| {r['kernel']} | {r['shape']} | {float(r['us']):.1f} | "
                   f"{float(r['flops']) / 1e9:.2f} | {float(r['tflops']):.1f} |")
    return out


def by_kernel(rows_, kernel_prefix, fp8):
    """{shape: row} of the rows whose kernel starts with kernel_prefix, fp8 cases or the others."""
    return {r["shape"]: r for r in rows_
            if r["kernel"].startswith(kernel_prefix) and ("e4m3" in r["shape"]) == fp8}


def flashinfer_best(rows_, fp8):
    """FlashInfer's best mode per case: for fp16, the fastest of its decode wrapper, its prefill
    wrapper, and the two in two launches (a mixed step); for e4m3, its tensor-core decode. The
    table and the plot both take it from here."""
    if fp8:
        return by_kernel(rows_, "FlashInfer decode e4m3", fp8)
    best = {}
    for prefix in ("FlashInfer decode (best)", "FlashInfer prefill (best)", "FlashInfer prefill + decode"):
        for shape, x in by_kernel(rows_, prefix, fp8).items():
            if shape not in best or float(x["us"]) < float(best[shape]["us"]):
                best[shape] = x
    return best


def one_gpu(runs):
    """The one GPU that every run named in runs ({file name: its rows}) was measured on, from
    the CSV files' device column. Two GPUs' runs are never put in one table: each has its
    own read ceiling and its own speed, and a reader would compare them as if they were one
    run. Refused, with the files and their GPUs."""
    gpus = {name: {r["device"] for r in rows_} for name, rows_ in runs.items() if rows_}
    every = set().union(*gpus.values()) if gpus else set()
    if len(every) > 1:
        sys.exit("compare_ch10.py: one table per GPU, but "
                 + "; ".join(f"{name} ran on {' and '.join(sorted(g))}" for name, g in gpus.items())
                 + ": rerun the baselines on the same GPU, or compare them in tables of their own")
    return every.pop() if every else "an unknown GPU"


def caption(runs, what):
    """The line above a comparison table: its GPU and the files it comes from."""
    files = ", ".join(f"`bench/results/{name}`" for name, rows_ in runs.items() if rows_)
    return f"Measured on {one_gpu(runs)} ({files}); {what}."


def comparison(decode, baselines):
    out = ["| shape | ch10 varlen | ch09 tensor_core | FlashInfer (best mode) | ch10 vs FlashInfer |",
           "|---|---:|---:|---:|---:|"]
    for fp8 in (False, True):
        ch10 = by_kernel(decode + baselines, "ch10 varlen", fp8)
        ch09 = by_kernel(decode + baselines, "ch09 fp8" if fp8 else "ch09 tensor_core", fp8)
        fi = flashinfer_best(decode + baselines, fp8)
        for shape, r in ch10.items():
            cell = lambda x: f"{float(x['us']):.1f} us ({float(x['pct']):.0f}%)" if x else "-"
            ratio = f"{float(fi[shape]['us']) / float(r['us']):.2f}x" if shape in fi else "-"
            out.append(f"| {shape} | {cell(r)} | {cell(ch09.get(shape))} | {cell(fi.get(shape))} | {ratio} |")
    return out


def prefill_comparison(flops, baseline_flops):
    def by(kernel):
        return {r["shape"]: r for r in flops + baseline_flops if r["kernel"] == kernel}

    ch10, flash = by("ch10 varlen"), by("torch SDPA (dense, flash, causal)")
    cudnn, fi = by("torch SDPA (dense, cudnn, causal)"), by("FlashInfer prefill (best)")
    split = by("FlashInfer prefill + decode wrappers (2 launches)")
    cell = lambda x: f"{float(x['tflops']):.0f}" if x else "-"
    out = ["| case | ch10 varlen | SDPA flash (dense) | SDPA cuDNN (dense) | FlashInfer (best) "
           "| FlashInfer 2 launches | ch10 vs SDPA flash |", "|---|---:|---:|---:|---:|---:|---:|"]
    for shape, r in ch10.items():
        ratio = f"{float(r['tflops']) / float(flash[shape]['tflops']):.0%}" if shape in flash else "-"
        out.append(f"| {shape} | {cell(r)} | {cell(flash.get(shape))} | {cell(cudnn.get(shape))} "
                   f"| {cell(fi.get(shape))} | {cell(split.get(shape))} | {ratio} |")
    return out


def ladder(files):
    versions = [(f.stem, rows(f), rows(f.with_name(f.stem + "-flops.csv"))) for f in files]
    head = "| case | " + " | ".join(v for v, _, _ in versions) + " |"
    out = [head, "|---|" + "---:|" * len(versions)]
    seen = set()
    for r in (r for _, dec, _ in versions for r in dec):  # every version's cases, first seen first
        if not r["kernel"].startswith("ch10") or (r["kernel"], r["shape"]) in seen:
            continue
        seen.add((r["kernel"], r["shape"]))
        cells = []
        for _, dec, _ in versions:
            m = [x for x in dec if x["kernel"] == r["kernel"] and x["shape"] == r["shape"]]
            cells.append(f"{float(m[0]['pct']):.1f}%" if m else "-")
        out.append(f"| {r['shape']} | " + " | ".join(cells) + " |")
    for r in (r for _, _, fl in versions for r in fl):
        if " chunk " not in r["shape"] or (r["kernel"], r["shape"]) in seen:
            continue
        seen.add((r["kernel"], r["shape"]))
        cells = []
        for _, _, fl in versions:
            m = [x for x in fl if x["kernel"] == r["kernel"] and x["shape"] == r["shape"]]
            cells.append(f"{float(m[0]['tflops']):.0f} TFLOP/s" if m else "-")
        out.append(f"| {r['shape']} | " + " | ".join(cells) + " |")
    return out


# The ladder's stages, by major version: the appendix "How these kernels got fast" gives
# each its own table, narrow enough for the book's column.
LADDER_GROUPS = [(0, 1, 2, 3), (4,), (5,), (6,), (7, 8, 9), (19,)]


def version_key(stem):
    """'v4.2-shifts-...' -> (4, 2), for sorting and grouping."""
    tag = stem.split("-", 1)[0][1:]
    major, _, minor = tag.partition(".")
    return int(major), int(minor or 0)


def ladder_groups(files):
    """The ladder as one narrow table per stage; a stage's table opens with the previous
    stage's last version, so that each shows what its versions changed."""
    files = sorted(files, key=lambda f: version_key(f.stem))
    tables, previous = [], None
    for majors in LADDER_GROUPS:
        group = [f for f in files if version_key(f.stem)[0] in majors]
        if not group:
            continue
        shown = ([previous] if previous else []) + group
        table = ladder(shown)
        tags = [f.stem.split("-", 1)[0] for f in shown]
        table[0] = "| case | " + " | ".join(tags) + " |"
        # The prefill rows carry their unit in the case column, not in every cell.
        table = [line.replace(" TFLOP/s |", " |") for line in table]
        table = [re.sub(r"^\| (32/8 chunk [^|]*)\|", r"| \1(TFLOP/s) |", line) for line in table]
        one_gpu({f"ch10-ladder/{f.name}": rows(f) for f in shown})  # refuses two GPUs in a table
        table = [caption({"ch10-ladder/": [r for f in shown for r in rows(f)]},
                         "one run of `bench_ch10` per version, each against its own read ceiling"), ""] + table
        tables.append(table)
        previous = group[-1]
    return tables


def pick(rows_, kernel, shape):
    for r in rows_:
        if r["kernel"] == kernel and r["shape"] == shape:
            return r
    return None


LONG_SHAPES = ["32/8/32/4096", "32/8/8/32768", "32/8/128/1024", "32/32/32/4096"]
SHORT_SHAPE = "32/8/64/32"
MQA_SHAPE = "32/1/32/4096"
RAGGED_32K = "32/8 ragged 1x32768+63x256"


def targets(decode, flops, baselines, baseline_flops):
    """The targets of chapter 10's "What good looks like", each beside this run."""
    ch10 = [r for r in decode if r["kernel"] == "ch10 varlen"]
    ch10_fp8 = [r for r in decode if r["kernel"] == "ch10 varlen e4m3"]
    fi_best = {}
    for r in baselines:  # FlashInfer's best: a decode, a prefill wrapper, or both in two launches
        if r["kernel"] in ("FlashInfer decode (best)", "FlashInfer prefill (best)",
                           "FlashInfer prefill + decode wrappers (2 launches)"):
            if r["shape"] not in fi_best or float(r["us"]) < float(fi_best[r["shape"]]["us"]):
                fi_best[r["shape"]] = r
    fi_fp8 = {r["shape"]: r for r in baselines if r["kernel"] == "FlashInfer decode e4m3 (tensor cores)"}
    pct = lambda r: f"{float(r['pct']):.1f}%"
    met = lambda n, total: f"{n} of {total}"
    # A ratio that rounds to the target at the precision it is stated in counts as met.
    out = [f"| target (this run: {gpu_name(decode)}) | result | met |", "|---|---|---|"]

    long_rows = [pick(ch10, "ch10 varlen", s) for s in LONG_SHAPES]
    long_rows = [r for r in long_rows if r]
    out.append("| decode, the four long standard shapes: at least 95% of the read ceiling | "
               + ", ".join(f"{r['shape']} {pct(r)}" for r in long_rows) + " | "
               + met(sum(float(r["pct"]) >= 95 for r in long_rows), len(long_rows)) + " |")
    ragged = [r for r in ch10 if "ragged" in r["shape"]]
    out.append("| every ragged batch: at least 90% | "
               + ", ".join(f"{r['shape'].replace('32/8 ragged ', '')} {pct(r)}" for r in ragged) + " | "
               + met(sum(float(r["pct"]) >= 90 for r in ragged), len(ragged)) + " |")
    vs = [(r, float(fi_best[r["shape"]]["us"]) / float(r["us"])) for r in ch10
          if r["shape"] in fi_best and "mixed" not in r["shape"]]
    if vs:
        low = sorted(vs, key=lambda x: x[1])[:3]
        out.append("| every decode and verification case: at least 1.0x FlashInfer's best mode | "
                   f"{min(x for _, x in vs):.2f}x to {max(x for _, x in vs):.2f}x; lowest: "
                   + ", ".join(f"{r['shape']} {x:.2f}x" for r, x in low) + " | "
                   + met(sum(x >= 0.995 for _, x in vs), len(vs)) + " |")
    short = pick(ch10, "ch10 varlen", SHORT_SHAPE)
    if short:
        fi = fi_best.get(SHORT_SHAPE)
        out.append(f"| the short batch ({SHORT_SHAPE}): at most 7 us | {float(short['us']):.1f} us"
                   + (f" (FlashInfer {float(fi['us']):.1f} us)" if fi else "") + " | "
                   + ("yes" if float(short["us"]) <= 7 else "no") + " |")
    fp8 = [(r, float(fi_fp8[r["shape"]]["us"]) / float(r["us"])) for r in ch10_fp8 if r["shape"] in fi_fp8]
    if fp8:
        out.append("| e4m3 cache: at least 1.2x FlashInfer's e4m3 decode, every case | "
                   f"{min(x for _, x in fp8):.2f}x to {max(x for _, x in fp8):.2f}x | "
                   + met(sum(x >= 1.195 for _, x in fp8), len(fp8)) + " |")
    flash = {r["shape"]: r for r in baseline_flops if r["kernel"] == "torch SDPA (dense, flash, causal)"}
    chunks = [(r, float(r["tflops"]) / float(flash[r["shape"]]["tflops"])) for r in flops
              if r["kernel"] == "ch10 varlen" and " chunk " in r["shape"] and r["shape"] in flash]
    if chunks:
        low = min(chunks, key=lambda x: x[1])
        out.append("| prefill chunks: at least 70% of dense flash SDPA's TFLOP/s | "
                   f"{min(x for _, x in chunks):.0%} to {max(x for _, x in chunks):.0%}; lowest: "
                   f"{low[0]['shape']} | " + met(sum(x >= 0.695 for _, x in chunks), len(chunks)) + " |")
    return out


def gpu_name(decode):
    """The run's GPU as the prose names it ("NVIDIA H200" -> "H200")."""
    return decode[0]["device"].replace("NVIDIA ", "") if decode else "GPU unknown"


def numbers(decode, baselines):
    """Sentence pieces for the chapter's prose, one mdBook anchor each, each naming its GPU."""
    fi_best = {r["shape"]: r for r in baselines if r["kernel"] == "FlashInfer decode (best)"}
    us = lambda r: f"{float(r['us']):.1f} µs"
    out = []

    def anchor(name, text):
        out.extend([f"ANCHOR: {name}", text, f"ANCHOR_END: {name}"])

    for shape, name in ((RAGGED_32K, "ragged"), (MQA_SHAPE, "mqa"), (SHORT_SHAPE, "short")):
        r10, r9 = pick(decode, "ch10 varlen", shape), pick(decode, "ch09 tensor_core", shape)
        fi = fi_best.get(shape)
        if not r10:
            continue
        on = f" on the {gpu_name(decode)}"
        text = f"{us(r10)}, {float(r10['pct']):.0f}% of the read ceiling{on}"
        if r9:
            text += f" (chapter 9's `tensor_core`: {us(r9)}, {float(r9['pct']):.0f}%"
            text += f"; FlashInfer's best: {us(fi)})" if fi else ")"
        anchor(name, text)
        if r9:
            anchor(name + "-ch09", f"{us(r9)}, {float(r9['pct']):.0f}% of the read ceiling{on}")
    return out


def main(argv):
    d = Path(argv[1]) if len(argv) > 1 else Path("bench/results")
    decode = rows(d / "ch10-varlen.csv")
    flops = rows(d / "ch10-varlen-flops.csv")
    (d / "ch10-varlen.md").write_text("\n".join(decode_table(decode) + flops_table(flops)) + "\n")
    fi_path = d / "flashinfer-baselines.csv"
    baselines = rows(fi_path) if fi_path.exists() else []
    note = ("" if baselines else "FlashInfer's baselines are missing (bench/bench_flashinfer.py "
            "did not run): its column is empty.\n\n")
    runs = {"ch10-varlen.csv": decode, "flashinfer-baselines.csv": baselines}
    (d / "ch10-vs-baselines.md").write_text(
        caption(runs, "each kernel against its own run's read ceiling") + "\n\n"
        + note + "\n".join(comparison(decode, baselines)) + "\n")
    fi_flops = d / "flashinfer-baselines-flops.csv"
    baseline_flops = rows(fi_flops) if fi_flops.exists() else []
    runs = {"ch10-varlen-flops.csv": flops, "flashinfer-baselines-flops.csv": baseline_flops}
    (d / "ch10-prefill-vs-baselines.md").write_text(
        caption(runs, "TFLOP/s (causal FLOPs counted exactly), each kernel in its own run") + "\n\n"
        + "\n".join(prefill_comparison(flops, baseline_flops)) + "\n")
    versions = sorted((p for p in (d / "ch10-ladder").glob("v*.csv") if not p.stem.endswith("-flops")),
                      key=lambda p: (version_key(p.stem), p.stem))  # v15 after v9, not after v1
    if versions:
        (d / "ch10-ladder.md").write_text("\n".join(ladder(versions)) + "\n")
        for i, table in enumerate(ladder_groups(versions), 1):
            (d / f"ch10-ladder-{i}.md").write_text("\n".join(table) + "\n")
    (d / "ch10-targets.md").write_text(
        "\n".join(targets(decode, flops, baselines, baseline_flops)) + "\n")
    (d / "ch10-numbers.md").write_text("\n".join(numbers(decode, baselines)) + "\n")
    print(f"wrote {d / 'ch10-varlen.md'}, {d / 'ch10-vs-baselines.md'}, {d / 'ch10-prefill-vs-baselines.md'}, "
          f"{d / 'ch10-targets.md'}, {d / 'ch10-numbers.md'}"
          + (f" and {d / 'ch10-ladder.md'} (and its parts)" if versions else ""))


if __name__ == "__main__":
    main(sys.argv)
