#!/usr/bin/env python3
"""A measured number the book types must be in the file it names.

The book's measured numbers come from generated includes (bench/results/*.md) or are typed
in prose that names the results file they come from. This check reads every paragraph of
book/src/*.md that names such a file (bench/results/..., NOTES.md) and finds each of its
measured numbers there: a number followed by a unit (us, µs, ms, %, TB/s, GB/s, TFLOP/s, x,
×), unless it is a target or a bound ("at least 90%", "at most 7 µs"). Thousands separators
are ignored. A number worked out from the file rather than copied (a ratio, a difference)
says how, in an HTML comment in the same paragraph:

    <!-- derived: 1.01 = 16,089 / 15,886 -->

    python3 tools/check_book_numbers.py          # make test runs it
    python3 tools/check_book_numbers.py --todo   # the numbers that name no source yet
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = re.compile(r"(bench/results/[\w./-]+\.(?:md|csv)|NOTES\.md)")
MEASURED = re.compile(r"(?<![\w.,])(\d[\d,]*(?:\.\d+)?)(?=\s?(?:µs|us\b|ms\b|%|TB/s|GB/s|TFLOP/s|×|x\b))")
DERIVED = re.compile(r"<!--\s*derived:(.*?)-->", re.S)
# A target or a bound ("at least 90%", "at most 7 us", "below 61%") is not a measurement.
BOUND = re.compile(r"(at least|at most|up to|within|under|below|above|over|≥|≤|>=|<=)\s*$", re.I)
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def plain(number: str) -> str:
    return number.replace(",", "")


def problems() -> tuple[int, list[str]]:
    found, bad = 0, []
    for page in sorted((ROOT / "book" / "src").glob("*.md")):
        text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), page.read_text())
        offset = 0
        for para in re.split(r"(\n\s*\n)", text):
            line = text.count("\n", 0, offset) + 1
            offset += len(para)
            sources = sorted(set(SOURCE.findall(para)))
            if not sources:
                continue
            body = ""
            for s in sources:
                path = ROOT / s
                if path.is_file():
                    body += path.read_text()
                else:
                    bad.append(f"{page.name}:{line}: names {s}, which does not exist")
            body = plain(body)
            derived = " ".join(plain(d) for d in DERIVED.findall(para))
            prose = DERIVED.sub("", para)
            for m in MEASURED.finditer(prose):
                if BOUND.search(prose[max(0, m.start() - 12):m.start()]):
                    continue
                found += 1
                n = plain(m.group(1))
                if re.search(rf"(?<![\d.]){re.escape(n)}(?![\d])", body) or n in derived.split():
                    continue
                at = line + prose.count("\n", 0, m.start())
                bad.append(f"{page.name}:{at}: {m.group(0)} is in none of {', '.join(sources)} "
                           f"(copy it from there, or say how it is derived: <!-- derived: ... -->)")
    return found, bad


INCLUDE = re.compile(r"\{\{#include \.\./\.\./(bench/results/[\w./-]+\.md)")


def worklist() -> list[str]:
    """--todo: measured numbers in paragraphs that name no file, against the results files
    their section includes (if any): what is left to source (not a failure yet)."""
    out = []
    for page in sorted((ROOT / "book" / "src").glob("ch*.md")):
        for sec in re.split(r"\n(?=## )", page.read_text()):
            incs = sorted(set(INCLUDE.findall(sec)))
            body = plain("".join((ROOT / f).read_text() for f in incs if (ROOT / f).is_file()))
            for para in re.split(r"\n\s*\n", FENCE.sub("", sec)):
                if SOURCE.search(para) or DERIVED.search(para):
                    continue
                for m in MEASURED.finditer(para):
                    n = plain(m.group(1))
                    if BOUND.search(para[max(0, m.start() - 12):m.start()]):
                        continue
                    if incs and re.search(rf"(?<![\d.]){re.escape(n)}(?![\d])", body):
                        continue
                    out.append(f"{page.name}: {m.group(0)} ({', '.join(incs) or 'no results file in the section'}): "
                               + para[max(0, m.start() - 50):m.end() + 10].replace("\n", " "))
    return out


def main() -> int:
    if "--todo" in sys.argv[1:]:
        todo = worklist()
        print("\n".join(todo))
        print(f"check_book_numbers --todo: {len(todo)} measured numbers with no named source yet")
        return 0
    found, bad = problems()
    for b in bad:
        print(b)
    print(f"check_book_numbers: {found} measured numbers in paragraphs that name their file, "
          f"{len(bad)} not found there")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
