#!/usr/bin/env python3
"""FlashInfer baselines for chapter 10's varlen paged attention (bench_ch10.cu), on its cases,
and for chapter 12's window kernel (bench_ch12.cu) with --part window.

    python3 bench/bench_flashinfer.py --csv OUT.csv --md OUT.md [--part all|decode|prefill|flex]
    python3 bench/bench_flashinfer.py --part window [--no-fa3] --csv OUT.csv --md OUT.md
    python3 bench/bench_flashinfer.py --self-test     # no GPU needed (CPU, or no torch at all)

FlashInfer is flashinfer-python 0.7.2.post1, installed on the GPU machine from the trimmed
wheel that tools/fetch_flashinfer.sh prepares; its kernels are JIT-compiled by the machine's
nvcc at first use (all the modules this run needs are built first, in one parallel ninja
run, before anything is timed). Its paged cache here: separate K and V tensors in the HND
layout, [num_pages, Hkv, page_size, D], page size 16, every page of the pool handed out
through a randomly permuted page table (the same bytes per token as chapter 2's layouts).

The cases are bench_ch10.cu's (keep the two lists in step; the shape names are the same):

  decode    the five standard shapes (fp16, D 128, one new token per sequence); group 8
            (64/8) and MQA (32/1) at B 32, L 4096; D 64 and D 256 at 32/8/32/4096; three
            ragged batches (one 32768 + 63 x 256; 128 lengths log-uniform in [64, 8192],
            fixed hash; 16 x 16384 + 16 x 128); the e4m3 cache on the standard shapes and
            the ragged ones.
            BatchDecodeWithPagedKVCacheWrapper with use_tensor_cores False (CUDA cores) and
            True, and the better of the two; e4m3 with kv_data_type=float8_e4m3fn on the
            tensor-core path (k_scale 0.5 and v_scale 1.0 as run() arguments: a v_scale
            other than 1 would cost FlashInfer a separate multiply of the output).
  prefill   speculative-decoding verification (B 64, L 4096, 4 and 8 new tokens each),
            prefill chunks of 512..4096 new tokens over cached contexts of 0..32768 (one
            sequence), and two mixed steps (prefill chunks and decodes in one batch).
            BatchPrefillWithPagedKVCacheWrapper, causal, with backend fa2 and fa3, and the
            better of the two; mixed steps also as FlashInfer serves them in engines, a
            prefill wrapper for the chunks and a decode wrapper (tensor cores) for the rest,
            two launches timed together. The chunks also run through PyTorch SDPA on a dense
            copy of the same tokens (the TFLOP/s reference), K and V repeated to Hq heads
            outside the timed region, with the FLASH_ATTENTION and the CUDNN_ATTENTION
            backends: on a square chunk (context 0) with is_causal=True; over a cached
            prefix with torch.nn.attention.bias.causal_lower_right (bottom-right aligned:
            new token i sees the prefix and new tokens 0..i), which PyTorch routes to its
            flash kernel; cuDNN gets is_causal=True there, and its row stands only if it
            agrees with the bottom-right reference (is_causal is top-left in PyTorch's
            definition, so expect a "FAILED"-free skip note instead).
  flex      PyTorch FlexAttention paged decode on the standard shapes, through
            bench_torch.py's bench_flex (page 128), as in torch-baselines.md.
  window    (not in "all") bench_ch12.cu's cases by its names: decode B 32, 32/8 heads, D 128,
            fp16 (full 1K context; 32K context with window 1024, sinks off and on; 32K
            full; 32K window 128, sinks off and on) and a prefill chunk of 2048 over a 32K
            context, window 1024, sinks off and on. The window as FlashInfer counts it:
            window_left = window - 1 (the keys left of the query, inclusive); -1 for full.
            Decodes: BatchDecodeWithPagedKVCacheWrapper, tensor cores; the chunk:
            BatchPrefillWithPagedKVCacheWrapper, fa2 and fa3 (--no-fa3: fa2 only). Sinks:
            FlashInfer 0.7.2's run(sinks=...) reaches the kernel only on its trtllm-gen,
            cuDNN and cute-dsl backends; its fa2/fa3 paged_run (prefill.py,
            get_batch_prefill_module) drops it. On the H100 the sinks run through its own
            AttentionSink variant (flashinfer/jit/attention/variants.py, fa2) as jit_args of
            the same wrappers; a note records what run(sinks=...) does on the plain
            wrapper (honoured, ignored). A case no kernel runs gets a row "Cases without a
            FlashInfer time" with the reason. The pool as bench_ch12.cu's: the pages the
            windows touch plus a null page 0 that every table entry left of the windows
            names (FlashInfer gets the whole table; window_left makes it skip that part).
            Bytes: bench_ch12.cu's, the blocks the windows touch (K and V, each KV head)
            plus q and out, so % of the read ceiling compares. The reference: the window
            [p - window + 1, p] and the sink as an extra softmax column, float32.
            bench/compare_ch12.py puts this CSV beside bench_ch12's.

What is reported. Decode-like cases (decode, e4m3, spec-decode, mixed): time, bytes moved
(K and V of every sequence's whole context, each KV head once, plus q and out: exactly
bench_ch10.cu's count) / time in TB/s and % of the read ceiling that this script measures
with torch ops in the same run (bench_torch.py's measure_ceilings). Prefill chunks and mixed
steps: TFLOP/s with the causal FLOPs counted exactly, 4 * D * Hq * (keys each query row
attends, summed over rows). FlashInfer's plan() time on the host (median of 20, us) for the
ragged and mixed cases, beside bench_ch10's plan times.

Correctness before timing: every output is compared on sample rows (first, middle and last
new token of the first, the last and the longest sequence) against a float32 reference
computed here from the same paged pool; max |out - ref| / max |ref| must stay under 2e-2.
A wrong row is not a baseline: it is dropped, noted as FAILED, and the exit status is 1.

Timing as bench_torch.py: CUDA events, median of 30 runs after 5 warm-ups, a GPU-side spin
queued before each start event (GPU time, not Python's dispatch), pools rotated among copies
so that the working set is at least 10x the L2 cache, random data (never zeros).

Output: the tables on stdout; --csv with bench_common.cu's columns for the decode-like rows
(bench/plot.py reads it); beside it FILE-flops.csv (kernel, shape, us, flops, tflops, bytes,
tbps, device) for the prefill and mixed rows; --md with both tables, the plan times and the
notes. Results are rewritten after every case, so a run cut short keeps what it measured.
With no torch, no CUDA device or no flashinfer it prints "skipped: ..." and exits 0.
"""

import argparse
import contextlib
import csv
import io
import math
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_torch as bt  # noqa: E402  (timer, ceilings, outputs, errors: shared with it)

PAGE = 16  # FlashInfer's page size here, and chapter 10's block size
DEVICE = "cuda"  # the tests point this (and bench_torch.DEVICE) at "cpu"
TOL = 2e-2  # relative error, as bench_torch.py
WORKSPACE_BYTES = 256 << 20  # FlashInfer's float workspace (split-KV partial results)
# e4m3 cache scales. FlashInfer folds k_scale into the softmax scale, but applies a v_scale
# other than 1.0 as a separate multiply of the output after its kernel: 1.0 spares it that
# extra launch (an engine can fold v_scale into the output projection).
K_SCALE, V_SCALE = 0.5, 1.0
FLOPS_CSV_HEADER = "kernel,shape,us,flops,tflops,bytes,tbps,device"
FLOPS_MD_HEADER = (
    "| kernel | case | time (us) | GFLOP | TFLOP/s | MB moved | TB/s |\n|---|---|---:|---:|---:|---:|---:|\n"
)

FI_DECODE_CUDA = "FlashInfer decode (CUDA cores)"
FI_DECODE_TC = "FlashInfer decode (tensor cores)"
FI_DECODE_BEST = "FlashInfer decode (best)"
FI_DECODE_FP8 = "FlashInfer decode e4m3 (tensor cores)"
FI_PREFILL = "FlashInfer prefill ({})"
FI_PREFILL_BEST = "FlashInfer prefill (best)"
FI_SPLIT = "FlashInfer prefill + decode wrappers (2 launches)"
SDPA_CAUSAL = "torch SDPA (dense, {}, causal)"


# ----------------------------------------------------------------------------- the cases


class Case:
    """One batch: per sequence its cache length (new tokens included) and new tokens."""

    def __init__(self, part, name, hq, hkv, seq_lens, q_lens, d=128, fp8=False, kind="decode"):
        assert len(seq_lens) == len(q_lens) and all(0 < n <= l for l, n in zip(seq_lens, q_lens))
        self.part, self.name, self.hq, self.hkv, self.d = part, name, hq, hkv, d
        self.seq_lens, self.q_lens, self.fp8, self.kind = list(seq_lens), list(q_lens), fp8, kind

    @property
    def b(self):
        return len(self.seq_lens)

    @property
    def num_tokens(self):
        return sum(self.q_lens)

    @property
    def qsl(self):
        """query_start_loc [B + 1]."""
        out = [0]
        for n in self.q_lens:
            out.append(out[-1] + n)
        return out

    def bytes_moved(self):
        """bench_ch10.cu's count: K and V of every sequence's context once per KV head (1 byte
        an element for e4m3, 2 for fp16), plus q and out (fp16)."""
        kv = (1 if self.fp8 else 2) * 2.0 * sum(self.seq_lens) * self.hkv * self.d
        return kv + 2.0 * 2.0 * self.num_tokens * self.hq * self.d

    def flops(self):
        """Causal attention FLOPs: new token i of sequence b (n_b new) attends seq_len_b - n_b
        + i + 1 keys; each key costs 2 * D for q.k and 2 * D for p.v, per query head."""
        keys = sum(n * (l - n) + n * (n + 1) // 2 for l, n in zip(self.seq_lens, self.q_lens))
        return 4.0 * self.d * self.hq * keys

    def with_fp8(self):
        return Case(
            self.part,
            self.name + " e4m3",
            self.hq,
            self.hkv,
            self.seq_lens,
            self.q_lens,
            self.d,
            True,
            self.kind,
        )


def hash32(i):
    """bench_ch10.cu's hash of an index (the fill kernel's mix): the same lengths in both."""
    m = 0xFFFFFFFF
    h = ((i + 1) * 0x9E3779B1) & m
    h ^= h >> 15
    h = (h * 0x2C1B3C6D) & m
    h ^= h >> 12
    h = (h * 0x297A2D39) & m
    h ^= h >> 15
    return h


def log_uniform_lengths(n, lo, hi):
    """n lengths log-uniform in [lo, hi]: lo * (hi / lo) ** u with u = hash32(i) / 2^32."""
    return [min(hi, max(lo, int(lo * (hi / lo) ** (hash32(i) / 4294967296.0)))) for i in range(n)]


def spread(n, lo, hi):
    """n lengths evenly from lo to hi (integer steps, as bench_ch10.cu)."""
    return [lo + (hi - lo) * j // max(1, n - 1) for j in range(n)]


def uniform(hq, hkv, b, l, d=128, part="decode", n=1, suffix=""):
    name = "%d/%d/%d/%d" % (hq, hkv, b, l) + suffix
    return Case(part, name, hq, hkv, [l] * b, [n] * b, d, kind="decode" if n == 1 else "spec")


def ragged_cases():
    return [
        Case("decode", "32/8 ragged 1x32768+63x256", 32, 8, [32768] + [256] * 63, [1] * 64),
        Case(
            "decode",
            "32/8 ragged 128 log-uniform 64..8192",
            32,
            8,
            log_uniform_lengths(128, 64, 8192),
            [1] * 128,
        ),
        Case("decode", "32/8 ragged 16x16384+16x128", 32, 8, [16384] * 16 + [128] * 16, [1] * 32),
    ]


def mqa_ragged_cases():
    """MQA (32 query heads on one KV head), ragged: bench_ch10.cu's mqa_ragged_cases."""
    return [
        Case("decode", "32/1 ragged 1x32768+63x256", 32, 1, [32768] + [256] * 63, [1] * 64),
        Case("decode", "32/1 ragged 128 log-uniform 64..8192", 32, 1, log_uniform_lengths(128, 64, 8192), [1] * 128),
    ]


STANDARD = [(32, 8, 32, 4096), (32, 8, 8, 32768), (32, 8, 128, 1024), (32, 32, 32, 4096), (32, 8, 64, 32)]
CHUNKS = [512, 1024, 2048, 4096]
CONTEXTS = [0, 4096, 16384, 32768]


def mixed_cases():
    dec1 = spread(62, 2048, 8192)
    dec2 = spread(127, 512, 4096)
    return [
        Case(
            "prefill",
            "32/8 mixed 2x1024 ctx 8192 + 62 decodes 2048..8192",
            32,
            8,
            [8192 + 1024] * 2 + dec1,
            [1024] * 2 + [1] * 62,
            kind="mixed",
        ),
        Case(
            "prefill",
            "32/8 mixed 1x4096 ctx 0 + 127 decodes 512..4096",
            32,
            8,
            [4096] + dec2,
            [4096] + [1] * 127,
            kind="mixed",
        ),
    ]


def all_cases(part="all"):
    """Every case of bench_ch10.cu, in its order; part picks decode, prefill or flex ones (all:
    the three); window: bench_ch12.cu's cases (window_cases)."""
    decode = [uniform(*s) for s in STANDARD]
    decode += [uniform(64, 8, 32, 4096), uniform(32, 1, 32, 4096)]
    decode += [uniform(32, 8, 32, 4096, d=64, suffix=" D64"), uniform(32, 8, 32, 4096, d=256, suffix=" D256")]
    decode += ragged_cases()
    decode += mqa_ragged_cases()
    decode += [uniform(*s).with_fp8() for s in STANDARD] + [c.with_fp8() for c in ragged_cases()]
    prefill = [uniform(32, 8, 64, 4096, part="prefill", n=n, suffix=" n=%d" % n) for n in (4, 8)]
    prefill += [
        Case("prefill", "32/8 chunk %d ctx %d" % (c, p), 32, 8, [p + c], [c], kind="prefill")
        for p in CONTEXTS
        for c in CHUNKS
    ]
    prefill += mixed_cases()
    flex = [uniform(*s, part="flex") for s in STANDARD]
    parts = {"decode": decode, "prefill": prefill, "flex": flex, "all": decode + prefill + flex}
    parts["window"] = window_cases()  # bench_ch12.cu's, not bench_ch10's: not in "all"
    return parts[part]


# ----------------------------------------------------------------------------- chapter 12's window cases

FI_WINDOW = "FlashInfer decode (tensor cores, window_left)"
FI_WINDOW_SINKS = "FlashInfer decode (tensor cores, AttentionSink variant)"
FI_CHUNK_WINDOW = "FlashInfer prefill (fa2, window_left)"
FI_CHUNK_SINKS = "FlashInfer prefill (fa2, AttentionSink variant)"


class WindowCase(Case):
    """One of bench_ch12.cu's cases: B sequences of `length` tokens (the new ones included),
    n_new new tokens each, a sliding window (0: full) and per-head sinks on or off."""

    def __init__(self, name, b, length, n_new, window, sinks, hq=32, hkv=8, d=128):
        super().__init__("window", name, hq, hkv, [length] * b, [n_new] * b, d, kind="window")
        self.window, self.sinks = window, sinks

    @property
    def window_left(self):
        """FlashInfer's window: the keys left of the query it sees (so window - 1); -1: full."""
        return self.window - 1 if self.window else -1

    def first_key(self):
        """The first key any new token sees (bench_ch12.cu's first_key)."""
        l, n = self.seq_lens[0], self.q_lens[0]
        return max(0, l - n - self.window + 1) if self.window else 0

    def live_blocks(self):
        """Blocks of a sequence that a window touches: from first_key's block to the end."""
        return math.ceil(self.seq_lens[0] / PAGE) - self.first_key() // PAGE

    def bytes_moved(self):
        """bench_ch12.cu's count: K and V of the blocks the windows touch, every KV head, plus
        q and out (fp16)."""
        kv = 2.0 * 2.0 * self.b * self.live_blocks() * PAGE * self.hkv * self.d
        return kv + 2.0 * 2.0 * self.num_tokens * self.hq * self.d

    def flops(self):
        """The FLOPs of the keys each row sees: new token i of a sequence (n new, length l)
        sits at p = l - n + i and sees min(window, p + 1) keys (all p + 1 when full); each
        key costs 2 * D for q.k and 2 * D for p.v, per query head."""
        keys = 0
        for l, n in zip(self.seq_lens, self.q_lens):
            for p in range(l - n, l):
                keys += min(self.window, p + 1) if self.window else p + 1
        return 4.0 * self.d * self.hq * keys

    def sink_values(self):
        """bench_ch12.cu's sink logits: 0.5 + 0.1 * (h % 7) for query head h."""
        return [0.5 + 0.1 * (h % 7) for h in range(self.hq)]


def window_cases():
    """bench_ch12.cu's cases, by its names and in its order (keep the two lists in step)."""
    ch = 32768
    return [
        WindowCase("32/8/32 ctx 1024 full", 32, 1024, 1, 0, False),
        WindowCase("32/8/32 ctx 32768 window 1024", 32, ch, 1, 1024, False),
        WindowCase("32/8/32 ctx 32768 window 1024 sinks", 32, ch, 1, 1024, True),
        WindowCase("32/8/32 ctx 32768 full", 32, ch, 1, 0, False),
        WindowCase("32/8/32 ctx 32768 window 128", 32, ch, 1, 128, False),
        WindowCase("32/8/32 ctx 32768 window 128 sinks", 32, ch, 1, 128, True),
        WindowCase("32/8 chunk 2048 ctx 32768 window 1024", 1, ch + 2048, 2048, 1024, False),
        WindowCase("32/8 chunk 2048 ctx 32768 window 1024 sinks", 1, ch + 2048, 2048, 1024, True),
    ]


# ----------------------------------------------------------------------------- paged data


class Paged:
    """A case's pool (rotated copies) and page table, in FlashInfer's HND layout."""

    def __init__(self, torch, case, copies, seed=7):
        self.case = case
        pages = [math.ceil(l / PAGE) for l in case.seq_lens]
        self.num_pages = sum(pages)
        g = torch.Generator().manual_seed(seed)
        perm = torch.randperm(self.num_pages, generator=g).to(torch.int32)  # scattered pages
        self.pages, start = [], 0
        for n in pages:
            self.pages.append(perm[start : start + n])
            start += n
        ind = [0]
        for n in pages:
            ind.append(ind[-1] + n)
        dev = DEVICE
        self.kv_indptr = torch.tensor(ind, dtype=torch.int32, device=dev)
        self.kv_indices = perm.to(dev)
        self.last_page_len = torch.tensor(
            [(l - 1) % PAGE + 1 for l in case.seq_lens], dtype=torch.int32, device=dev
        )
        self.qo_indptr = torch.tensor(case.qsl, dtype=torch.int32, device=dev)
        shape = (self.num_pages, case.hkv, PAGE, case.d)
        self.kv_dtype = torch.float8_e4m3fn if case.fp8 else torch.float16
        self.copies = []
        for c in range(copies):
            gen = torch.Generator(device=dev).manual_seed(1000 + c)
            k = torch.randn(shape, generator=gen, device=dev, dtype=torch.float32)
            v = torch.randn(shape, generator=gen, device=dev, dtype=torch.float32)
            self.copies.append((k.to(self.kv_dtype), v.to(self.kv_dtype)))
            del k, v
        gen = torch.Generator(device=dev).manual_seed(99)
        self.q = torch.randn(case.num_tokens, case.hq, case.d, generator=gen, device=dev).to(torch.float16)
        self.k_scale = K_SCALE if case.fp8 else 1.0
        self.v_scale = V_SCALE if case.fp8 else 1.0

    def dense(self, torch, cache, b):
        """Sequence b's K (or V) of copy `cache` as [Hkv, L, D], float32, scales applied."""
        idx = self.pages[b].to(cache.device).long()
        if cache.element_size() == 1:  # e4m3: gather the bytes (index kernels may lack fp8)
            x = cache.view(torch.uint8)[idx].view(cache.dtype)
        else:
            x = cache[idx]  # [n, Hkv, PAGE, D]
        x = x.permute(1, 0, 2, 3).reshape(x.shape[1], -1, x.shape[3])
        return x[:, : self.case.seq_lens[b]].float()

    def picks(self):
        """(sequence, new-token index) pairs checked: first, middle and last new token of the
        first, the last and the longest sequence."""
        lens = self.case.seq_lens
        seqs = sorted({0, len(lens) - 1, max(range(len(lens)), key=lambda b: lens[b])})
        out = []
        for b in seqs:
            n = self.case.q_lens[b]
            out += [(b, i) for i in sorted({0, n // 2, n - 1})]
        return out

    def reference(self, torch, picks, copy=0):
        """float32 attention of the picked rows: [len(picks), Hq, D]."""
        case, (kc, vc) = self.case, self.copies[copy]
        g = case.hq // case.hkv
        rows, cache = [], {}
        for b, i in picks:
            if b not in cache:
                cache[b] = (self.dense(torch, kc, b) * self.k_scale, self.dense(torch, vc, b) * self.v_scale)
            k, v = cache[b]
            pos = case.seq_lens[b] - case.q_lens[b] + i  # this token's position; it sees 0..pos
            q = self.q[case.qsl[b] + i].float().view(case.hkv, g, case.d)
            s = torch.einsum("hgd,hkd->hgk", q, k[:, : pos + 1]) / math.sqrt(case.d)
            rows.append(
                torch.einsum("hgk,hkd->hgd", torch.softmax(s, dim=-1), v[:, : pos + 1]).reshape(
                    case.hq, case.d
                )
            )
        return torch.stack(rows)

    def rows_of(self, out, picks):
        return out[[self.case.qsl[b] + i for b, i in picks]]


class WindowPaged(Paged):
    """A window case's pool, as bench_ch12.cu lays it out: page 0 is the null page (never to
    be read) and every table entry left of the first key any window sees names it; the pool
    holds only the null page and the pages the windows touch (randomly permuted). FlashInfer
    gets the whole table and skips the left part by window_left."""

    def __init__(self, torch, case, copies, seed=7):
        self.case = case
        width = math.ceil(case.seq_lens[0] / PAGE)
        live, first = case.live_blocks(), case.first_key() // PAGE
        self.num_pages = 1 + case.b * live
        g = torch.Generator().manual_seed(seed)
        perm = (1 + torch.randperm(case.b * live, generator=g)).to(torch.int32)
        self.pages = [
            torch.cat([torch.zeros(first, dtype=torch.int32), perm[b * live : (b + 1) * live]])
            for b in range(case.b)
        ]
        assert all(len(p) == width for p in self.pages)
        dev = DEVICE
        self.kv_indptr = torch.tensor([b * width for b in range(case.b + 1)], dtype=torch.int32, device=dev)
        self.kv_indices = torch.cat(self.pages).to(dev)
        self.last_page_len = torch.tensor(
            [(l - 1) % PAGE + 1 for l in case.seq_lens], dtype=torch.int32, device=dev
        )
        self.qo_indptr = torch.tensor(case.qsl, dtype=torch.int32, device=dev)
        self.kv_dtype = torch.float16
        shape = (self.num_pages, case.hkv, PAGE, case.d)
        self.copies = []
        for c in range(copies):
            gen = torch.Generator(device=dev).manual_seed(1000 + c)
            k = torch.randn(shape, generator=gen, device=dev, dtype=torch.float32).to(torch.float16)
            v = torch.randn(shape, generator=gen, device=dev, dtype=torch.float32).to(torch.float16)
            self.copies.append((k, v))
        gen = torch.Generator(device=dev).manual_seed(99)
        self.q = torch.randn(case.num_tokens, case.hq, case.d, generator=gen, device=dev).to(torch.float16)
        self.k_scale = self.v_scale = 1.0
        self.sinks = torch.tensor(case.sink_values(), dtype=torch.float32, device=dev) if case.sinks else None

    def reference(self, torch, picks, copy=0, sinks="case"):
        """float32 attention of the picked rows, [len(picks), Hq, D]: the row at position p sees
        keys [p - window + 1, p] (all of 0..p if full); with sinks (the case's by default,
        None for none) sink h joins head h's softmax denominator as exp(sink_h - max)."""
        case, (kc, vc) = self.case, self.copies[copy]
        sinks = self.sinks if isinstance(sinks, str) else sinks
        g = case.hq // case.hkv
        rows, cache = [], {}
        for b, i in picks:
            if b not in cache:
                cache[b] = (self.dense(torch, kc, b), self.dense(torch, vc, b))
            k, v = cache[b]
            pos = case.seq_lens[b] - case.q_lens[b] + i
            lo = max(0, pos - case.window + 1) if case.window else 0
            q = self.q[case.qsl[b] + i].float().view(case.hkv, g, case.d)
            s = torch.einsum("hgd,hkd->hgk", q, k[:, lo : pos + 1]) / math.sqrt(case.d)
            if sinks is not None:  # a column of sink logits, dropped after the softmax
                col = sinks.float().to(s.device).view(case.hkv, g, 1)
                p = torch.softmax(torch.cat([s, col], dim=-1), dim=-1)[..., :-1]
            else:
                p = torch.softmax(s, dim=-1)
            rows.append(torch.einsum("hgk,hkd->hgd", p, v[:, lo : pos + 1]).reshape(case.hq, case.d))
        return torch.stack(rows)


def check(torch, paged, out, what, ref=None, picks=None):
    picks = picks or paged.picks()
    ref = paged.reference(torch, picks) if ref is None else ref
    err = bt.rel_err(torch, paged.rows_of(out, picks), ref)
    if not err < TOL:
        raise bt.WrongResult("%s disagrees with the float32 reference: error %.3g of max |ref|" % (what, err))
    return err


# ----------------------------------------------------------------------------- FlashInfer calls


def fi_decode(fi, torch, paged, ws, tensor_cores, out=None, window_left=None, wrapper=None, run_kw=None, extra=()):
    """(plan, run) for BatchDecodeWithPagedKVCacheWrapper; run(i) uses copy i % copies.
    window_left (chapter 12's cases): plan()'s sliding window, left keys inclusive (None:
    not passed). wrapper: a wrapper built elsewhere (a JIT variant's); extra: run()'s
    positional arguments after the cache (the variant's tensors and scalars); run_kw: more
    keyword arguments of run()."""
    case = paged.case
    w = wrapper or fi.BatchDecodeWithPagedKVCacheWrapper(ws, "HND", use_tensor_cores=tensor_cores)
    out = torch.empty_like(paged.q) if out is None else out
    win = {} if window_left is None else {"window_left": window_left}

    def plan():
        w.plan(
            paged.kv_indptr,
            paged.kv_indices,
            paged.last_page_len,
            case.hq,
            case.hkv,
            case.d,
            PAGE,
            pos_encoding_mode="NONE",
            q_data_type=torch.float16,
            kv_data_type=paged.kv_dtype,
            sm_scale=1.0 / math.sqrt(case.d),
            **win,
        )

    kw = {"k_scale": paged.k_scale, "v_scale": paged.v_scale} if case.fp8 else {}
    kw.update(run_kw or {})

    def run(i):
        k, v = paged.copies[i % len(paged.copies)]
        return w.run(paged.q, (k, v), *extra, out=out, **kw)

    return plan, run


def fi_prefill(
    fi, torch, paged, ws, backend, seqs=None, q=None, out=None, window_left=None, wrapper=None, run_kw=None, extra=()
):
    """(plan, run) for BatchPrefillWithPagedKVCacheWrapper over sequences `seqs` (all by
    default), causal (bottom-right: FlashInfer aligns the new tokens to the end of the KV).
    window_left, wrapper, run_kw, extra: as fi_decode's."""
    case = paged.case
    seqs = list(range(case.b)) if seqs is None else seqs
    dev = DEVICE
    qo = [0]
    kv = [0]
    for b in seqs:
        qo.append(qo[-1] + case.q_lens[b])
        kv.append(kv[-1] + len(paged.pages[b]))
    indices = torch.cat([paged.pages[b] for b in seqs]).to(dev)
    qo_indptr = torch.tensor(qo, dtype=torch.int32, device=dev)
    kv_indptr = torch.tensor(kv, dtype=torch.int32, device=dev)
    last = paged.last_page_len[torch.tensor(seqs, device=dev).long()].contiguous()
    q = paged.q if q is None else q
    out = torch.empty_like(q) if out is None else out
    w = wrapper or fi.BatchPrefillWithPagedKVCacheWrapper(ws, "HND", backend=backend)
    win = {} if window_left is None else {"window_left": window_left}
    kw = run_kw or {}

    def plan():
        w.plan(
            qo_indptr,
            kv_indptr,
            indices,
            last,
            case.hq,
            case.hkv,
            case.d,
            PAGE,
            causal=True,
            q_data_type=torch.float16,
            kv_data_type=paged.kv_dtype,
            sm_scale=1.0 / math.sqrt(case.d),
            **win,
        )

    def run(i):
        k, v = paged.copies[i % len(paged.copies)]
        return w.run(q, (k, v), *extra, out=out, **kw)

    return plan, run


def prebuild(fi, torch, cases, log, fa3=True):
    """Builds every JIT module the cases will ask for in one ninja run (parallel across the
    machine's cores) instead of one after another at first use. Best effort: the module
    generators are FlashInfer internals; anything missing here is built at first use."""
    try:
        from flashinfer.jit import build_jit_specs
        from flashinfer.jit.attention.modules import (
            _gen_batch_prefill_primary_module,
            gen_batch_decode_module,
            gen_batch_prefill_module,
            gen_customize_batch_prefill_module,
        )
    except Exception as e:  # noqa: BLE001
        log("  JIT prebuild skipped (%s): modules build at first use" % bt.first_line(e))
        return
    f16, i32, e4m3 = torch.float16, torch.int32, torch.float8_e4m3fn
    specs = {}
    for c in cases:
        kv = e4m3 if c.fp8 else f16
        args = (f16, kv, f16, i32, c.d, c.d, 0, False, False)
        if c.part == "decode":
            if not c.fp8:
                specs["decode", args] = lambda a=args: gen_batch_decode_module(*a)
            specs["fa2", args] = lambda a=args: _gen_batch_prefill_primary_module("fa2", *a, False)
        elif c.part == "prefill":
            specs["fa2", args] = lambda a=args: _gen_batch_prefill_primary_module("fa2", *a, False)
            specs["fa3", args] = lambda a=args: gen_batch_prefill_module("fa3", *a, False)
        elif c.part == "window":  # use_sliding_window where the case has a window
            args = (f16, kv, f16, i32, c.d, c.d, 0, c.window > 0, False)
            if c.sinks:
                kind = "decode" if c.q_lens[0] == 1 else "prefill"
                specs["sink", kind, c.d] = lambda k=kind, d=c.d: gen_customize_batch_prefill_module(
                    "fa2", *sink_jit_args(fi, torch, d, k)
                )
            else:
                specs["fa2", args] = lambda a=args: _gen_batch_prefill_primary_module("fa2", *a, False)
                if c.q_lens[0] > 1 and fa3:
                    specs["fa3", args] = lambda a=args: gen_batch_prefill_module("fa3", *a, False)
    t = time.time()
    built = []
    for key, make in specs.items():  # a spec that cannot be made builds (or fails) at first use
        try:
            built.append(make())
        except Exception as e:  # noqa: BLE001
            log("  JIT prebuild: no spec for %s (%s)" % (key[0], bt.first_line(e)))
    try:
        build_jit_specs(built, verbose=False)
        log("  JIT prebuild: %d modules in %.0f s" % (len(built), time.time() - t))
    except Exception as e:  # noqa: BLE001
        log(
            "  JIT prebuild failed after %.0f s (%s): modules build at first use"
            % (time.time() - t, bt.first_line(e))
        )


# ----------------------------------------------------------------------------- output


class Results:
    def __init__(self, ceil, device, csv_path, md_path):
        self.ceil, self.device, self.csv_path, self.md_path = ceil, device, csv_path, md_path
        self.rows, self.flops_rows, self.plan_rows, self.notes = [], [], [], []
        self.missing = []  # (case, reason): cases that no FlashInfer kernel ran (window part)
        self.window_only = False  # chapter 12's cases alone: no (empty) prefill table
        self.failed = False

    def add(self, kernel, case, ms):
        nbytes = case.bytes_moved()
        tbps = nbytes / (ms * 1e-3) / 1e12
        if case.kind != "prefill":
            self.rows.append(
                {
                    "kernel": kernel,
                    "shape": case.name,
                    "us": ms * 1e3,
                    "bytes": nbytes,
                    "tbps": tbps,
                    "pct": 100.0 * tbps / self.ceil["read_tbps"],
                    "ceiling": "read",
                }
            )
        if case.kind in ("prefill", "mixed"):
            fl = case.flops()
            self.flops_rows.append(
                {
                    "kernel": kernel,
                    "shape": case.name,
                    "us": ms * 1e3,
                    "flops": fl,
                    "tflops": fl / (ms * 1e-3) / 1e12,
                    "bytes": nbytes,
                    "tbps": tbps,
                }
            )

    def note(self, line, failed=False):
        self.failed |= failed
        self.notes.append(line)
        print(line, file=sys.stderr if failed else sys.stdout)

    def write(self, final=True):
        """Writes the files (after every case, so that a run cut short keeps its rows); prints
        the tables only when final."""
        if not final:
            with contextlib.redirect_stdout(io.StringIO()):
                return self.write(True)
        bt.write_outputs(self.rows, [], self.ceil, self.device, self.csv_path, self.md_path)
        if self.flops_rows:
            print("\n%-46s %-52s %10s %8s" % ("kernel", "case", "us", "TFLOP/s"))
            for r in self.flops_rows:
                print("%-46s %-52s %10.1f %8.1f" % (r["kernel"], r["shape"], r["us"], r["tflops"]))
        if self.csv_path:
            with open(flops_csv_path(self.csv_path), "w", newline="") as f:
                w = csv.writer(f, lineterminator="\n")
                w.writerow(FLOPS_CSV_HEADER.split(","))
                for r in self.flops_rows:
                    w.writerow(
                        [r["kernel"], r["shape"]]
                        + [bt.g6(r[k]) for k in ("us", "flops", "tflops", "bytes", "tbps")]
                        + [self.device]
                    )
        if self.md_path:
            md = ""
            if self.flops_rows or not self.window_only:
                md += "\n## Prefill chunks and mixed steps (causal FLOPs counted exactly)\n\n" + FLOPS_MD_HEADER
            for r in self.flops_rows:
                md += "| %s | %s | %.1f | %.2f | %.1f | %.1f | %.2f |\n" % (
                    r["kernel"],
                    r["shape"],
                    r["us"],
                    r["flops"] / 1e9,
                    r["tflops"],
                    r["bytes"] / 1e6,
                    r["tbps"],
                )
            if self.plan_rows:
                md += (
                    "\n## plan() on the host (median of 20, us)\n\n| planner | case | us |\n|---|---|---:|\n"
                )
                md += "".join("| %s | %s | %.1f |\n" % r for r in self.plan_rows)
            if self.missing:
                md += "\n## Cases without a FlashInfer time\n\n| case | why |\n|---|---|\n"
                md += "".join("| %s | %s |\n" % (c, why.replace("|", "/")) for c, why in self.missing)
            if self.notes:
                md += "\n" + "".join("- %s\n" % n for n in self.notes)
            with open(self.md_path, "a") as f:
                f.write(md)


def flops_csv_path(path):
    root, ext = os.path.splitext(path)
    return root + "-flops" + (ext or ".csv")


def host_ms(fn, reps=20):
    """Median wall-clock milliseconds of fn() on the host (fn synchronises as it needs)."""
    ts = []
    for _ in range(reps + 2):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1e3)
    return sorted(ts[2:])[reps // 2]


# ----------------------------------------------------------------------------- the benchmark


def attempt(res, kernel, case, fn):
    """Runs one baseline: its ms, or None with a note (FAILED for a wrong result)."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - not built, unsupported, out of memory, wrong
        wrong = isinstance(e, bt.WrongResult)
        res.note(
            "%s: %s %s: %s" % ("FAILED" if wrong else "skipped", kernel, case.name, bt.first_line(e)), wrong
        )
        return None


def measure(torch, timer, paged, plan, run, what):
    plan()
    out = run(0)
    bt.sync(torch)
    err = check(torch, paged, out, what)
    ms = timer.median_ms(run)
    print("  %-46s %10.1f us  error %.1e" % (what, ms * 1e3, err))
    return ms


def bench_decode_case(fi, torch, timer, res, case, ws):
    copies = bt.rotation_count(torch, case.bytes_moved())
    paged = Paged(torch, case, copies)
    best = None
    modes = [(FI_DECODE_FP8, True)] if case.fp8 else [(FI_DECODE_CUDA, False), (FI_DECODE_TC, True)]
    for kernel, tc in modes:

        def go(kernel=kernel, tc=tc):
            plan, run = fi_decode(fi, torch, paged, ws, tc)
            return measure(torch, timer, paged, plan, run, kernel), plan

        got = attempt(res, kernel, case, go)
        if got is not None:
            ms, plan = got
            res.add(kernel, case, ms)
            best = ms if best is None else min(best, ms)
            if "ragged" in case.name and not case.fp8:
                res.plan_rows.append((kernel + " plan()", case.name, host_ms(plan) * 1e3))
    if best is not None and not case.fp8:
        res.add(FI_DECODE_BEST, case, best)
    return paged


def sdpa_chunk(torch, paged, backend_name):
    """(call, picks) for one SDPA backend on a one-sequence chunk: dense q [1, Hq, C, D],
    K and V [1, Hq, P + C, D] (KV heads repeated), causal bottom-right."""
    from torch.nn.attention import sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    case = paged.case
    c, l = case.q_lens[0], case.seq_lens[0]
    g = case.hq // case.hkv
    backend = dict(bt.sdpa_backends(torch))[backend_name]
    q = paged.q.permute(1, 0, 2).unsqueeze(0).contiguous()
    dense = []
    for k, v in paged.copies:
        kd = paged.dense(torch, k, 0).to(torch.float16).repeat_interleave(g, dim=0).unsqueeze(0)
        vd = paged.dense(torch, v, 0).to(torch.float16).repeat_interleave(g, dim=0).unsqueeze(0)
        dense.append((kd, vd))
    scale = 1.0 / math.sqrt(case.d)
    square = c == l
    # flash: the public bottom-right mask (routed to the flash kernel); cuDNN: is_causal
    # (kept only if the check finds it bottom-right); a square chunk: is_causal for both.
    mask = None if square or backend_name != "flash" else causal_lower_right(c, l)
    import torch.nn.functional as F

    def call(i):
        k, v = dense[i % len(dense)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            with sdpa_kernel([backend]):
                if mask is None:
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
                else:
                    o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
        return o[0].permute(1, 0, 2)  # [C, Hq, D], rows as paged.q

    return call


def bench_prefill_case(fi, torch, timer, res, case, ws):
    copies = bt.rotation_count(torch, case.bytes_moved())
    paged = Paged(torch, case, copies)
    best = None
    for backend in ("fa2", "fa3"):
        kernel = FI_PREFILL.format(backend)

        def go(kernel=kernel, backend=backend):
            plan, run = fi_prefill(fi, torch, paged, ws, backend)
            return measure(torch, timer, paged, plan, run, kernel), plan

        got = attempt(res, kernel, case, go)
        if got is not None:
            ms, plan = got
            res.add(kernel, case, ms)
            best = ms if best is None else min(best, ms)
            if case.kind == "mixed":
                res.plan_rows.append((kernel + " plan()", case.name, host_ms(plan) * 1e3))
    if best is not None:
        res.add(FI_PREFILL_BEST, case, best)
    if case.kind == "mixed":  # chunks through the prefill wrapper, decodes through the decode one
        pf = [b for b in range(case.b) if case.q_lens[b] > 1]
        dec = [b for b in range(case.b) if case.q_lens[b] == 1]
        assert pf == list(range(len(pf))), "the mixed cases put their chunks first"
        n_pf = case.qsl[len(pf)]

        def go():
            out = torch.empty_like(paged.q)
            plan_p, run_p = fi_prefill(fi, torch, paged, ws, "auto", pf, paged.q[:n_pf], out[:n_pf])
            sub = Case(
                "prefill",
                case.name,
                case.hq,
                case.hkv,
                [case.seq_lens[b] for b in dec],
                [1] * len(dec),
                case.d,
            )
            dpaged = _subset(torch, paged, sub, dec, paged.q[n_pf:])
            ws2 = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=DEVICE)
            plan_d, run_d = fi_decode(fi, torch, dpaged, ws2, True, out[n_pf:])

            def run_both(i):
                run_p(i)
                run_d(i)
                return out

            plan_p()
            plan_d()
            return measure(torch, timer, paged, lambda: None, run_both, FI_SPLIT)

        ms = attempt(res, FI_SPLIT, case, go)
        if ms is not None:
            res.add(FI_SPLIT, case, ms)
    if case.kind == "prefill":
        for name in ("flash", "cudnn"):
            kernel = SDPA_CAUSAL.format(name)

            def go(name=name, kernel=kernel):
                if name not in dict(bt.sdpa_backends(torch)):
                    raise RuntimeError("this torch has no %s SDPA backend" % name)
                call = sdpa_chunk(torch, paged, name)
                out = call(0)
                bt.sync(torch)
                try:
                    check(torch, paged, out, kernel)
                except bt.WrongResult as e:
                    if name == "cudnn" and case.q_lens[0] != case.seq_lens[0]:
                        raise RuntimeError("is_causal is not bottom-right here (%s)" % e)
                    raise
                ms = timer.median_ms(call)
                print("  %-46s %10.1f us" % (kernel, ms * 1e3))
                return ms

            ms = attempt(res, kernel, case, go)
            if ms is not None:
                res.add(kernel, case, ms)
    return paged


def _subset(torch, paged, sub, seqs, q):
    """A Paged view of some sequences of `paged` (same pool and q rows), for a second wrapper."""
    view = Paged.__new__(Paged)
    view.case, view.copies, view.kv_dtype = sub, paged.copies, paged.kv_dtype
    view.k_scale, view.v_scale, view.num_pages = paged.k_scale, paged.v_scale, paged.num_pages
    view.pages = [paged.pages[b] for b in seqs]
    ind = [0]
    for p in view.pages:
        ind.append(ind[-1] + len(p))
    view.kv_indptr = torch.tensor(ind, dtype=torch.int32, device=DEVICE)
    view.kv_indices = torch.cat(view.pages).to(DEVICE)
    view.last_page_len = paged.last_page_len[torch.tensor(seqs, device=DEVICE).long()].contiguous()
    view.qo_indptr = torch.tensor(sub.qsl, dtype=torch.int32, device=DEVICE)
    view.q = q  # the sequences' rows of paged.q, contiguous (the decodes come last)
    return view


STRONG_SINK = 8.0  # added to the sink logits for the sink checks (see check_sinks)


def check_sinks(torch, paged, plan, run):
    """(error against the sink reference, error against the sink-free one) of run(0) with the
    sink logits raised by STRONG_SINK for the call. At the cases' own logits (0.5..1.1) a
    sink weighs e^1.1 against ~e^0.5 per key of a 128..1024-key window: under 1.5% of the
    denominator, below the 2e-2 tolerance, so a kernel that drops the sinks would pass the
    plain check. Raised by 8, the sink outweighs the window and dropping it is plain to see.
    The same tensor goes back to the case's values before timing."""
    saved = paged.sinks.clone()
    paged.sinks.add_(STRONG_SINK)
    try:
        plan()
        out = run(0)
        bt.sync(torch)
        picks = paged.picks()
        got = paged.rows_of(out, picks)
        return (
            bt.rel_err(torch, got, paged.reference(torch, picks)),
            bt.rel_err(torch, got, paged.reference(torch, picks, sinks=None)),
        )
    finally:
        paged.sinks.copy_(saved)


class NotSupported(RuntimeError):
    """The FlashInfer at hand has no way to run a case (a 'not supported by' row, not a skip)."""


def sink_jit_args(fi, torch, d, kind):
    """jit_args of a wrapper that runs FlashInfer's own attention-sink variant (AttentionSink
    in flashinfer/jit/attention/variants.py, fa2): the per-head sink logits are its one extra
    tensor, sm_scale its one extra scalar. In 0.7.2, run(sinks=...) reaches the kernel only on
    the trtllm-gen, cuDNN and cute-dsl backends (Blackwell or cuDNN); the fa2/fa3 paged_run
    (prefill.py, get_batch_prefill_module) does not pass it on: the variant is how sinks run
    on the H100. One module per wrapper kind (kind: 'decode' or 'prefill')."""
    try:
        from flashinfer.jit.attention.variants import attention_sink_decl
    except Exception as e:  # noqa: BLE001
        raise NotSupported(
            "not supported by FlashInfer %s: no AttentionSink variant (%s)"
            % (getattr(fi, "__version__", "?"), bt.first_line(e))
        )
    f16 = torch.float16
    return [
        "pa_bench_attention_sink_%s_fp16_d%d" % (kind, d),
        f16, f16, f16, torch.int32, d, d,
        ["sink"], ["float"], ["sm_scale"], ["double"],
        "AttentionSink",
        attention_sink_decl["fa2"],
    ]  # fmt: skip


def sink_wrapper(fi, torch, ws, wrappers, kind, d):
    """The run's one wrapper of each kind with the sink variant (built once: JIT at first)."""
    key = (kind, d)
    if key not in wrappers:
        args = sink_jit_args(fi, torch, d, kind)
        if kind == "decode":
            wrappers[key] = fi.BatchDecodeWithPagedKVCacheWrapper(
                ws, "HND", use_tensor_cores=True, backend="fa2", jit_args=args
            )
        else:
            wrappers[key] = fi.BatchPrefillWithPagedKVCacheWrapper(ws, "HND", backend="fa2", jit_args=args)
    return wrappers[key]


def window_kernels(case, fa3=True):
    """[(kernel name, backend)] run on a window case: the tensor-core decode wrapper for the
    decodes (the issue's anchor), the prefill wrapper (fa2, and fa3 unless turned off) for
    the chunk; the sink variant (fa2) where the case has sinks."""
    decode = case.q_lens[0] == 1
    if case.sinks:
        return [(FI_WINDOW_SINKS, "fa2")] if decode else [(FI_CHUNK_SINKS, "fa2")]
    if decode:
        return [(FI_WINDOW if case.window else FI_DECODE_TC, "auto")]
    out = [(FI_CHUNK_WINDOW, "fa2")]
    if fa3:
        out.append((FI_CHUNK_WINDOW.replace("fa2", "fa3"), "fa3"))
    return out


def bench_window_case(fi, torch, timer, res, case, ws, wrappers, fa3=True):
    """One of bench_ch12.cu's cases: its window as window_left = window - 1, its sinks through
    the sink variant; checked against the window/sink reference, then timed. A case no
    kernel could run gets a row in res.missing (with the reason)."""
    copies = bt.rotation_count(torch, case.bytes_moved())
    paged = WindowPaged(torch, case, copies)
    decode = case.q_lens[0] == 1
    win = case.window_left if case.window else None
    scale = 1.0 / math.sqrt(case.d)
    ran = False
    for kernel, backend in window_kernels(case, fa3):

        def go(kernel=kernel, backend=backend):
            if case.sinks:
                w = sink_wrapper(fi, torch, ws, wrappers, "decode" if decode else "prefill", case.d)
                kw = {"wrapper": w, "extra": (paged.sinks, scale)}
            else:
                kw = {}
            if decode:
                plan, run = fi_decode(fi, torch, paged, ws, True, window_left=win, **kw)
            else:
                plan, run = fi_prefill(fi, torch, paged, ws, backend, window_left=win, **kw)
            if case.sinks:
                e_sink, e_none = check_sinks(torch, paged, plan, run)
                print("  %-46s sinks raised by %g: error %.1e (sink-free: %.1e)" % (kernel, STRONG_SINK, e_sink, e_none))
                if not (e_sink < TOL and e_none > TOL):
                    raise bt.WrongResult(
                        "%s: with sink logits raised by %g, error %.3g against the sink reference, "
                        "%.3g against the sink-free one" % (kernel, STRONG_SINK, e_sink, e_none)
                    )
            return measure(torch, timer, paged, plan, run, kernel)

        ms = attempt(res, kernel, case, go)
        if ms is not None:
            res.add(kernel, case, ms)
            ran = True
    if not ran:
        res.missing.append((case.name, res.notes[-1] if res.notes else "no kernel ran"))
    if case.sinks:
        probe_run_sinks(fi, torch, res, paged, ws, decode, win)
    return paged


def probe_run_sinks(fi, torch, res, paged, ws, decode, win):
    """What the plain wrapper does with run(sinks=...) on this machine: a note (honoured,
    ignored or wrong), never a failure of the run."""
    what = "decode (tensor cores)" if decode else "prefill (fa2)"
    try:
        kw = {"window_left": win, "run_kw": {"sinks": paged.sinks}}
        if decode:
            plan, run = fi_decode(fi, torch, paged, ws, True, **kw)
        else:
            plan, run = fi_prefill(fi, torch, paged, ws, "fa2", **kw)
        e_sink, e_none = check_sinks(torch, paged, plan, run)
        verdict = "honoured" if e_sink < TOL else "ignored" if e_none < TOL else "neither"
        res.note(
            "FlashInfer %s, plain wrapper, run(sinks=...) on %s (sink logits raised by %g): error "
            "%.1e against the sink reference, %.1e against the sink-free one: sinks %s"
            % (what, paged.case.name, STRONG_SINK, e_sink, e_none, verdict)
        )
    except Exception as e:  # noqa: BLE001
        res.note("FlashInfer %s, plain wrapper, run(sinks=...) on %s: refused (%s)" % (what, paged.case.name, bt.first_line(e)))


def bench_flex_case(torch, timer, res, case):
    """FlexAttention paged decode (bench_torch.py's) on a standard shape."""
    b, l, hq, hkv, d = case.b, case.seq_lens[0], case.hq, case.hkv, case.d
    copies = bt.rotation_count(torch, case.bytes_moved())
    torch.manual_seed(1234)
    q = torch.randn(b, hq, 1, d, dtype=torch.float16, device=DEVICE)
    kv = [
        (
            torch.randn(b, hkv, l, d, dtype=torch.float16, device=DEVICE),
            torch.randn(b, hkv, l, d, dtype=torch.float16, device=DEVICE),
        )
        for _ in range(copies)
    ]
    scale = 1.0 / math.sqrt(d)
    nref = min(b, 2)
    ref = bt.reference_attention(torch, q[:nref], kv[0][0][:nref], kv[0][1][:nref], scale)
    ms = attempt(
        res, bt.FLEX_KERNEL, case, lambda: bt.bench_flex(torch, timer, q, kv, scale, ref, TOL, print)
    )
    if ms is not None:
        res.add(bt.FLEX_KERNEL, case, ms)
    torch._dynamo.reset()


def run_benchmark(torch, fi, cases, csv_path, md_path, timer=None, do_prebuild=True, fa3=True):
    device = torch.cuda.get_device_name(0) if DEVICE == "cuda" else DEVICE
    version = getattr(fi, "__version__", "?") if fi is not None else "absent"
    print("torch %s, flashinfer %s, %s" % (torch.__version__, version, device))
    timer = timer or bt.Timer(torch)
    ceil = bt.measure_ceilings(torch, timer, bt.CEILING_BYTES)
    res = Results(ceil, device, csv_path, md_path)
    res.window_only = bool(cases) and all(c.part == "window" for c in cases)
    wrappers = {}  # the sink variant's wrappers, built once a run
    res.note(
        "FlashInfer %s, page size %d, HND layout [num_pages, Hkv, %d, D], K and V apart, "
        "permuted page table; torch %s" % (version, PAGE, PAGE, torch.__version__)
    )
    if fi is not None and do_prebuild:
        prebuild(fi, torch, [c for c in cases if c.part != "flex"], print, fa3)
    ws = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=DEVICE)
    for case in cases:
        print(
            "\n%s: %.1f MB counted, %.2f GFLOP, %d sequences, %d new tokens, %d cached tokens"
            % (
                case.name,
                case.bytes_moved() / 1e6,
                case.flops() / 1e9,
                case.b,
                case.num_tokens,
                sum(case.seq_lens),
            )
        )
        t = time.time()
        try:
            if case.part == "flex":
                bench_flex_case(torch, timer, res, case)
            elif fi is None:
                res.note("skipped: FlashInfer %s: flashinfer is not importable" % case.name)
            elif case.part == "window":
                bench_window_case(fi, torch, timer, res, case, ws, wrappers, fa3)
            elif case.part == "decode":
                bench_decode_case(fi, torch, timer, res, case, ws)
            else:
                bench_prefill_case(fi, torch, timer, res, case, ws)
        except Exception as e:  # noqa: BLE001 - out of memory for the case as a whole, say
            res.note("skipped: %s: %s" % (case.name, bt.first_line(e)))
            if case.part == "window":
                res.missing.append((case.name, res.notes[-1]))
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
        print("  (%.0f s)" % (time.time() - t))
        res.write(final=False)
    res.write()
    return 1 if res.failed else 0


# ----------------------------------------------------------------------------- self-test


def self_test():
    """What can be checked without a GPU: the case list, the byte and FLOP counts (against
    numbers worked out by hand and bench_ch09's CSV), the length generator, and with torch
    (a CPU build is enough) the page table, the pool gather, the float32 reference against
    NumPy and against SDPA's bottom-right causal mask, and that a wrong page table or a
    top-left mask is caught. With a GPU and flashinfer, one tiny decode and prefill too."""
    passed, failed, skipped = [0], [0], [0]

    def ok(what, cond, detail=""):
        print("  %-4s %s %s" % ("ok" if cond else "FAIL", what, detail))
        (passed if cond else failed)[0] += 1

    cases = all_cases()
    names = [c.name for c in cases if c.part != "flex"]  # flex runs the standard shapes again
    ok("case names are unique", len(names) == len(set(names)))
    ok(
        "%d decode, %d prefill, %d flex cases"
        % tuple(len(all_cases(p)) for p in ("decode", "prefill", "flex")),
        [len(all_cases(p)) for p in ("decode", "prefill", "flex")] == [22, 20, 5],
    )
    ch09 = {  # bench/results/ch09-fast-decode.csv: bytes of the fp16 and fp8 rows
        "32/8/32/4096": ("5.37395e+08", "2.6896e+08"),
        "32/8/8/32768": ("1.07387e+09", "5.37002e+08"),
        "32/32/32/4096": ("2.14801e+09", "1.07427e+09"),
        "32/8/64/32": ("9.43718e+06", "5.24288e+06"),
    }
    for sh, (b16, b8) in ch09.items():
        c = [x for x in cases if x.name == sh][0]
        ok("bytes %s fp16 as bench_ch09" % sh, bt.g6(c.bytes_moved()) == b16, bt.g6(c.bytes_moved()))
        c8 = [x for x in cases if x.name == sh + " e4m3"][0]
        ok("bytes %s e4m3 as bench_ch09" % sh, bt.g6(c8.bytes_moved()) == b8, bt.g6(c8.bytes_moved()))
    c = Case("prefill", "t", 32, 8, [4096 + 1024], [1024], kind="prefill")
    ok("FLOPs of a 1024 chunk over 4096", c.flops() == 4 * 128 * 32 * (1024 * 4096 + 1024 * 1025 // 2))
    c = Case("prefill", "t", 2, 1, [3, 5], [1, 2], d=4)
    ok("FLOPs by hand (rows see 3; 4 and 5 keys)", c.flops() == 4 * 4 * 2 * (3 + 4 + 5))
    ok("a decode's FLOPs are 4 D Hq L", uniform(32, 8, 2, 100).flops() == 4 * 128 * 32 * 200)
    w = WindowCase("t", 1, 6, 3, 2, False, hq=2, hkv=1, d=4)  # rows at 3, 4, 5 see 2 keys each
    ok("a window's FLOPs count the keys it sees", w.flops() == 4 * 4 * 2 * (2 + 2 + 2), w.flops())
    ok("a window wider than the sequence sees every key",
       WindowCase("t", 1, 6, 3, 9, False, hq=2, hkv=1, d=4).flops() == 4 * 4 * 2 * (4 + 5 + 6))
    lens = log_uniform_lengths(128, 64, 8192)
    ok(
        "log-uniform lengths in [64, 8192], spread",
        min(lens) >= 64 and max(lens) <= 8192 and min(lens) < 128 and max(lens) > 4096,
        "min %d max %d sum %d" % (min(lens), max(lens), sum(lens)),
    )
    # bench_ch10.cu computes the same lengths and prints their sum: 190149.
    ok(
        "log-uniform lengths as bench_ch10.cu",
        hash32(0) == 0x205F0435 and lens[:4] == [118, 214, 5929, 293] and sum(lens) == 190149,
        "hash32(0) = %#x, sum %d" % (hash32(0), sum(lens)),
    )
    ok(
        "spread 62 from 2048 to 8192",
        spread(62, 2048, 8192)[0] == 2048 and spread(62, 2048, 8192)[-1] == 8192,
    )
    mix = mixed_cases()[0]
    ok(
        "mixed step: 2 chunks then 62 decodes",
        mix.q_lens[:3] == [1024, 1024, 1] and mix.b == 64 and mix.num_tokens == 2110,
    )
    ok("flops csv beside the csv", flops_csv_path("r/x.csv") == "r/x-flops.csv")
    _self_test_window(ok)

    try:
        import numpy as np
        import torch
    except Exception as e:  # noqa: BLE001
        print("  skip the torch checks: %s" % bt.first_line(e))
        skipped[0] += 1
        torch = None
    if torch is not None:
        global DEVICE
        saved = DEVICE, bt.DEVICE
        DEVICE = bt.DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
        try:
            for case in (
                Case("decode", "tiny ragged", 4, 2, [5, 37, 16, 1], [1, 1, 1, 1], d=64),
                Case("prefill", "tiny mixed", 4, 1, [40, 9, 33], [7, 1, 33], d=32, kind="mixed"),
                Case("decode", "tiny e4m3", 4, 2, [20, 3], [1, 1], d=64, fp8=True),
            ):
                paged = Paged(torch, case, copies=2)
                allp = sorted(int(p) for pg in paged.pages for p in pg)
                ok(
                    "%s: page table is a permutation of the pool" % case.name,
                    allp == list(range(paged.num_pages)),
                )
                ok(
                    "%s: page counts" % case.name,
                    [len(p) for p in paged.pages] == [math.ceil(l / PAGE) for l in case.seq_lens],
                )
                k0 = paged.copies[0][0]
                d1 = paged.dense(torch, k0, 1)
                want = k0[int(paged.pages[1][0])][:, 0].float()  # first token of sequence 1
                ok("%s: gather finds a sequence's first token" % case.name, torch.equal(d1[:, 0], want))
                # the reference against NumPy (float64) on every picked row
                picks = [(b, i) for b in range(case.b) for i in range(case.q_lens[b])]
                ref = paged.reference(torch, picks).cpu().numpy()
                err = 0.0
                for r, (b, i) in enumerate(picks):
                    k = paged.dense(torch, k0, b).cpu().numpy() * paged.k_scale
                    v = paged.dense(torch, paged.copies[0][1], b).cpu().numpy() * paged.v_scale
                    pos = case.seq_lens[b] - case.q_lens[b] + i
                    q = paged.q[case.qsl[b] + i].float().cpu().numpy()[None, :, None, :]
                    o = bt.numpy_attention(
                        q, k[None, :, : pos + 1], v[None, :, : pos + 1], 1 / math.sqrt(case.d)
                    )
                    err = max(err, float(np.abs(o[0, :, 0] - ref[r]).max() / np.abs(ref[r]).max()))
                ok("%s: float32 reference vs NumPy" % case.name, err < 1e-4, "error %.1e" % err)
                # a cache read through a wrong page table must fail the check
                bad = paged.copies[0][0].clone()
                p0, p1 = int(paged.pages[0][0]), int(paged.pages[1][0])
                bad[[p0, p1]] = bad[[p1, p0]]
                wrong = torch.zeros(case.num_tokens, case.hq, case.d)
                view = Paged.__new__(Paged)
                view.__dict__.update(paged.__dict__)
                view.copies = [(bad, paged.copies[0][1])]
                rows = view.reference(torch, paged.picks())
                wrong[[case.qsl[b] + i for b, i in paged.picks()]] = rows.cpu()
                try:
                    check(torch, paged, wrong.to(DEVICE), "swapped pages")
                    ok("%s: a swapped page is caught" % case.name, False)
                except bt.WrongResult:
                    ok("%s: a swapped page is caught" % case.name, True)
            # SDPA's bottom-right mask is what the reference computes (and top-left is not)
            from torch.nn.attention.bias import causal_lower_right

            case = Case("prefill", "tiny chunk", 4, 2, [24 + 8], [8], d=32, kind="prefill")
            paged = Paged(torch, case, copies=1)
            g = case.hq // case.hkv
            q = paged.q.permute(1, 0, 2).unsqueeze(0).float()
            k = paged.dense(torch, paged.copies[0][0], 0).repeat_interleave(g, 0).unsqueeze(0)
            v = paged.dense(torch, paged.copies[0][1], 0).repeat_interleave(g, 0).unsqueeze(0)
            F = torch.nn.functional
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(8, 32))[0].permute(
                1, 0, 2
            )
            picks = [(0, i) for i in range(8)]
            err = bt.rel_err(torch, paged.rows_of(o, picks), paged.reference(torch, picks))
            ok("SDPA causal_lower_right == the reference", err < 1e-4, "error %.1e" % err)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)[0].permute(1, 0, 2)
            err = bt.rel_err(torch, paged.rows_of(o, picks), paged.reference(torch, picks))
            ok("SDPA is_causal (top-left) over a prefix is caught", err > TOL, "error %.1e" % err)
            _self_test_window_torch(torch, np, ok)
            ran, agrees = _try_sdpa_chunk(torch, paged)
            ok(
                (
                    "SDPA chunk call (flash backend) agrees"
                    if ran
                    else "SDPA chunk call: no flash kernel here (%s)" % agrees
                ),
                agrees is True or not ran,
            )
            if DEVICE == "cuda":
                _self_test_flashinfer(torch, ok, skipped)
        finally:
            DEVICE, bt.DEVICE = saved
    print(
        "%d passed, %d failed" % (passed[0], failed[0]) + (", %d skipped" % skipped[0] if skipped[0] else "")
    )
    return 1 if failed[0] else 0


def ch12_cases_from_source(path=None):
    """bench_ch12.cu's cases() as (name, b, hq, hkv, len, n_new, window, sinks) tuples, read
    from its source (the two lists must stay in step)."""
    import re

    path = path or os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_ch12.cu")
    with open(path) as f:
        text = f.read()
    body = text[text.index("std::vector<Case> cases()") :]
    body = body[: body.index("};")]
    pat = r'\{"([^"]+)",\s*(\d+),\s*(\d+),\s*(\d+),\s*([\d +]+),\s*(\d+),\s*(\d+),\s*(true|false)\}'
    out = []
    for m in re.finditer(pat, body):
        name, b, hq, hkv, length, n, w, sinks = m.groups()
        out.append((name, int(b), int(hq), int(hkv), sum(int(x) for x in length.split("+")), int(n), int(w), sinks == "true"))
    return out


def _self_test_window(ok):
    """Chapter 12's cases without torch: bench_ch12.cu's list, window_left, the bytes."""
    cases = window_cases()
    mine = [(c.name, c.b, c.hq, c.hkv, c.seq_lens[0], c.q_lens[0], c.window, c.sinks) for c in cases]
    try:
        theirs = ch12_cases_from_source()
    except OSError as e:
        theirs = str(e)
    ok("window cases are bench_ch12.cu's (names, shapes, order)", mine == theirs, "%d cases" % len(mine))
    ok("window cases are not in 'all'", not any(c.part == "window" for c in all_cases("all")))
    ok(
        "window_left = window - 1, -1 for full",
        [c.window_left for c in cases] == [-1, 1023, 1023, -1, 127, 127, 1023, 1023],
    )
    # by hand: a decode at position 32767 with window 1024 sees keys 31744..32767, blocks
    # 1984..2047 (64); window 128: keys 32640.. (block 2040, 8 blocks); the chunk's first row
    # (position 32768) sees 31745.. (block 1984 of 2176: 192 blocks); full: every block.
    ok("live blocks 64, 64, 2048, 8, 192", [cases[i].live_blocks() for i in (1, 2, 3, 4, 6)] == [64, 64, 2048, 8, 192])
    kv = lambda b, blocks: 2 * 2 * b * blocks * 16 * 8 * 128  # noqa: E731
    qo = lambda t: 2 * 2 * t * 32 * 128  # noqa: E731
    ok(
        "bytes as bench_ch12.cu (blocks the windows touch, plus q and out)",
        [c.bytes_moved() for c in cases]
        == [kv(32, 64) + qo(32), kv(32, 64) + qo(32), kv(32, 64) + qo(32), kv(32, 2048) + qo(32),
            kv(32, 8) + qo(32), kv(32, 8) + qo(32), kv(1, 192) + qo(2048), kv(1, 192) + qo(2048)],
        bt.g6(cases[1].bytes_moved()),
    )  # fmt: skip
    edge = WindowCase("edge", 1, 32, 1, 16, False, hq=2, hkv=1)  # position 31 sees 16..31: block 1
    wide = WindowCase("wide", 1, 20, 1, 64, False, hq=2, hkv=1)  # window wider than the sequence
    ok("window on a block edge; wider than the sequence", (edge.live_blocks(), wide.live_blocks()) == (1, 2))
    ok("sinks as bench_ch12.cu: 0.5 + 0.1 (h % 7)", cases[2].sink_values()[:8] == [0.5 + 0.1 * (h % 7) for h in range(8)])


def _self_test_window_torch(torch, np, ok):
    """The window pool and the window/sink reference (torch on the CPU is enough)."""
    case = WindowCase("tiny window sinks", 3, 70, 1, 20, True, hq=4, hkv=2, d=16)
    paged = WindowPaged(torch, case, copies=1)
    first = case.first_key() // PAGE
    ok("window pool: null page plus the touched pages", paged.num_pages == 1 + 3 * case.live_blocks())
    ok(
        "window table: the null page left of the window, a permutation after",
        all(int(x) == 0 for p in paged.pages for x in p[:first])
        and sorted(int(x) for p in paged.pages for x in p[first:]) == list(range(1, paged.num_pages)),
    )
    chunk = WindowCase("tiny chunk window", 1, 45, 9, 7, True, hq=4, hkv=1, d=16)
    for c in (case, chunk):
        pg = paged if c is case else WindowPaged(torch, c, copies=1)
        picks = [(b, i) for b in range(c.b) for i in range(c.q_lens[b])]
        ref = pg.reference(torch, picks).numpy()
        sinks = np.array(c.sink_values(), dtype=np.float64)
        err = 0.0
        for r, (b, i) in enumerate(picks):
            k = pg.dense(torch, pg.copies[0][0], b).double().numpy()
            v = pg.dense(torch, pg.copies[0][1], b).double().numpy()
            pos = c.seq_lens[b] - c.q_lens[b] + i
            lo = max(0, pos - c.window + 1)
            g = c.hq // c.hkv
            for h in range(c.hq):
                q = pg.q[c.qsl[b] + i, h].double().numpy()
                s = k[h // g, lo : pos + 1] @ q / math.sqrt(c.d)
                m = max(s.max(), sinks[h])
                p = np.exp(s - m)
                o = p @ v[h // g, lo : pos + 1] / (p.sum() + math.exp(sinks[h] - m))
                err = max(err, float(np.abs(o - ref[r, h]).max() / np.abs(o).max()))
        ok("%s: window/sink reference vs NumPy (float64)" % c.name, err < 1e-4, "error %.1e" % err)
        nosink = bt.rel_err(torch, pg.reference(torch, picks, sinks=None), pg.reference(torch, picks))
        ok("%s: dropping the sinks is caught" % c.name, nosink > TOL, "error %.1e" % nosink)
        wider = WindowPaged.__new__(WindowPaged)
        wider.__dict__.update(pg.__dict__)
        wider.case = WindowCase(c.name, c.b, c.seq_lens[0], c.q_lens[0], c.window + 1, c.sinks, c.hq, c.hkv, c.d)
        off = bt.rel_err(torch, wider.reference(torch, picks), pg.reference(torch, picks))
        ok("%s: a window one key too wide is caught" % c.name, off > TOL, "error %.1e" % off)


def _try_sdpa_chunk(torch, paged):
    """(ran, agrees): the flash SDPA chunk call on this device, against the reference."""
    try:
        out = sdpa_chunk(torch, paged, "flash")(0)
    except Exception as e:  # noqa: BLE001 - no flash backend or kernel for these inputs here
        return False, bt.first_line(e)[:80]
    err = bt.rel_err(torch, paged.rows_of(out, paged.picks()), paged.reference(torch, paged.picks()))
    return True, err < TOL


def _self_test_flashinfer(torch, ok, skipped):
    try:
        import flashinfer as fi
    except Exception as e:  # noqa: BLE001
        print("  skip FlashInfer on the GPU: %s" % bt.first_line(e))
        skipped[0] += 1
        return
    ws = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=DEVICE)
    for case, kind in (
        (Case("decode", "tiny ragged", 8, 2, [5, 37, 300, 16], [1] * 4), "decode"),
        (Case("prefill", "tiny mixed", 8, 2, [100, 9, 70], [40, 1, 70], kind="mixed"), "prefill"),
    ):
        paged = Paged(torch, case, copies=1)
        for tc in (False, True):
            plan, run = (
                fi_decode(fi, torch, paged, ws, tc)
                if kind == "decode"
                else fi_prefill(fi, torch, paged, ws, "fa2")
            )
            plan()
            out = run(0)
            torch.cuda.synchronize()
            try:
                err = check(torch, paged, out, "flashinfer")
                ok("FlashInfer %s %s" % (kind, "tensor cores" if tc else ""), True, "error %.1e" % err)
            except bt.WrongResult as e:
                ok("FlashInfer %s" % kind, False, str(e))
            if kind != "decode":
                break


# ----------------------------------------------------------------------------- main


def write_skipped(reason, csv_path, md_path):
    bt.write_skipped(reason, csv_path, md_path)
    if csv_path:
        with open(flops_csv_path(csv_path), "w") as f:
            f.write(FLOPS_CSV_HEADER + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--csv", default="", help="decode-like rows as CSV (bench_common.cu's columns); FILE-flops.csv beside"
    )
    ap.add_argument("--md", default="", help="all tables as Markdown")
    ap.add_argument(
        "--part",
        choices=["all", "decode", "prefill", "flex", "window"],
        default="all",
        help="which cases (a lent GPU limits one command's time: run the parts apart); all: "
        "bench_ch10's (decode, prefill, flex); window: bench_ch12's, apart",
    )
    ap.add_argument(
        "--no-fa3", action="store_true", help="window part: the prefill chunk on fa2 only (less JIT time)"
    )
    ap.add_argument(
        "--no-prebuild", action="store_true", help="let FlashInfer build each module at first use"
    )
    ap.add_argument("--self-test", action="store_true", help="check the logic, on any machine")
    ap.add_argument("--only", default="", help="TEXT[,TEXT...]: the cases whose names contain one (bench_ch10's)")
    args = ap.parse_args(argv)
    if args.self_test:
        return self_test()
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        write_skipped("torch is not importable (%s)" % bt.first_line(e), args.csv, args.md)
        return 0
    if not torch.cuda.is_available():
        write_skipped("CUDA is not available to torch %s" % torch.__version__, args.csv, args.md)
        return 0
    cases = all_cases(args.part)
    if args.only:
        cases = [c for c in cases if any(t in c.name for t in args.only.split(","))]
    try:
        import flashinfer as fi
    except Exception as e:  # noqa: BLE001 - not installed (tools/fetch_flashinfer.sh), or broken
        if args.part != "flex":
            write_skipped(
                "flashinfer is not importable (%s); tools/fetch_flashinfer.sh prepares it" % bt.first_line(e),
                args.csv,
                args.md,
            )
            return 0
        fi = None
    return run_benchmark(torch, fi, cases, args.csv, args.md, do_prebuild=not args.no_prebuild, fa3=not args.no_fa3)


if __name__ == "__main__":
    sys.exit(main())
