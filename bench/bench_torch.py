#!/usr/bin/env python3
"""PyTorch baselines for the decode-attention benchmarks (bench_ch04 and friends).

    python3 bench/bench_torch.py --csv OUT.csv --md OUT.md [--shapes all|quick]
    python3 bench/bench_torch.py --self-test        # tiny shape, any device (CPU included)

What is measured, per standard shape (fp16, D = 128; Hq/Hkv/B/L as in bench_common.cu):

  1. torch SDPA over a dense cache: q [B, Hq, 1, D], K and V [B, Hkv, L, D], one call of
     torch.nn.functional.scaled_dot_product_attention(..., enable_gqa=True). Each backend
     (flash, efficient, cudnn, math) is tried on its own with sdpa_kernel, and so is
     PyTorch's own pick; the row is the fastest, named by its backend. A backend that
     refuses enable_gqa gets K and V repeated to Hq heads outside the timed region.
  2. torch FlexAttention paged: the same K and V scattered into a pool of 128-token pages
     (FlexAttention's block size) through a randomly permuted page table, and
     torch.compile(flex_attention) called with the block mask translated from logical to
     physical pages (torch.nn.attention.experimental._paged_attention.PagedAttention when
     the installed torch has it, the same translation written out here when it does not).

Bytes counted: the bytes a decode step must move at the least, copied from
bench_ch04.cpp so that the rows sit beside the C++ ones: every K and V element of the
context once (B * L * Hkv * D of each, 2 bytes apiece; the unique KV heads, not Hq),
plus q and out. The 4x GQA repetition some backends do, and the padding of a short
context up to a whole 128-token page, are the kernel's cost, not bytes the step needs,
so they are not counted.

Ceilings: measured in the same run by this script, with torch ops (the best of a few
large reductions over 2 GiB for read, Tensor.copy_ for copy), so "% of ceiling" is
relative to what torch itself can stream in this run, not to the C++ read kernel's
ceiling (compare the two ceilings before comparing percentages across files).

Correctness, before any timing: each SDPA backend against a float32 reference on the
first two sequences, FlexAttention paged against SDPA on all of them; the error is
max |out - ref| / max |ref| and must stay under 2e-2 (fp16 rounding gives ~1e-3; one
page read from the wrong place gives ~0.1 or more).

Output: the table on stdout; --csv with bench_common.cu's columns (the csv module quotes
"torch SDPA (dense, flash)" because of its comma; csv.DictReader, as bench/plot.py uses,
reads it back); --md as bench_common.cu's Markdown table.

Timing: CUDA events around each call, median of 30 runs after 5 warm-up runs (compile
time excluded), inputs rotated among copies so that the working set is at least 10x the
L2 cache, data from randn (never zeros). Before each start event a GPU-side spin
(torch.cuda._sleep, ~2 ms) is queued, so the GPU is still busy while Python dispatches
the call: the events then time the GPU work, not Python's dispatch (which, at tens of
microseconds, would swamp the short-context shape). The times without the spin are
printed too ("unpadded"), for the end-to-end view.

With no torch, or no CUDA device, it prints "skipped: ..." and writes a CSV with only
the header and a Markdown file that says why, and exits 0: the C++ pipeline goes on.
A result that disagrees with its reference fails its row loudly (exit status 1 at the
end, after the other rows are written).
"""

import argparse
import csv
import math
import sys
import warnings

D = 128  # head size of every standard shape
PAGE = 128  # FlexAttention's block size, and the page size of its paged cache
STANDARD_SHAPES = [
    (32, 8, 32, 4096),
    (32, 8, 8, 32768),
    (32, 8, 128, 1024),
    (32, 32, 32, 4096),
    (32, 8, 64, 32),
]
QUICK_SHAPES = [(32, 8, 32, 4096), (32, 8, 64, 32)]
CSV_HEADER = "kernel,shape,us,bytes,tbps,pct,ceiling,read_ceiling_tbps,copy_ceiling_tbps,device"
MD_HEADER = (
    "| kernel | shape (Hq/Hkv/B/L) | time (us) | MB moved | TB/s | % of ceiling |\n"
    "|---|---|---:|---:|---:|---:|\n"
)
CEILING_BYTES = 2 << 30  # as measure_ceilings() in bench_common.cu
MAX_ALLOC_BYTES = 40e9  # what one shape may hold on the device at once
DEVICE = "cuda"  # the tests point this at "cpu" for a dry run of the whole benchmark
SDPA_KERNEL = "torch SDPA (dense, {})"
FLEX_KERNEL = "torch FlexAttention paged (page 128)"


def shape_name(shape):
    return "/".join(str(x) for x in shape)


def bytes_moved(hq, hkv, b, l, d=D):
    """bench_ch04.cpp: bytes = 2.0 * (2.0 * pool + 2.0 * qn), fp16 (2 bytes per element)."""
    pool = b * l * hkv * d  # num_blocks * hkv * D * bs with num_blocks = B * L / bs: K (and V) once
    qn = b * hq * d  # q, and out of the same size
    return 2.0 * (2.0 * pool + 2.0 * qn)


def g6(x):
    """A number as C++ iostreams print a double by default (6 significant digits)."""
    return "%.6g" % x


# ----------------------------------------------------------------------------- output


def write_outputs(rows, notes, ceil, device, csv_path, md_path):
    """Prints the table and writes CSV (bench_common.cu's columns) and Markdown.

    rows: dicts with kernel, shape, us, bytes, tbps, pct, ceiling. notes: lines for the
    Markdown file and stdout (skipped or failed rows, the ceiling method)."""
    print("\n%-40s %-18s %10s %10s %8s %14s" % ("kernel", "Hq/Hkv/B/L", "us", "MB", "TB/s", "% of ceiling"))
    for r in rows:
        print(
            "%-40s %-18s %10.1f %10.1f %8.2f %7.1f%% %s"
            % (r["kernel"], r["shape"], r["us"], r["bytes"] / 1e6, r["tbps"], r["pct"], r["ceiling"])
        )
    if ceil:
        print(
            "torch read ceiling %.2f TB/s (%s), copy ceiling %.2f TB/s (%s)"
            % (ceil["read_tbps"], ceil["read_how"], ceil["copy_tbps"], device)
        )
    for n in notes:
        print(n)
    if csv_path:
        # The csv module quotes the one field with a comma in it, "torch SDPA (dense, flash)";
        # csv.DictReader (bench/plot.py) reads it back as one field.
        with open(csv_path, "w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(CSV_HEADER.split(","))
            for r in rows:
                w.writerow(
                    [
                        r["kernel"],
                        r["shape"],
                        g6(r["us"]),
                        g6(r["bytes"]),
                        g6(r["tbps"]),
                        g6(r["pct"]),
                        r["ceiling"],
                        g6(ceil["read_tbps"]),
                        g6(ceil["copy_tbps"]),
                        device,
                    ]
                )
    if md_path:
        md = ""
        if ceil:
            md += (
                "Measured on %s. Ceilings in the same run, measured with torch ops: read %.2f TB/s "
                "(%s over 2 GiB), device-to-device copy %.2f TB/s (Tensor.copy_, read + write).\n\n"
                % (device, ceil["read_tbps"], ceil["read_how"], ceil["copy_tbps"])
            )
        md += MD_HEADER
        for r in rows:
            md += "| %s | %s | %.1f | %.1f | %.2f | %.1f%% of %s |\n" % (
                r["kernel"],
                r["shape"],
                r["us"],
                r["bytes"] / 1e6,
                r["tbps"],
                r["pct"],
                r["ceiling"],
            )
        if notes:
            md += "\n" + "".join("- %s\n" % n for n in notes)  # skipped or failed rows, visibly
        with open(md_path, "w") as f:
            f.write(md)


def write_skipped(reason, csv_path, md_path):
    """No torch or no GPU: say so, and leave files the rest of the pipeline can read."""
    print("skipped: " + reason)
    if csv_path:
        with open(csv_path, "w") as f:
            f.write(CSV_HEADER + "\n")
    if md_path:
        with open(md_path, "w") as f:
            f.write("<!-- skipped: %s -->\n\n%s" % (reason, MD_HEADER))


# ----------------------------------------------------------------------------- timing


class Timer:
    """Median of CUDA-event timings, with a GPU-side spin queued before each start event."""

    def __init__(self, torch, pad_ms=2.0):
        self.torch = torch
        self.cycles = 0
        if hasattr(torch.cuda, "_sleep"):
            # Calibrate: how many spin cycles make pad_ms on this GPU.
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(1000)
            a.record()
            torch.cuda._sleep(1_000_000)
            b.record()
            b.synchronize()
            self.cycles = int(1_000_000 * pad_ms / max(a.elapsed_time(b), 1e-3))

    def median_ms(self, fn, warmup=5, reps=30, pad=True):
        torch = self.torch
        for i in range(warmup):
            fn(i)
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        ms = []
        for i in range(reps):
            if pad and self.cycles:
                torch.cuda._sleep(self.cycles)
            a.record()
            fn(warmup + i)
            b.record()
            b.synchronize()
            ms.append(a.elapsed_time(b))
        ms.sort()
        return ms[reps // 2]

    def both(self, fn):
        """(padded, unpadded) medians: GPU time, and GPU time plus dispatch gaps."""
        return self.median_ms(fn), self.median_ms(fn, warmup=0, pad=False)


def rotation_count(torch, nbytes):
    """Copies of an input of nbytes to rotate through: working set >= 10x L2 (bench_common.cu)."""
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) if DEVICE == "cuda" else 0
    l2 = l2 or 50 * 2**20  # H100's
    return max(1, math.ceil(10 * l2 / nbytes))


def sync(torch):
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def measure_ceilings(torch, timer, nbytes):
    """Read ceiling: the best of a few reductions over nbytes (each reads every byte once and
    writes one scalar). Copy ceiling: Tensor.copy_ of nbytes, counted as read + write."""
    x = torch.randn(nbytes // 4, device=DEVICE, dtype=torch.float32)
    reads = {
        "torch.sum fp32": lambda i: x.sum(),
        "torch.amax fp32": lambda i: x.amax(),
        "torch.sum int32": lambda i: x.view(torch.int32).sum(),
    }
    tbps = {}
    for name, fn in reads.items():
        tbps[name] = nbytes / (timer.median_ms(fn) * 1e-3) / 1e12
        print("  read ceiling candidate %-16s %.2f TB/s" % (name, tbps[name]))
    best = max(tbps, key=tbps.get)
    y = torch.empty_like(x)
    copy_tbps = 2.0 * nbytes / (timer.median_ms(lambda i: y.copy_(x)) * 1e-3) / 1e12
    x = y = None  # free the 4 GiB before the shapes
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
    return {"read_tbps": tbps[best], "read_how": best, "copy_tbps": copy_tbps}


# ----------------------------------------------------------------------------- references


def reference_attention(torch, q, k, v, scale):
    """float32 attention of one decode step, GQA by repeating KV heads; q [B,Hq,1,D]."""
    group = q.shape[1] // k.shape[1]
    k = k.float().repeat_interleave(group, dim=1)
    v = v.float().repeat_interleave(group, dim=1)
    s = torch.matmul(q.float(), k.transpose(-1, -2)) * scale
    return torch.matmul(torch.softmax(s, dim=-1), v)


def numpy_attention(q, k, v, scale):
    """The same in float64 NumPy (self-test only)."""
    import numpy as np

    group = q.shape[1] // k.shape[1]
    k = np.repeat(k.astype(np.float64), group, axis=1)
    v = np.repeat(v.astype(np.float64), group, axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k) * scale
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    return np.einsum("bhqk,bhkd->bhqd", s / s.sum(axis=-1, keepdims=True), v)


class WrongResult(RuntimeError):
    """A baseline's output disagrees with its reference: its row fails loudly."""


def first_line(e):
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


def rel_err(torch, out, ref):
    """max |out - ref| / max |ref|: a scale-free error (outputs shrink as the context grows,
    like 1/sqrt(L), so a fixed absolute tolerance would be loose at L = 32768). One wrong
    128-token page out of 32 moves it by ~0.1 or more; fp16 rounding by ~1e-3."""
    out, ref = out.float(), ref.float()
    return ((out - ref).abs().max() / ref.abs().max()).item()


# ----------------------------------------------------------------------------- baseline 1: SDPA


def sdpa_backends(torch):
    from torch.nn.attention import SDPBackend

    names = [
        ("flash", "FLASH_ATTENTION"),
        ("efficient", "EFFICIENT_ATTENTION"),
        ("cudnn", "CUDNN_ATTENTION"),
        ("math", "MATH"),
    ]
    return [(n, getattr(SDPBackend, attr)) for n, attr in names if hasattr(SDPBackend, attr)]


def backend_name(torch, code):
    """Name of an SDPBackend value, as sdpa_backends() spells it."""
    for n, b in sdpa_backends(torch):
        if int(b) == int(code):
            return n
    return "backend %d" % int(code)


def sdpa_default_pick(torch, q, k, v):
    """The backend PyTorch's dispatcher picks for these inputs (private API; None if absent)."""
    try:
        return backend_name(torch, torch._fused_sdp_choice(q, k, v, enable_gqa=True))
    except Exception:  # noqa: BLE001 - older torch: no such function or no enable_gqa there
        return None


def sdpa_call(torch, backend):
    """fn(q, k, v, scale, gqa) running SDPA with one backend (None: PyTorch's pick)."""
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    def call(q, k, v, scale, gqa):
        kw = {"enable_gqa": True} if gqa else {}
        with warnings.catch_warnings():  # a backend that refuses says why, at length: we record it
            warnings.simplefilter("ignore", UserWarning)
            if backend is None:
                return F.scaled_dot_product_attention(q, k, v, scale=scale, **kw)
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, scale=scale, **kw)

    return call


def bench_sdpa(torch, timer, q, kv, scale, ref, tol, log):
    """SDPA over the dense copies kv = [(k, v), ...]: PyTorch's pick, then every backend.

    ref: float32 output of the first ref.shape[0] sequences of copy 0. Returns
    (backend name, ms, output of copy 0) of the fastest backend that agrees with ref, and
    the list of backends that disagreed (printed as FAILED by the caller). Raises
    WrongResult when all that ran disagreed, RuntimeError when none ran."""
    group = q.shape[1] // kv[0][0].shape[1]
    picked = sdpa_default_pick(torch, q, kv[0][0], kv[0][1])
    log("  SDPA: PyTorch picks %s" % (picked or "(unknown: torch._fused_sdp_choice unavailable)"))
    results, refused, wrong = [], [], []
    for name, backend in [(None, None)] + sdpa_backends(torch):
        call = sdpa_call(torch, backend)
        label = name or (picked or "default")
        inputs, gqa = kv, True
        try:
            out = call(q, kv[0][0], kv[0][1], scale, True)
        except Exception as e:  # noqa: BLE001 - a backend that refuses enable_gqa, or these shapes
            out = None
            why = first_line(e)
        if out is None and group > 1:
            try:  # K and V repeated to Hq heads outside the timed region; bytes counted stay the same
                inputs = [
                    (k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)) for k, v in kv
                ]
                gqa, label = False, label + ", KV repeated"
                out = call(q, inputs[0][0], inputs[0][1], scale, False)
            except Exception as e:  # noqa: BLE001
                why = first_line(e)
        if out is None:
            refused.append("%s: %s" % (name or "default", why))
            inputs = None
            continue
        err = rel_err(torch, out[: ref.shape[0]], ref)
        if not err < tol:
            wrong.append(
                "SDPA %s disagrees with the float32 reference: error %.3g of max |ref|" % (label, err)
            )
            inputs = None
            continue
        n = len(inputs)
        ms, ms_plain = timer.both(lambda i: call(q, inputs[i % n][0], inputs[i % n][1], scale, gqa))
        log(
            "  SDPA %-28s %9.1f us (unpadded %9.1f us), error vs fp32 %.1e"
            % (label if name else "PyTorch's pick (" + label + ")", ms * 1e3, ms_plain * 1e3, err)
        )
        results.append((ms, label, out))
        inputs = None  # free repeated K and V before the next backend
    for r in refused:
        log("  SDPA backend refused: " + r)
    if not results:
        raise (WrongResult if wrong else RuntimeError)(
            "no SDPA backend ran correctly: " + "; ".join(wrong + refused)
        )
    ms, label, out = min(results, key=lambda r: r[0])
    return label, ms, out, wrong


# ----------------------------------------------------------------------------- baseline 2: Flex paged


def random_pages(torch, n_pages, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randperm(n_pages, generator=g)


def paged_tables(torch, b, pages_per_seq, device, seed, use_torch_class=True):
    """Page table [B, pages_per_seq] (logical page -> physical page, randomly permuted) and a
    function turning a logical BlockMask into a physical one.

    With use_torch_class and a torch that has it, PyTorch's PagedAttention does the
    bookkeeping (its free list is replaced by a random permutation before the pages are
    reserved); otherwise the same mapping is written out here."""
    n_pages = b * pages_per_seq
    perm = random_pages(torch, n_pages, seed)
    PagedAttention = None
    if use_torch_class:
        try:
            from torch.nn.attention.experimental._paged_attention import PagedAttention
        except ImportError:
            PagedAttention = None
    if PagedAttention is not None:
        pa = PagedAttention(n_pages, PAGE, b, device=device)
        pa.empty_pages = perm.tolist()  # reserve() takes pages from the end of this list
        for i in range(b):
            pa.reserve(torch.tensor(i, device=device), torch.tensor(pages_per_seq * PAGE, device=device))
        table = pa.page_table[:, :pages_per_seq].clone()

        def convert(block_mask, kv_len):
            return pa.convert_logical_block_mask(block_mask, kv_len=kv_len)

        return table, convert, "torch PagedAttention"

    from torch.nn.attention.flex_attention import BlockMask

    table = perm.view(b, pages_per_seq).to(device=device, dtype=torch.int64)
    phys_to_logical = torch.full((b, n_pages), -1, dtype=torch.int64, device=device)
    phys_to_logical.scatter_(1, table, torch.arange(pages_per_seq, device=device).expand(b, -1).contiguous())

    def convert(block_mask, kv_len):
        def to_physical(idx):  # [B, H, rows, cols] logical page numbers -> physical ones
            if idx is None:
                return None
            out = torch.zeros(idx.shape[:-1] + (n_pages,), dtype=torch.int32, device=device)
            phys = torch.gather(table, 1, idx.reshape(b, -1).long()).view(idx.shape)
            out[..., : idx.shape[-1]] = phys.to(torch.int32)
            return out

        def mask_mod(bi, h, q_idx, kv_idx):  # physical kv index -> logical one, then the length check
            logical_page = phys_to_logical[bi, kv_idx // PAGE]
            logical = logical_page * PAGE + kv_idx % PAGE
            return (logical_page >= 0) & (logical < kv_len[bi])

        return BlockMask.from_kv_blocks(
            block_mask.kv_num_blocks.clone(),
            to_physical(block_mask.kv_indices),
            None if block_mask.full_kv_num_blocks is None else block_mask.full_kv_num_blocks.clone(),
            to_physical(block_mask.full_kv_indices),
            block_mask.BLOCK_SIZE,
            mask_mod,
            seq_lengths=(block_mask.seq_lengths[0], n_pages * PAGE),
        )

    return table, convert, "page table written out here"


def to_paged(torch, k, table):
    """Scatters dense k [B, H, L, D] into a page pool [1, H, n_pages * PAGE, D] through table
    [B, pages_per_seq]. The tail of a part-filled last page holds randn, and is masked."""
    b, h, l, d = k.shape
    pps = table.shape[1]
    pool = torch.randn(h, b * pps, PAGE, d, dtype=k.dtype, device=k.device)
    if l < pps * PAGE:
        k = torch.cat([k, torch.randn(b, h, pps * PAGE - l, d, dtype=k.dtype, device=k.device)], dim=2)
    pool[:, table.reshape(-1).to(k.device)] = (
        k.reshape(b, h, pps, PAGE, d).transpose(0, 1).reshape(h, b * pps, PAGE, d)
    )
    return pool.view(1, h, b * pps * PAGE, d)


def from_paged(pool, table, l):
    """NumPy inverse of to_paged (self-test): pool [1, H, n_pages*PAGE, D] -> dense [B, H, L, D]."""
    import numpy as np

    _, h, _, d = pool.shape
    pages = pool.reshape(h, -1, PAGE, d)
    b, pps = table.shape
    dense = np.stack([np.concatenate([pages[:, table[i, j]] for j in range(pps)], axis=1) for i in range(b)])
    return dense[:, :, :l]


def flex_setup(torch, q, l, seed, compiled=True, use_torch_class=True):
    """Page table, physical block mask and the (compiled) flex call for q [B, Hq, 1, D]."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    b, device = q.shape[0], q.device
    pps = math.ceil(l / PAGE)
    kv_len = torch.full((b,), l, dtype=torch.int64, device=device)
    table, convert, how = paged_tables(torch, b, pps, device, seed, use_torch_class)

    def logical_mask(bi, h, q_idx, kv_idx):  # decode: the one query sees its whole context
        return kv_idx < kv_len[bi]

    logical = create_block_mask(logical_mask, b, None, q.shape[2], pps * PAGE, device=device, BLOCK_SIZE=PAGE)
    block_mask = convert(logical, kv_len)
    fn = torch.compile(flex_attention, dynamic=False) if compiled else flex_attention

    def call(q, k_pool, v_pool, scale):
        return fn(
            q, k_pool, v_pool, block_mask=block_mask, scale=scale, enable_gqa=q.shape[1] != k_pool.shape[1]
        )

    return table, call, how


def bench_flex(torch, timer, q, kv, scale, check, tol, log):
    """FlexAttention over page pools holding the same data as the dense copies kv.

    check: the SDPA output of copy 0 (or, if SDPA failed, the float32 reference of its
    first sequences); the output's first check.shape[0] sequences must agree with it."""
    l = kv[0][0].shape[2]
    table, call, how = flex_setup(torch, q, l, seed=3)
    pools = []
    for k, v in kv:
        pools.append((to_paged(torch, k, table), to_paged(torch, v, table)))
    out = call(q, pools[0][0], pools[0][1], scale)  # compiles (not timed)
    sync(torch)
    err = rel_err(torch, out[: check.shape[0]], check)
    if not err < tol:
        raise WrongResult("FlexAttention paged disagrees with SDPA: error %.3g of max |ref|" % err)
    n = len(pools)
    ms, ms_plain = timer.both(lambda i: call(q, pools[i % n][0], pools[i % n][1], scale))
    log(
        "  Flex paged (%s) %9.1f us (unpadded %9.1f us), error vs SDPA %.1e"
        % (how, ms * 1e3, ms_plain * 1e3, err)
    )
    pools = None
    return ms


# ----------------------------------------------------------------------------- the benchmark


def run_benchmark(torch, shapes, csv_path, md_path, timer=None):
    device = torch.cuda.get_device_name(0) if DEVICE == "cuda" else DEVICE
    print("torch %s, CUDA %s, %s" % (torch.__version__, torch.version.cuda, device))
    timer = timer or Timer(torch)
    ceil = measure_ceilings(torch, timer, CEILING_BYTES)
    print(
        "torch read ceiling %.2f TB/s (%s), copy %.2f TB/s"
        % (ceil["read_tbps"], ceil["read_how"], ceil["copy_tbps"])
    )
    rows, notes, failed = [], [], False
    tol = 2e-2  # relative (see rel_err); fp16 data

    def add(kernel, shape, ms, nbytes):
        tbps = nbytes / (ms * 1e-3) / 1e12
        rows.append(
            {
                "kernel": kernel,
                "shape": shape,
                "us": ms * 1e3,
                "bytes": nbytes,
                "tbps": tbps,
                "pct": 100.0 * tbps / ceil["read_tbps"],
                "ceiling": "read",
            }
        )

    for hq, hkv, b, l in shapes:
        name = shape_name((hq, hkv, b, l))
        nbytes = bytes_moved(hq, hkv, b, l)
        copies = rotation_count(torch, nbytes)
        kv_bytes = 2 * b * hkv * l * D * 2
        pool_bytes = 2 * b * hkv * math.ceil(l / PAGE) * PAGE * D * 2
        need = copies * (kv_bytes + pool_bytes + (hq // hkv - 1) * kv_bytes)  # + repeated KV, if needed
        print(
            "\n%s: %.1f MB counted, %d input copies (%.2f GB on the device at most)"
            % (name, nbytes / 1e6, copies, need / 1e9)
        )
        if need > MAX_ALLOC_BYTES:
            notes.append("skipped: %s needs %.1f GB > %.0f GB" % (name, need / 1e9, MAX_ALLOC_BYTES / 1e9))
            print(notes[-1])
            continue
        torch.manual_seed(1234)
        q = torch.randn(b, hq, 1, D, dtype=torch.float16, device=DEVICE)
        kv = [
            (
                torch.randn(b, hkv, l, D, dtype=torch.float16, device=DEVICE),
                torch.randn(b, hkv, l, D, dtype=torch.float16, device=DEVICE),
            )
            for _ in range(copies)
        ]
        scale = 1.0 / math.sqrt(D)
        nref = min(b, 2)
        ref = reference_attention(torch, q[:nref], kv[0][0][:nref], kv[0][1][:nref], scale)
        sdpa_out = None
        try:
            label, ms, sdpa_out, wrong = bench_sdpa(torch, timer, q, kv, scale, ref, tol, print)
            add(SDPA_KERNEL.format(label), name, ms, nbytes)
            for w in wrong:  # a backend that ran but gave a wrong answer: loud, though the row stands
                failed = True
                notes.append("FAILED: %s: %s" % (name, w))
                print(notes[-1], file=sys.stderr)
        except Exception as e:  # noqa: BLE001
            failed |= isinstance(e, WrongResult)
            notes.append(
                "%s: torch SDPA %s: %s"
                % ("FAILED" if isinstance(e, WrongResult) else "skipped", name, first_line(e))
            )
            print(notes[-1], file=sys.stderr)
        check = ref if sdpa_out is None else sdpa_out  # Flex against SDPA, or the reference subset
        try:
            ms = bench_flex(torch, timer, q, kv, scale, check, tol, print)
            add(FLEX_KERNEL, name, ms, nbytes)
        except Exception as e:  # noqa: BLE001 - FlexAttention missing, failing to compile, out of memory...
            failed |= isinstance(e, WrongResult)
            notes.append(
                "%s: %s %s: %s"
                % ("FAILED" if isinstance(e, WrongResult) else "skipped", FLEX_KERNEL, name, first_line(e))
            )
            print(notes[-1], file=sys.stderr)
        del q, kv, ref, sdpa_out, check
        torch._dynamo.reset()
        if DEVICE == "cuda":
            torch.cuda.empty_cache()

    write_outputs(rows, notes, ceil, device, csv_path, md_path)
    return 1 if failed else 0


# ----------------------------------------------------------------------------- self-test


def self_test():
    """Tiny shapes on whatever device there is: the byte formula against bench_ch04's CSV,
    the page table and scatter against a NumPy gather, SDPA against a NumPy reference, and
    FlexAttention paged (eager and compiled, PyTorch's PagedAttention and the written-out
    translation) against the same reference. Returns the exit status."""
    try:
        import numpy as np
        import torch
    except Exception as e:  # noqa: BLE001
        print("skipped: self-test needs torch and numpy (%s)" % first_line(e))
        return 0
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype, tol = (torch.float16, 2e-2) if device == "cuda" else (torch.float32, 1e-4)  # rel_err
    print("self-test: torch %s, numpy %s, device %s, %s" % (torch.__version__, np.__version__, device, dtype))
    passed, failed, skipped = [0], [0], [0]

    def check(what, ok, detail=""):
        print("  %-4s %s %s" % ("ok" if ok else "FAIL", what, detail))
        (passed if ok else failed)[0] += 1

    # The byte count must be the C++ one: these are bench/results/ch04-paged-attention.csv's.
    cpp = {
        "32/8/32/4096": "5.37395e+08",
        "32/8/8/32768": "1.07387e+09",
        "32/8/128/1024": "5.38968e+08",
        "32/32/32/4096": "2.14801e+09",
        "32/8/64/32": "9.43718e+06",
    }
    for sh in STANDARD_SHAPES:
        check("bytes %s" % shape_name(sh), g6(bytes_moved(*sh)) == cpp[shape_name(sh)], g6(bytes_moved(*sh)))

    hq, hkv, b, d = 4, 2, 3, 64
    scale = 1.0 / math.sqrt(d)
    for l in (32, 200, 256):  # inside one page, a part-filled last page, whole pages
        torch.manual_seed(l)
        q = torch.randn(b, hq, 1, d, dtype=dtype, device=device)
        k = torch.randn(b, hkv, l, d, dtype=dtype, device=device)
        v = torch.randn(b, hkv, l, d, dtype=dtype, device=device)
        npy = [t.float().cpu().numpy() for t in (q, k, v)]
        ref = torch.from_numpy(numpy_attention(*npy, scale)).float()
        tag = "L=%d" % l

        for use_class in (True, False):
            table, _, how = paged_tables(
                torch, b, math.ceil(l / PAGE), device, seed=l, use_torch_class=use_class
            )
            t = table.cpu().numpy()
            n_pages = b * math.ceil(l / PAGE)
            check(
                "%s page table is a permutation (%s)" % (tag, how),
                sorted(t.reshape(-1).tolist()) == list(range(n_pages)),
            )
            pool = to_paged(torch, k, table)
            back = from_paged(pool.float().cpu().numpy(), t, l)
            check("%s paged scatter == NumPy gather (%s)" % (tag, how), np.array_equal(back, npy[1]))

        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=True)
        err = rel_err(torch, out.cpu(), ref)
        check("%s SDPA enable_gqa vs NumPy" % tag, err < tol, "error %.1e" % err)
        rep = hq // hkv
        out = torch.nn.functional.scaled_dot_product_attention(
            q, k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1), scale=scale
        )
        err = rel_err(torch, out.cpu(), ref)
        check("%s SDPA KV repeated vs NumPy" % tag, err < tol, "error %.1e" % err)
        err = rel_err(torch, reference_attention(torch, q, k, v, scale).cpu(), ref)
        check("%s float32 torch reference vs NumPy" % tag, err < 1e-4, "error %.1e" % err)

        for compiled in (False, True):
            for use_class in (True, False):
                what = "%s Flex paged %s, %s" % (
                    tag,
                    "compiled" if compiled else "eager",
                    "torch class" if use_class else "own table",
                )
                try:
                    table, call, how = flex_setup(
                        torch, q, l, seed=l + 1, compiled=compiled, use_torch_class=use_class
                    )
                    with warnings.catch_warnings():  # eager flex warns that it is unfused: we know
                        warnings.simplefilter("ignore", UserWarning)
                        out = call(q, to_paged(torch, k, table), to_paged(torch, v, table), scale)
                except Exception as e:  # noqa: BLE001
                    print("  skip %s: %s" % (what, first_line(e)))
                    skipped[0] += 1
                    continue
                err = rel_err(torch, out.cpu(), ref)
                check(what + " vs NumPy", err < tol, "error %.1e (%s)" % (err, how))
                if not compiled and use_class:  # the check must catch a cache filled through a wrong table
                    bad = table.clone()
                    bad[[0, 1], 0] = table[[1, 0], 0]  # two sequences' first pages swapped
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", UserWarning)
                        out = call(q, to_paged(torch, k, bad), to_paged(torch, v, bad), scale)
                    err = rel_err(torch, out.cpu(), ref)
                    check("%s a wrong page table is caught" % tag, err > tol, "error %.1e" % err)
        torch._dynamo.reset()

    print(
        "%d passed, %d failed" % (passed[0], failed[0]) + (", %d skipped" % skipped[0] if skipped[0] else "")
    )
    return 1 if failed[0] else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", default="", help="write the rows as CSV (bench_common.cu's columns)")
    ap.add_argument("--md", default="", help="write the rows as a Markdown table")
    ap.add_argument(
        "--shapes",
        choices=["all", "quick"],
        default="all",
        help="all: the five standard shapes; quick: 32/8/32/4096 and 32/8/64/32",
    )
    ap.add_argument("--self-test", action="store_true", help="check the logic on tiny shapes, on any device")
    args = ap.parse_args(argv)
    if args.self_test:
        return self_test()
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - ImportError, or a broken install
        write_skipped("torch is not importable (%s)" % first_line(e), args.csv, args.md)
        return 0
    if not torch.cuda.is_available():
        write_skipped("CUDA is not available to torch %s" % torch.__version__, args.csv, args.md)
        return 0
    return run_benchmark(torch, STANDARD_SHAPES if args.shapes == "all" else QUICK_SHAPES, args.csv, args.md)


if __name__ == "__main__":
    sys.exit(main())
