#!/usr/bin/env python3
"""FlashMLA's dense decode on chapter 11's cases: the anchor the MLA issue names.

    python3 bench/bench_flashmla.py --md OUT.md [--csv OUT.csv] [--cases bench/ch11_cases.txt]
        [--only TEXT]

FlashMLA is sgl-flash-mla 1.0.0 from PyPI (tools/fetch_flashinfer.sh puts its wheel in
.whl/ beside FlashInfer's): a build of DeepSeek's FlashMLA whose extensions use PyTorch's
stable ABI, so the wheel (made for torch 2.14) loads on the GPU machine's torch 2.11 with
CUDA 13 (checked: every torch symbol it needs is there). Its SM90 kernels are the "legacy"
half (upstream dropped them in its 2026.09.30 release): flash_mla_with_kvcache(...,
use_legacy=True) with no indices is the dense bf16 decode, wgmma and TMA, pages of 64
tokens. Its fp8 dense path takes fp8 queries and per-tensor scales, not chapter 11's
656-byte rows with tile scales, so it is not run here.

Same cases, pools, queries, reference check, timer and byte and FLOP counts as
bench_flashinfer_mla.py (imported from it): the pool [num_pages, 64, 576] bf16 is passed
as FlashMLA's k_cache [num_pages, 64, 1, 576] (one KV head), the queries as [B, s_q, Hq,
576], the page table as a [B, max pages] block table, causal (bottom-right: token i of
s_q sees the context's first L - s_q + i + 1 tokens). The scheduler's metadata is computed
by the first call, as in a server's step, and reused by the timed ones; FlashMLA allocates
its output each call (torch's caching allocator: no cudaMalloc after the first). A case
FlashMLA refuses (page 16, say) is noted, not timed. CSV rows have backend "flashmla";
compare_ch11.py --flashmla sets them beside ours and FlashInfer's.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_flashinfer_mla as fim  # noqa: E402  (cases, pools, reference, writers)
import bench_torch as bt  # noqa: E402  (timer, ceilings, rotation, errors)


def block_table(torch, c, lengths):
    """[B, max pages] int32: sequence b's pages in order, from the case's permuted page list."""
    width = max(c["pages"])
    table = torch.zeros(len(lengths), width, dtype=torch.int32, device="cuda")
    for b, n in enumerate(c["pages"]):
        start = int(c["kv_indptr"][b])
        table[b, :n] = c["perm"][start:start + n]
    return table


def run_case(torch, fm, timer, ceil, case, log):
    name, heads, s_q, lengths, page = case
    nbytes, flops = fim.counts(heads, s_q, lengths)
    copies = bt.rotation_count(torch, nbytes)
    c = fim.make_case(torch, heads, s_q, lengths, page, copies, seed=11)
    B = len(lengths)
    try:
        table = block_table(torch, c, lengths)
        meta, _ = fm.get_mla_metadata()
        outs = [None] * copies

        def call(i):
            k = i % copies
            q = c["q"][k].view(B, s_q, heads, fim.D_QK)
            kcache = c["pools"][k].view(-1, page, 1, fim.D_QK)
            outs[k], _ = fm.flash_mla_with_kvcache(q, kcache, table, c["kv_len"], fim.D_C, meta,
                                                   softmax_scale=fim.SCALE, causal=True,
                                                   use_legacy=True)

        call(0)
        torch.cuda.synchronize()
        out0 = outs[0].reshape(B * s_q, heads, fim.D_C)
        longest = max(range(B), key=lambda b: lengths[b])
        for b in sorted({0, longest, B - 1}):
            ref = fim.reference_rows(torch, c, b, heads, s_q, lengths, page)
            err = bt.rel_err(torch, out0[b * s_q:(b + 1) * s_q], ref)
            if not err < 2e-2:
                raise bt.WrongResult(f"sequence {b}: max rel error {err:.2e}")
        ms = timer.median_ms(call)
    except Exception as e:  # noqa: BLE001 - a case FlashMLA refuses: noted
        log.append(f"{name}: FlashMLA: {bt.first_line(e)}")
        print(f"  flashmla {name}: {bt.first_line(e)}", flush=True)
        if isinstance(e, bt.WrongResult):
            log.append("FAILED")
        return []
    us = ms * 1e3
    row = dict(case=name, backend="flashmla", us=us, tbps=nbytes / us / 1e6,
               pct=100 * nbytes / us / 1e6 / ceil["read_tbps"], tflops=flops / us / 1e6,
               bytes=nbytes, flops=flops)
    print("  flashmla %-44s %9.1f us %6.2f TB/s %5.1f%% of read %7.1f TFLOP/s"
          % (name, us, row["tbps"], row["pct"], row["tflops"]), flush=True)
    return [row]


def main(argv=None):
    args, cases = fim.case_args(argparse.ArgumentParser(description=__doc__.splitlines()[0]), argv)
    if cases is None:
        return 1
    try:
        import torch
        import flash_mla as fm
        if not fm.has_legacy():
            raise ImportError("this flash_mla has no SM90 (legacy) kernels")
    except Exception as e:  # noqa: BLE001
        print(f"skipped: {bt.first_line(e)} (tools/fetch_flashinfer.sh fetches sgl-flash-mla)")
        return 0
    return fim.run_cases(torch, cases, lambda timer, ceil, case, log: run_case(torch, fm, timer, ceil, case, log),
                         args.md, args.csv, "FlashMLA dense decode (sgl-flash-mla 1.0.0, SM90 legacy kernels)")


if __name__ == "__main__":
    sys.exit(main())
