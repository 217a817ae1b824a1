#!/usr/bin/env python3
"""A measured number the book types must be in the file it names.

The book's measured numbers come from generated includes (bench/results/*.md, the outputs
under book/src/generated/ and book/src/recorded/) or are typed in prose that names the
file they come from. This check reads every paragraph of book/src/*.md that names such a
file (bench/results/..., NOTES.md, or the source of a benchmark or of the reference,
bench/*.h|cu|cpp|py or reference/pa_ref/*.py, for what its comments state; a comment
<!-- source: ... --> names a file too) and finds each of its measured numbers there: a
number followed by a unit (us, µs, ms, %, TB/s, GB/s, TFLOP/s, x, ×, and "times": a ratio
is measured whether it is written 2.43× or 2.43 times), both ends of a range ("57.7–60.4%",
"from 102 to 71 µs"), every number of a list that ends in one ("1.18, 1.14 and 1.07
times"), unless it is a target or a bound ("at least 90%", "at most 7 µs").
Arithmetic is not a measurement (`35 % 16`, `32 × 8`).
A source comment that quotes part of the titles of NOTES.md entries narrows the search to
those entries (a quoted title that no entry has is an error):

    <!-- source: bench/results/ch10-ladder-3.md, NOTES.md "ch10 v5: short decode tiles" -->

Thousands separators are ignored. A number worked out rather than copied (a ratio, a
difference), a prediction, or someone else's claim says so in the prose and in an HTML
comment in the same paragraph:

    <!-- derived: 1.01 = 16,089 / 15,886 -->
    <!-- predicted: 55–61 (NOTES.md, written before the run) -->
    <!-- claimed: 60–80 (the seed material) -->

    python3 tools/check_book_numbers.py               # make test runs it
    python3 tools/check_book_numbers.py --todo [--all]

--todo (run it after make book, whose generated includes it reads) lists the measured
numbers of the chapter pages (--all: of every page) that name no source: neither a file
in their paragraph nor one their section includes, nor a comment above. It fails when the
list is not empty.
"""
from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = re.compile(r"(bench/results/[\w./-]+\.(?:md|csv)|bench/[\w-]+\.(?:h|cu|cpp|py)|reference/pa_ref/\w+\.py|NOTES\.md)")
# A number with its unit. An operator between two numbers is not a unit: `35 % 16`, `32 × 8`
# and `16 × 16` are arithmetic and shapes, not a percentage or a ratio.
# A range ("57.7–60.4%") is two measured numbers.
NUM = r"\d(?:[\d,]*\d)?(?:\.\d+)?"
# "From 102 to 71 µs" is two measured numbers too. A ratio is measured whether it is written
# "2.43×" or "2.43 times" (as fast, slower, fp16): "times" is a unit.
MEASURED = re.compile(rf"(?<![\w.,])({NUM})(?:(?:\s?[–-]\s?|\sto\s)({NUM}))?"
                      r"(?=\s?(?:µs|us\b|ms\b|%|TB/s|GB/s|TFLOP/s|×|x\b|times\b)(?!\s*\d))")
# The numbers of a list that ends in a measured one share its unit: "1.18, 1.14 and 1.07
# times", "498 / 354 / 356 µs" (a shape, 32/8/32/4096, has no spaces: it is no list).
LISTED = re.compile(rf"(?<![\w.,/])({NUM})(?:,\s|\s/\s|,?\s(?:and|or)\s)$")
# A number the page works out, or one it reports as a prediction or as someone's claim
# rather than a measurement, says so in a comment of its paragraph (the prose says so too):
#     <!-- derived: 1.01 = 16,089 / 15,886 -->   <!-- predicted: 55–61 (NOTES.md, before the run) -->
DERIVED = re.compile(r"<!--\s*(?:derived|predicted|claimed):(.*?)-->", re.S)
# A target or a bound ("at least 90%", "at most 7 us", "below 61%") is not a measurement.
BOUND = re.compile(r"(at least|at most|up to|within|under|below|above|over|≥|≤|>=|<=)\s*$", re.I)
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def plain(number: str) -> str:
    return number.replace(",", "")


def found_in(n: str, body: str) -> bool:
    """n stands in body as a number of its own (97 in "97.4%" or 1.25 in "1.25x", not 100
    in "H100" nor 80 in "80GB")."""
    return re.search(rf"(?<![\dA-Za-wyz_.]){re.escape(n)}(?![\dA-Za-wyz_])", body) is not None


def marked(para: str) -> set[str]:
    """The numbers a paragraph's derived/predicted/claimed comments account for."""
    return {plain(n) for d in DERIVED.findall(para) for n in re.findall(NUM, d)}


def numbers(m: re.Match) -> list[str]:
    """The measured numbers of one MEASURED match: one, or both ends of a range, and before
    them the numbers of the list it ends."""
    out = [plain(g) for g in m.groups() if g]
    before = m.string[:m.start()]
    while item := LISTED.search(before):
        out.insert(0, plain(item.group(1)))
        before = before[:item.start()]
    return out


# A source comment may name entries of NOTES.md by a quoted part of their titles:
#     <!-- source: NOTES.md "ch10 v5: short decode tiles", "ch10 v5.3" -->
# and then the paragraph's numbers are looked for in those entries only, not anywhere in
# the notebook.
SOURCE_COMMENT = re.compile(r"<!--\s*source:(.*?)-->", re.S)


def notes_entries(para: str, notes: str) -> tuple[str | None, list[str]]:
    """The NOTES.md entries a paragraph's source comments name (None: it names none), and
    the quoted titles that match no entry."""
    titles = {" ".join(t.split()) for c in SOURCE_COMMENT.findall(para) if "NOTES.md" in c
              for t in re.findall(r'"([^"]+)"', c)}
    if not titles:
        return None, []
    sections = re.split(r"\n(?=## )", notes)
    head = [" ".join(sec.split("\n", 1)[0].split()) for sec in sections]
    chosen = [sec for sec, h in zip(sections, head) if any(t in h for t in titles)]
    return "\n".join(chosen), sorted(t for t in titles if not any(t in h for h in head))


def shown(f: Path) -> str:
    """The text of a file that a number may be found in: of an SVG figure, its labels
    (matplotlib keeps each label's text in a comment beside its glyphs), not its
    coordinates; of a benchmark's source, its comments, not its arithmetic."""
    text = f.read_text()
    if f.suffix == ".svg":
        labels = re.findall(r"<!--(.*?)-->|<(?:text|title|desc)\b[^>]*>(.*?)</", text, re.S)
        return "\n".join(a or b for a, b in labels)
    if f.suffix in (".h", ".cu", ".cpp", ".py"):  # a setting a benchmark states in its comments
        return "\n".join(re.findall(r"(?://|#)(.*)$", text, re.M))
    return text


GPU = re.compile(r"\bH(?:100|200)\b")
COMMENT = re.compile(r"<!--.*?-->", re.S)


def gpus_of(path: Path) -> set[str]:
    """The GPU(s) a results file was measured on: a CSV's device column, else the -h100 /
    -h200 of its name, else the GPUs its first three lines name. Empty: not known (NOTES.md,
    a benchmark's source, a figure)."""
    if not path.is_file() or "bench/results" not in str(path):
        return set()
    if path.suffix == ".csv":
        with open(path, newline="") as f:
            return {m for row in csv.DictReader(f) for m in GPU.findall(row.get("device") or "")}
    named = set(GPU.findall(path.stem.upper().replace("-", " ")))
    if named:
        return named
    return set(GPU.findall("\n".join(path.read_text().splitlines()[:3])))


def gpu_problems(page: str, line: int, para: str, heading: str, before: str, sources: list[str],
                 measured: int) -> list[str]:
    """A paragraph that quotes measured numbers from a results file says which GPU ran it:
    the file's GPU is named in the paragraph's prose (comments do not count) or in the
    heading of its section ("## The ladder, on the H100"); a table's, in the paragraph
    that introduces it (`before`) too. And a table draws on the files of one GPU only:
    two GPUs' numbers make two tables."""
    prose = COMMENT.sub("", para)
    table = prose.lstrip().startswith("|")
    out = []
    if table:
        # One table, one GPU: each GPU has its own read ceiling and speed, and a reader
        # compares a table's rows as if they were one run.
        known = {s: gpus_of(ROOT / s) for s in sources}
        every = set().union(*known.values()) if known else set()
        if len(every) > 1:
            out.append(f"{page}:{line}: a table of numbers from "
                       + ", ".join(f"{s} ({' and '.join(sorted(g))})" for s, g in known.items() if g)
                       + f" mixes the {' and the '.join(sorted(every))}: make one table per GPU, "
                       "each beside a sentence that names its GPU and its file")
    if measured == 0:
        return out
    if table:
        prose += "\n" + COMMENT.sub("", before)
    said = set(GPU.findall(prose + "\n" + heading))
    for s in sources:
        g = gpus_of(ROOT / s)
        if g and not g & said:
            out.append(f"{page}:{line}: quotes measured numbers from {s}, measured on the "
                       f"{' and '.join(sorted(g))}, but does not name that GPU"
                       + (f" (it names the {' and '.join(sorted(said))})" if said else ""))
    return out


def problems() -> tuple[int, list[str]]:
    found, bad = 0, []
    for page in sorted((ROOT / "book" / "src").glob("*.md")):
        text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), page.read_text())
        offset = 0
        heading = previous = ""
        for para in re.split(r"(\n\s*\n)", text):
            line = text.count("\n", 0, offset) + 1
            offset += len(para)
            if not para.strip():
                continue
            intro, previous = previous, para
            for h in re.findall(r"^#{2,4} .*$", para, re.M):
                heading = h
            sources = sorted(set(SOURCE.findall(para)))
            if not sources:
                continue
            body = ""
            for s in sources:
                path = ROOT / s
                if path.is_file():
                    text_of = shown(path)
                    if s == "NOTES.md":
                        entries, missing = notes_entries(para, text_of)
                        for t in missing:
                            bad.append(f'{page.name}:{line}: names NOTES.md "{t}", which no entry\'s title has')
                        text_of = text_of if entries is None else entries
                    body += text_of
                else:
                    bad.append(f"{page.name}:{line}: names {s}, which does not exist")
            body = plain(body)
            derived = marked(para)
            prose = DERIVED.sub("", para)
            counted = found
            for m in MEASURED.finditer(prose):
                if BOUND.search(prose[max(0, m.start() - 12):m.start()]):
                    continue
                for n in numbers(m):
                    found += 1
                    if found_in(n, body) or n in derived:
                        continue
                    at = line + prose.count("\n", 0, m.start())
                    bad.append(f"{page.name}:{at}: {n} (in '{m.group(0)}') is in none of {', '.join(sources)} "
                               f"(copy it from there, or say how it is derived: <!-- derived: ... -->)")
            bad += gpu_problems(page.name, line, para, heading, intro, sources, found - counted)
    return found, bad


# What a section includes: results files, and the outputs and figures the build generates
# or a run recorded (book/src/generated/, book/src/recorded/).
INCLUDE = re.compile(r"\{\{#include (\.\./\.\./bench/results/[\w./-]+\.md|(?:generated|recorded)/[\w./-]+)"
                     r"|!\[[^\]]*\]\(((?:generated|recorded)/[\w./-]+)\)")


def worklist(every_page: bool = False) -> list[str]:
    """--todo: measured numbers in paragraphs that name no file, against the files their
    section includes (if any): what is left to source (not a failure yet). A generated
    include counts once `make book` has generated it."""
    out = []
    src = ROOT / "book" / "src"
    for page in sorted(src.glob("*.md" if every_page else "ch*.md")):
        for sec in re.split(r"\n(?=## )", page.read_text()):
            incs = sorted({(src / f).resolve() for pair in INCLUDE.findall(sec) for f in pair if f})
            names = [str(f.relative_to(ROOT)) for f in incs]
            for f in incs:
                if not f.is_file():
                    out.append(f"{page.name}: includes {f.relative_to(ROOT)}, which is not there "
                               "(generated/: run make book first)")
            body = plain("".join(shown(f) for f in incs if f.is_file()))
            for para in re.split(r"\n\s*\n", FENCE.sub("", sec)):
                if SOURCE.search(para):
                    continue
                derived = marked(para)
                prose = DERIVED.sub("", para)
                for m in MEASURED.finditer(prose):
                    if BOUND.search(prose[max(0, m.start() - 12):m.start()]):
                        continue
                    for n in numbers(m):
                        if n in derived or found_in(n, body):
                            continue
                        out.append(f"{page.name}: {n} ({', '.join(names) or 'no results file in the section'}): "
                                   + prose[max(0, m.start() - 50):m.end() + 10].replace("\n", " "))
    return out


def main() -> int:
    if "--todo" in sys.argv[1:]:
        todo = worklist("--all" in sys.argv[1:])
        if todo:
            print("\n".join(todo))
        print(f"check_book_numbers --todo: {len(todo)} measured numbers with no named source yet")
        # The chapters' list is empty (issue 27): a new number without a source fails.
        # Run it after make book, which generates the includes it reads.
        return 1 if todo else 0
    found, bad = problems()
    for b in bad:
        print(b)
    print(f"check_book_numbers: {found} measured numbers in paragraphs that name their file, "
          f"{len(bad)} not found there")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
