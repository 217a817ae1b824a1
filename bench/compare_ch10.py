#!/usr/bin/env python3
"""Chapter 10's results as the book shows them, from the benchmarks' CSV files.

    python3 bench/compare_ch10.py RESULTS_DIR

reads RESULTS_DIR/ch10-varlen.csv and -flops.csv (bench_ch10) and, if present,
flashinfer-baselines.csv (bench_flashinfer.py), and writes
  ch10-varlen.md       bench_ch10's decode-like and prefill tables (the same columns);
  ch10-vs-baselines.md per shape: chapter 10, chapter 9 and FlashInfer's best mode, each as
                       time and % of its own run's read ceiling, and chapter 10's speed-up;
  ch10-prefill-vs-baselines.md  per prefill chunk and mixed step: chapter 10's TFLOP/s beside
                       dense flash SDPA's (the issue's reference: chapter 10 / SDPA), cuDNN
                       SDPA's and FlashInfer's best, from FILE-flops.csv of both runs;
  ch10-ladder.md       if RESULTS_DIR/ch10-ladder/vN-NAME.csv exist (one bench_ch10 run per
                       kernel version): chapter 10's % of the read ceiling (TFLOP/s for the
                       prefill chunks) per version, side by side.
Nothing is typed in: every number comes from the CSV files.
"""
import csv
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


def comparison(decode, baselines):
    def by(kernel_prefix, fp8):
        found = {}
        for r in decode + baselines:
            if r["kernel"].startswith(kernel_prefix) and ("e4m3" in r["shape"]) == fp8:
                found[r["shape"]] = r
        return found

    out = ["| shape | ch10 varlen | ch09 tensor_core | FlashInfer (best mode) | ch10 vs FlashInfer |",
           "|---|---:|---:|---:|---:|"]
    for fp8 in (False, True):
        ch10 = by("ch10 varlen", fp8)
        ch09 = by("ch09 fp8" if fp8 else "ch09 tensor_core", fp8)
        fi = by("FlashInfer decode e4m3", fp8) if fp8 else {}
        if not fp8:  # its best: a decode, a prefill wrapper, or both in two launches
            for prefix in ("FlashInfer decode (best)", "FlashInfer prefill (best)", "FlashInfer prefill + decode"):
                for shape, x in by(prefix, fp8).items():
                    if shape not in fi or float(x["us"]) < float(fi[shape]["us"]):
                        fi[shape] = x
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
    for r in versions[0][1]:
        if not r["kernel"].startswith("ch10"):
            continue
        cells = []
        for _, dec, _ in versions:
            m = [x for x in dec if x["kernel"] == r["kernel"] and x["shape"] == r["shape"]]
            cells.append(f"{float(m[0]['pct']):.1f}%" if m else "-")
        out.append(f"| {r['shape']} | " + " | ".join(cells) + " |")
    for r in versions[0][2]:
        if " chunk " not in r["shape"]:
            continue
        cells = []
        for _, _, fl in versions:
            m = [x for x in fl if x["kernel"] == r["kernel"] and x["shape"] == r["shape"]]
            cells.append(f"{float(m[0]['tflops']):.0f} TFLOP/s" if m else "-")
        out.append(f"| {r['shape']} | " + " | ".join(cells) + " |")
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
    (d / "ch10-vs-baselines.md").write_text(note + "\n".join(comparison(decode, baselines)) + "\n")
    fi_flops = d / "flashinfer-baselines-flops.csv"
    baseline_flops = rows(fi_flops) if fi_flops.exists() else []
    (d / "ch10-prefill-vs-baselines.md").write_text(
        "TFLOP/s (causal FLOPs counted exactly); each kernel in its own run.\n\n"
        + "\n".join(prefill_comparison(flops, baseline_flops)) + "\n")
    versions = sorted(p for p in (d / "ch10-ladder").glob("v*.csv") if not p.stem.endswith("-flops"))
    if versions:
        (d / "ch10-ladder.md").write_text("\n".join(ladder(versions)) + "\n")
    print(f"wrote {d / 'ch10-varlen.md'}, {d / 'ch10-vs-baselines.md'}, {d / 'ch10-prefill-vs-baselines.md'}"
          + (f" and {d / 'ch10-ladder.md'}" if versions else ""))


if __name__ == "__main__":
    main(sys.argv)
