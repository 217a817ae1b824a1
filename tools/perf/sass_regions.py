#!/usr/bin/env python3
"""Counts a kernel's SASS instructions between markers, by opcode (NOTES.md, session 54).

Put `asm volatile("nanosleep.u32 N;");` markers into a COPY of the tree (each N distinct),
compile one file to a cubin for sm_90, disassemble it, and give this script the listing:

    nvcc -std=c++17 -O3 -arch=sm_90 -Iinclude $(for d in solutions/*/; do echo -n "-I $d "; done) \\
        -cubin -o k.cubin solutions/10-varlen-attention/varlen_attention.cu
    nvdisasm -c k.cubin > k.sass          # nvdisasm: CUDA's, or PyPI's nvidia-cuda-nvdisasm
    python3 tools/perf/sass_regions.py k.sass 'varlen_kernelI6__halfS2_Li128' 1111 2222

prints the instructions from the marker `NANOSLEEP 1111` to `NANOSLEEP 2222` of the first
function whose mangled name contains the pattern: their number and a histogram by opcode.
Static counts: a region that the compiler unrolled into straight-line code (no branch inside)
runs as many instructions as it holds; where it branches, read the listing (--list).
"""
from __future__ import annotations

import argparse
import collections
import re
import sys


def function_body(path: str, pattern: str) -> list[str]:
    """The instructions of the first function whose section name contains `pattern`
    (labels kept as 'LABEL .L_x_N' lines)."""
    body: list[str] = []
    inside = False
    for line in open(path, encoding="utf-8", errors="replace"):
        section = re.match(r"\s*\.text\.(\S+):", line)
        if section:
            if inside:
                break
            inside = pattern in section.group(1)
            continue
        if not inside:
            continue
        label = re.match(r"\s*(\.L_x_\d+):", line)
        if label:
            body.append("LABEL " + label.group(1))
            continue
        ins = re.search(r"/\*[0-9a-f]{4,}\*/\s+(.*?);", line)
        if ins:
            body.append(ins.group(1).strip())
    return body


def opcode(ins: str) -> str:
    return re.sub(r"^@!?U?P\w+\s+", "", ins).split()[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sass", help="nvdisasm -c output")
    ap.add_argument("function", help="a part of the function's mangled name")
    ap.add_argument("start", type=int, help="the first marker's number (nanosleep.u32 N)")
    ap.add_argument("end", type=int, help="the second marker's number")
    ap.add_argument("--list", action="store_true", help="print the region's instructions too")
    args = ap.parse_args()
    body = function_body(args.sass, args.function)
    if not body:
        sys.exit(f"sass_regions: no function matching {args.function!r} in {args.sass}")
    marks = {int(m.group(1), 16): i for i, s in enumerate(body)
             if (m := re.match(r"NANOSLEEP 0x([0-9a-f]+)", s))}
    for n in (args.start, args.end):
        if n not in marks:
            sys.exit(f"sass_regions: no marker {n} in that function (found: {sorted(marks)})")
    region = [s for s in body[marks[args.start] + 1:marks[args.end]] if not s.startswith("LABEL")]
    if args.list:
        print("\n".join(body[marks[args.start]:marks[args.end] + 1]))
    counts = collections.Counter(opcode(s) for s in region)
    print(f"{len(region)} instructions between markers {args.start} and {args.end} "
          f"(lines {marks[args.start]} to {marks[args.end]} of the function)")
    for op, n in counts.most_common():
        print(f"  {n:5d}  {op}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
