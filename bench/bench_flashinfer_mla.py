#!/usr/bin/env python3
"""FlashInfer's MLA decode on chapter 11's cases: the baseline for the latent-cache kernel.

    python3 bench/bench_flashinfer_mla.py --md OUT.md [--csv OUT.csv] [--backends fa2,fa3]
        [--cases bench/ch11_cases.txt] [--only TEXT] [--list]

The cases are bench/ch11_cases.txt's, the file bench_ch11 reads too (one list, the same
names). --only runs the cases whose name holds TEXT; --list prints the cases, their bytes,
FLOPs and pool sizes, and exits (no torch needed).

The cache is chapter 11's: one pool [num_pages, page_size, 576] of bf16, each token's
[c_kv (512) | k_rope (64)] row, pages handed out through a randomly permuted page table.
FlashInfer reads it as two adjacent views (ckv = pool[..., :512], kpe = pool[..., 512:]), so
both kernels read the same bytes. Queries are already absorbed: q_nope [N, Hq, 512] (that is
q_nope W_UK^T) and q_pe [N, Hq, 64]; the output is the latent-space [N, Hq, 512] (before
W_UV); the scale is DeepSeek-V3's 1/sqrt(128 + 64). s_q new tokens per sequence attend
causally (token i of n sees the context's first L - n + i + 1 tokens).

FlashInfer is flashinfer-python 0.7.2.post1 from the trimmed wheel (tools/fetch_flashinfer.sh
keeps its batch MLA sources), BatchMLAPagedAttentionWrapper, planned through its flat CSR
arguments, with the FA2 and the FA3 (Hopper) backends, each reported (one row per case and
backend; compare_ch11.py sets both beside bench_ch11's times).

Reported per case: time (CUDA events, median of 30 after 5 warm-ups, a GPU-side spin before
each start, pools rotated so the working set is >= 10x L2), bytes (every sequence's whole
latent context, 1,152 bytes a token, plus q and out), TB/s and % of the read ceiling measured
in this run (bench_torch.py's measure_ceilings), and TFLOP/s with the FLOPs counted exactly:
2 * (576 + 512) * Hq per (query row, key it attends). Correctness first: every output row of
the first, the longest and the last sequence against a float32 reference from the same pool;
max |out - ref| / max |ref| < 2e-2, else the row is dropped and marked FAILED (exit 1).
"""

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_torch as bt  # noqa: E402  (timer, ceilings, rotation, errors)
import ch11_cases  # noqa: E402  (the case list, shared with bench_ch11)

D_C, D_R = 512, 64
D_QK = D_C + D_R
SCALE = 1.0 / math.sqrt(128 + 64)
BYTES_PER_TOKEN = D_QK * 2


def counts(heads, s_q, lengths):
    """(bytes, flops) of one step: whole latent contexts read once, plus q and out."""
    tokens = sum(lengths)
    rows = len(lengths) * s_q * heads
    nbytes = tokens * BYTES_PER_TOKEN + rows * (D_QK + D_C) * 2
    keys = sum(L - s_q + i + 1 for L in lengths for i in range(s_q))
    return nbytes, 2 * (D_QK + D_C) * heads * keys


def make_case(torch, heads, s_q, lengths, page, copies, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    pages = [math.ceil(L / page) for L in lengths]
    n_pages = sum(pages)
    perm = torch.randperm(n_pages, generator=g, device="cuda").int()
    kv_indptr = torch.tensor([0] + list(__import__("itertools").accumulate(pages)),
                             dtype=torch.int32, device="cuda")
    pools = [torch.randn(n_pages, page, D_QK, generator=g, device="cuda").to(torch.bfloat16)
             for _ in range(copies)]
    n = len(lengths) * s_q
    q = [torch.randn(n, heads, D_QK, generator=g, device="cuda").to(torch.bfloat16)
         for _ in range(copies)]
    qo_indptr = torch.arange(0, n + 1, s_q, dtype=torch.int32, device="cuda")
    kv_len = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    return dict(pools=pools, q=q, perm=perm, kv_indptr=kv_indptr, qo_indptr=qo_indptr,
                kv_len=kv_len, pages=pages)


def reference_rows(torch, c, b, heads, s_q, lengths, page):
    """float32 latent-space output of sequence b's s_q rows: [s_q, heads, 512]."""
    start = int(c["kv_indptr"][b])
    idx = c["perm"][start:start + c["pages"][b]].long()
    kv = c["pools"][0][idx].reshape(-1, D_QK)[: lengths[b]].float()
    q = c["q"][0][b * s_q:(b + 1) * s_q].float()
    s = torch.einsum("thd,kd->thk", q, kv) * SCALE
    L = lengths[b]
    for i in range(s_q):
        s[i, :, L - s_q + i + 1:] = -float("inf")
    return torch.einsum("thk,kd->thd", torch.softmax(s, dim=-1), kv[:, :D_C])


def run_case(torch, fi, timer, ceil, case, backends, log):
    name, heads, s_q, lengths, page = case
    nbytes, flops = counts(heads, s_q, lengths)
    copies = bt.rotation_count(torch, nbytes)
    c = make_case(torch, heads, s_q, lengths, page, copies, seed=11)
    ws = torch.empty(128 * 2**20, dtype=torch.uint8, device="cuda")
    rows = []
    for backend in backends:
        try:
            w = fi.mla.BatchMLAPagedAttentionWrapper(ws, backend=backend)
            w.plan(c["qo_indptr"], c["kv_indptr"], c["perm"], c["kv_len"], heads, D_C, D_R, page,
                   True, SCALE, torch.bfloat16, torch.bfloat16)
            outs = [torch.empty(len(lengths) * s_q, heads, D_C, dtype=torch.bfloat16, device="cuda")
                    for _ in range(copies)]

            def call(i):
                k = i % copies
                pool, q = c["pools"][k], c["q"][k]
                w.run(q[..., :D_C], q[..., D_C:], pool[..., :D_C], pool[..., D_C:], out=outs[k])

            call(0)
            torch.cuda.synchronize()
            longest = max(range(len(lengths)), key=lambda b: lengths[b])
            for b in sorted({0, longest, len(lengths) - 1}):
                ref = reference_rows(torch, c, b, heads, s_q, lengths, page)
                err = bt.rel_err(torch, outs[0][b * s_q:(b + 1) * s_q], ref)
                if not err < 2e-2:
                    raise bt.WrongResult(f"sequence {b}: max rel error {err:.2e}")
            ms = timer.median_ms(call)
        except Exception as e:  # noqa: BLE001 - a backend this GPU or build lacks: noted
            log.append(f"{name}: FlashInfer {backend}: {bt.first_line(e)}")
            print(f"  {backend:4} {name}: {bt.first_line(e)}", flush=True)
            if isinstance(e, bt.WrongResult):
                log.append("FAILED")
            continue
        us = ms * 1e3
        row = dict(case=name, backend=backend, us=us, tbps=nbytes / us / 1e6,
                   pct=100 * nbytes / us / 1e6 / ceil["read_tbps"], tflops=flops / us / 1e6,
                   bytes=nbytes, flops=flops)
        print("  %-4s %-44s %9.1f us %6.2f TB/s %5.1f%% of read %7.1f TFLOP/s"
              % (backend, name, us, row["tbps"], row["pct"], row["tflops"]), flush=True)
        rows.append(row)
    return rows


TITLE = "FlashInfer MLA decode (chapter 11's baseline)"


def write_md(path, rows, ceil, device, log, title=TITLE):
    with open(path, "w") as f:
        f.write(f"# {title} on {device}\n\n")
        f.write(f"Read ceiling in this run: {ceil['read_tbps']:.2f} TB/s ({ceil['read_how']}).\n\n")
        f.write("| case | backend | us | TB/s | % of read ceiling | TFLOP/s |\n|---|---|---:|---:|---:|---:|\n")
        for r in rows:
            f.write("| %s | %s | %.1f | %.2f | %.1f | %.1f |\n"
                    % (r["case"], r["backend"], r["us"], r["tbps"], r["pct"], r["tflops"]))
        if log:
            f.write("\nNotes:\n\n" + "".join(f"- {line}\n" for line in log))


CSV_FIELDS = ["case", "backend", "us", "tbps", "pct_read", "tflops", "bytes", "flops",
              "read_ceiling_tbps", "device"]


def write_csv(path, rows, ceil, device):
    """One row per (case, backend) that ran and passed its check."""
    import csv
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_FIELDS)
        for r in rows:
            w.writerow([r["case"], r["backend"], "%.3f" % r["us"], "%.4f" % r["tbps"],
                        "%.2f" % r["pct"], "%.2f" % r["tflops"], r["bytes"], r["flops"],
                        "%.4f" % ceil["read_tbps"], device])


def list_cases(cases, l2_bytes=50 * 2**20):
    """The cases with their bytes, FLOPs and what a run allocates: the copies rotated (for an
    L2 of l2_bytes, the H100's 50 MB by default) and those copies' pools and queries."""
    print("%-44s %5s %4s %5s %8s %9s %8s %7s %9s"
          % ("case", "h_q", "s_q", "B", "max L", "MB", "GFLOP", "copies", "pools GB"))
    for name, heads, s_q, lengths, page in cases:
        nbytes, flops = counts(heads, s_q, lengths)
        copies = max(1, -(-10 * l2_bytes // nbytes))
        pool = sum(-(-L // page) for L in lengths) * page * BYTES_PER_TOKEN
        gb = copies * (pool + len(lengths) * s_q * heads * D_QK * 2) / 1e9
        print("%-44s %5d %4d %5d %8d %9.1f %8.1f %7d %9.2f"
              % (name, heads, s_q, len(lengths), max(lengths), nbytes / 1e6, flops / 1e9, copies, gb))
    print(f"{len(cases)} cases")


def case_args(ap, argv):
    """--md, --csv, --cases and --only, parsed with ap's own arguments; then the cases chosen
    (None, and a message, when --only matches none)."""
    ap.add_argument("--md", default="", help="the table as Markdown")
    ap.add_argument("--csv", default="", help="the table as CSV (one row per case and backend)")
    ap.add_argument("--cases", default=ch11_cases.CASES_FILE, help="the case file (bench_ch11's)")
    ap.add_argument("--only", default="", help="run only the cases whose name holds this text")
    args = ap.parse_args(argv)
    cases = [c for c in ch11_cases.read(args.cases)[0] if args.only in c[0]]
    if not cases:
        print(f"no case of {args.cases} holds '{args.only}'")
    return args, cases or None


def run_cases(torch, cases, run_one, md, csv_path, title=TITLE):
    """The loop both MLA baselines share (this file and bench_flashmla.py): this run's read
    ceiling, then each case's rows from run_one(timer, ceil, case, log), the Markdown and CSV
    files rewritten after every case. Returns the exit status (1 if a check FAILED; 0 with no
    CUDA device, which it says)."""
    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 0
    device = torch.cuda.get_device_name(0)
    timer = bt.Timer(torch)
    ceil = bt.measure_ceilings(torch, timer, 4 * 2**30)
    print(f"{device}: read ceiling {ceil['read_tbps']:.2f} TB/s, {len(cases)} cases", flush=True)
    rows, log = [], []
    for case in cases:
        rows += run_one(timer, ceil, case, log)
        torch.cuda.empty_cache()
        if md:
            write_md(md, rows, ceil, device, log, title)
        if csv_path:
            write_csv(csv_path, rows, ceil, device)
    return 1 if "FAILED" in log else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="fa3,fa2", help="FlashInfer MLA backends to try")
    ap.add_argument("--list", action="store_true", help="print the cases and exit (no GPU)")
    args, cases = case_args(ap, argv)
    if cases is None:
        return 1
    if args.list:
        list_cases(cases)
        return 0
    try:
        import torch
        import flashinfer as fi
        import flashinfer.mla  # noqa: F401
    except Exception as e:  # noqa: BLE001
        print(f"skipped: {bt.first_line(e)} (tools/fetch_flashinfer.sh prepares flashinfer)")
        return 0
    backends = args.backends.split(",")
    return run_cases(torch, cases, lambda timer, ceil, case, log:
                     run_case(torch, fi, timer, ceil, case, backends, log), args.md, args.csv)


if __name__ == "__main__":
    sys.exit(main())
