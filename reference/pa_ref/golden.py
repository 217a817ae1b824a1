"""Write golden cases: inputs and expected outputs that the C++ tests read.

    PYTHONPATH=reference python -m pa_ref.golden --out DIR [--chapter N ...]

Each case is a directory DIR/chNN/<case_name>/ holding one .npy file per array
(little-endian, C order) and a case.txt of `key value` lines (the value is the
rest of the line). A chapter directory is rebuilt from scratch on every run, so
a renamed case never leaves a stale one behind. DIR/golden.stamp is rewritten
last; a build system can use it as the output it waits for.

A chapter adds its cases by defining chapter_NN(out_dir) (chapter 1 here,
later ones in golden_chNN.py) and listing it in CHAPTERS at the bottom of this
file. golden_io.py holds the case writer and the TOLERANCES they share.
"""

import argparse
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .attention import decode_attention
from .dtypes import round_to
from .golden_ch02 import chapter_02
from .golden_ch03 import chapter_03
from .golden_ch04 import chapter_04
from .golden_ch06 import chapter_06
from .golden_ch07 import chapter_07
from .golden_ch08 import chapter_08
from .golden_ch10 import chapter_10
from .golden_ch11 import chapter_11
from .golden_ch12 import chapter_12
from .golden_io import TOLERANCES, case_seed, write_case
from .memory import GIB, KVConfig, dense_memory_report
from .trace import DEFAULT_NUM_REQUESTS, DEFAULT_SEED, synthetic_trace



# ---------------------------------------------------------------- chapter 1


@dataclass(frozen=True)
class AttentionCase:
    """One decode-attention case: shapes, lengths, dtype and what it is for."""

    name: str
    dtype: str
    head_size: int
    num_heads: int
    num_kv_heads: int
    max_seq_len: int
    context_lens: tuple
    note: str
    q_std: float = 1.0  # a large q makes large scores: it tests the softmax max-subtraction


# Every case is small: the CPU emulator runs one fiber per CUDA thread.
CH01_ATTENTION = [
    AttentionCase("decode_fp16_d64_g1_len1", "fp16", 64, 2, 2, 16, (1,),
                  "a single key: the output must equal that key's value row"),
    AttentionCase("decode_fp16_d64_g1_edges15_16_17", "fp16", 64, 2, 2, 32, (15, 16, 17),
                  "lengths around a 16-token block edge, plain multi-head"),
    AttentionCase("decode_fp16_d64_g2_odd", "fp16", 64, 4, 2, 40, (17, 33),
                  "odd lengths, two query heads per KV head"),
    AttentionCase("decode_fp16_d64_g4_mixed", "fp16", 64, 8, 2, 64, (0, 1, 33, 64),
                  "empty, single, odd and full (max_seq_len) sequences in one batch"),
    AttentionCase("decode_fp16_d64_g8_mixed", "fp16", 64, 16, 2, 48, (48, 7, 31),
                  "eight query heads per KV head, full and short sequences"),
    AttentionCase("decode_fp16_d64_all_empty", "fp16", 64, 4, 2, 16, (0, 0),
                  "every sequence empty: the whole output must be zeros"),
    AttentionCase("decode_fp16_d128_g1_full", "fp16", 128, 4, 4, 160, (160,),
                  "one sequence exactly max_seq_len long, plain multi-head"),
    AttentionCase("decode_fp16_d128_g2_edges31_32_33", "fp16", 128, 4, 2, 48, (31, 32, 33, 0),
                  "lengths around a 32-token edge, and one empty sequence"),
    AttentionCase("decode_fp16_d128_g4_mixed", "fp16", 128, 8, 2, 96, (95, 96, 1),
                  "max_seq_len - 1, max_seq_len and 1"),
    AttentionCase("decode_fp16_d128_mqa", "fp16", 128, 8, 1, 64, (64, 17),
                  "multi-query attention: all eight query heads share one KV head"),
    AttentionCase("decode_fp16_d128_large_scores", "fp16", 128, 4, 2, 64, (64, 37),
                  "q ~ N(0, 32^2): scores near +-100 overflow exp() unless the max is subtracted",
                  q_std=32.0),
    AttentionCase("decode_fp16_d80_g2", "fp16", 80, 4, 2, 40, (37, 1),
                  "head size 80, not a power of two"),
    AttentionCase("decode_bf16_d64_g1", "bf16", 64, 2, 2, 32, (17, 1),
                  "bf16, plain multi-head"),
    AttentionCase("decode_bf16_d64_g4_mixed", "bf16", 64, 8, 2, 80, (0, 80, 49),
                  "bf16, empty, full and odd sequences"),
    AttentionCase("decode_bf16_d128_g2_mixed", "bf16", 128, 4, 2, 160, (160, 129, 15, 16),
                  "bf16, four sequences from max_seq_len down to a 16-token edge"),
    AttentionCase("decode_bf16_d128_g8", "bf16", 128, 16, 2, 64, (33, 63),
                  "bf16, eight query heads per KV head"),
    AttentionCase("decode_bf16_d256_g4", "bf16", 256, 8, 2, 48, (47, 16),
                  "bf16, head size 256"),
    AttentionCase("decode_fp32_d128_g2", "fp32", 128, 4, 2, 64, (64, 33),
                  "fp32 storage: the tight tolerance checks the arithmetic itself"),
]


def attention_arrays(case):
    """Draw the inputs of an attention case and compute its expected output."""
    rng = np.random.default_rng(case_seed(case.name))
    batch = len(case.context_lens)
    q_shape = (batch, case.num_heads, case.head_size)
    kv_shape = (batch, case.max_seq_len, case.num_kv_heads, case.head_size)
    # N(0,1) draws, rounded to the storage dtype so float32 holds them exactly.
    q = round_to(case.q_std * rng.standard_normal(q_shape), case.dtype)
    k_cache = round_to(rng.standard_normal(kv_shape), case.dtype)
    v_cache = round_to(rng.standard_normal(kv_shape), case.dtype)
    context_lens = np.array(case.context_lens, dtype=np.int32)
    # Poison every position a kernel must not read: NaN spreads into any sum it touches.
    for b, n in enumerate(context_lens):
        k_cache[b, n:] = np.nan
        v_cache[b, n:] = np.nan
    scale = 1.0 / np.sqrt(case.head_size)
    expected = decode_attention(q, k_cache, v_cache, context_lens, scale)
    return {
        "q": q.astype(np.float32),
        "k_cache": k_cache.astype(np.float32),
        "v_cache": v_cache.astype(np.float32),
        "context_lens": context_lens,
        "scale": np.array(scale, dtype=np.float64),
        "expected": expected,
    }


def attention_params(case):
    """The case.txt lines of an attention case."""
    atol, rtol = TOLERANCES[case.dtype]
    return {
        "kind": "decode_attention",
        "dtype": case.dtype,
        "batch": len(case.context_lens),
        "num_heads": case.num_heads,
        "num_kv_heads": case.num_kv_heads,
        "head_size": case.head_size,
        "max_seq_len": case.max_seq_len,
        "context_lens": ",".join(str(n) for n in case.context_lens),
        "seed": case_seed(case.name),
        "atol": atol,
        "rtol": rtol,
        "note": case.note,
    }


def write_trace_case(case_dir, cfg=KVConfig(), budget_bytes=16 * GIB):
    """The default synthetic trace and its dense-cache memory report."""
    prompt_lens, output_lens = synthetic_trace(DEFAULT_SEED, DEFAULT_NUM_REQUESTS)
    report = dense_memory_report(prompt_lens, output_lens, cfg, budget_bytes)
    arrays = {
        "prompt_lens": prompt_lens.astype(np.int32),
        "output_lens": output_lens.astype(np.int32),
        "waste_fraction": np.array(report["waste_fraction"], dtype=np.float64),
    }
    for key in ("reserved_bytes", "used_bytes", "dense_seqs_in_budget", "ideal_seqs_in_budget"):
        arrays[key] = np.array(report[key], dtype=np.int64)
    params = {
        "kind": "trace",
        "seed": DEFAULT_SEED,
        "num_requests": DEFAULT_NUM_REQUESTS,
        "num_layers": cfg.num_layers,
        "num_kv_heads": cfg.num_kv_heads,
        "head_size": cfg.head_size,
        "dtype_bytes": cfg.dtype_bytes,
        "max_seq_len": cfg.max_seq_len,
        "bytes_per_token": cfg.bytes_per_token,
        "budget_bytes": budget_bytes,
        "note": "splitmix64 trace (prompt 32..1024, output 16..512) and its dense-cache memory report",
    }
    write_case(case_dir, arrays, params)


def chapter_01(out_dir):
    """Chapter 1: dense decode attention, and the trace behind the memory argument."""
    for case in CH01_ATTENTION:
        write_case(out_dir / case.name, attention_arrays(case), attention_params(case))
    write_trace_case(out_dir / "trace_default")


# Chapter number -> function that writes that chapter's cases into a directory.
CHAPTERS = {
    1: chapter_01,
    2: chapter_02,
    3: chapter_03,
    4: chapter_04,  # chapters 4 and 5 (v1 and v2 paged decode) share these cases
    6: chapter_06,  # fp8 e4m3 KV cache
    7: chapter_07,  # copy-on-write
    8: chapter_08,  # prefill attention over paged KV (the serving loop)
    10: chapter_10,  # varlen paged attention over a ragged batch
    11: chapter_11,  # the latent KV cache of MLA and its absorbed decode
    12: chapter_12,  # hybrid models: the blocks a sliding window still needs
}


def write_chapter(out_root, number):
    """Write chapter `number` into out_root/chNN, replacing what was there."""
    final = out_root / f"ch{number:02d}"
    staging = out_root / f".ch{number:02d}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    CHAPTERS[number](staging)
    # Swap in the finished directory only once every case has been written.
    shutil.rmtree(final, ignore_errors=True)
    staging.rename(final)
    return sorted(p.name for p in final.iterdir() if p.is_dir())


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m pa_ref.golden", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="root directory of the golden cases")
    parser.add_argument("--chapter", type=int, action="append", choices=sorted(CHAPTERS),
                        help="chapter to write (repeatable; default: every chapter)")
    args = parser.parse_args(argv)

    args.out.mkdir(parents=True, exist_ok=True)
    chapters = sorted(set(args.chapter or CHAPTERS))
    for number in chapters:
        names = write_chapter(args.out, number)
        print(f"golden: ch{number:02d}: {len(names)} cases in {args.out / f'ch{number:02d}'}")
    (args.out / "golden.stamp").write_text("".join(f"ch{n:02d}\n" for n in chapters))
    return 0


if __name__ == "__main__":
    sys.exit(main())
