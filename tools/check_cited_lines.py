#!/usr/bin/env python3
"""Recorded outputs that cite source lines must still point at them.

The book shows outputs recorded on a GPU (book/src/recorded/: compute-sanitizer reports,
for example) and the emulator's reports of the planted bugs (book/src/recorded/mutants/, the
lines of the source with that mutant applied) that name `file:line`, and pages that quote them. Those recordings are not
remade by `make book`, so an edit that moves the cited line would leave the book pointing
at the wrong code. Each citation keeps the text its line had when it was recorded, in
book/src/recorded/cited_lines.tsv; this check fails when a cited line's text has changed,
and says where that text is now.

    python3 tools/check_cited_lines.py            # check (make test runs it)
    python3 tools/check_cited_lines.py --update   # keep the current text of every citation:
                                                  # only right after re-recording the outputs
    python3 tools/check_cited_lines.py --follow   # a cited line that only moved: renumber the
                                                  # citation (the same line of code, a new number)

A citation is `NAME.ext:LINE` (.cu, .cuh, .cpp, .h) whose NAME.ext is one file of the
repository (names that are no file here, such as an example's my_kernel.cu, are not
citations). A bare `:LINE` in the same line continues the citation before it. In a table
row whose first cell names a mutant of tests/mutants/, the lines are those of the source
with that mutant applied.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_mutants  # noqa: E402  (the mutant file parser)

BOOK = ROOT / "book" / "src"
REGISTRY = BOOK / "recorded" / "cited_lines.tsv"
CITATION = re.compile(r"(?<![\w/.-])(?:[\w./-]*/)?([\w-]+\.(?:cuh|cu|cpp|h)):(\d+)|(?<![\w.])`:(\d+)`")
SOURCE_DIRS = ("solutions", "include", "emu", "demo", "tests", "tools", "bench")


def repo_files() -> dict[str, list[str]]:
    """Basename -> repository paths, from git's view of the sources."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", *SOURCE_DIRS],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    names: dict[str, list[str]] = {}
    for path in out:
        names.setdefault(Path(path).name, []).append(path)
    return names


def pages() -> list[Path]:
    return (sorted(BOOK.glob("*.md")) + sorted(p for p in (BOOK / "recorded").glob("*") if p.suffix in (".md", ".txt"))
            + sorted((BOOK / "recorded" / "mutants").glob("mutant-*.txt")))


def mutant_of_page(page: Path) -> str:
    """A planted bug's recorded output (recorded/mutants/mutant-NAME.txt) cites the source with
    that mutant applied."""
    name = page.stem.removeprefix("mutant-")
    if page.parent.name == "mutants" and (ROOT / "tests" / "mutants" / f"{name}.mutant").is_file():
        return name
    return ""


def mutant_of_row(line: str) -> str | None:
    """The mutant a table row is about: its first cell names a file of tests/mutants/."""
    if not line.startswith("|"):
        return None
    first = line.strip("|").split("|")[0].strip().strip("`")
    return first if (ROOT / "tests" / "mutants" / f"{first}.mutant").is_file() else None


def citations() -> list[tuple[str, int, str, str, int | None]]:
    """(page, page line, source path, mutant or "", cited line) for every citation."""
    names = repo_files()
    found = []
    for page in pages():
        rel = str(page.relative_to(ROOT))
        page_mutant = mutant_of_page(page)
        for lineno, text in enumerate(page.read_text().splitlines(), 1):
            mutant = mutant_of_row(text) or page_mutant
            last = None
            for m in CITATION.finditer(text):
                if m.group(3):  # `:N`, continuing the citation before it
                    if last:
                        found.append((rel, lineno, last, mutant, int(m.group(3))))
                    continue
                if "{{#include" in text[max(0, m.start() - 40):m.start()]:
                    continue  # an mdBook include's line range, not a citation
                written = m.group(0).rsplit(":", 1)[0].lstrip("./")
                paths = [p for p in names.get(m.group(1), []) if p.endswith(written)] or names.get(m.group(1), [])
                if len(paths) != 1:
                    last = None  # not one file of the repository: no citation
                    continue
                last = paths[0]
                found.append((rel, lineno, last, mutant, int(m.group(2))))
    return found


def source_lines(path: str, mutant: str) -> list[str]:
    text = (ROOT / path).read_text()
    if mutant:
        spec = run_mutants.parse_mutant(ROOT / "tests" / "mutants" / f"{mutant}.mutant")
        if spec["file"] == path and text.count(spec["find"]) == 1:
            text = text.replace(spec["find"], spec["replace"])
    return text.splitlines()


def key(path: str, mutant: str, line: int) -> str:
    return f"{path}:{line}" + (f" [{mutant}]" if mutant else "")


def read_registry() -> dict[str, str]:
    kept = {}
    if REGISTRY.exists():
        for row in REGISTRY.read_text().splitlines():
            if row and not row.startswith("#"):
                k, _, text = row.partition("\t")
                kept[k] = text
    return kept


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--update", action="store_true", help="keep the current text of every citation")
    ap.add_argument("--follow", action="store_true",
                    help="where a cited line only moved (its kept text is now at exactly one other line), "
                         "rewrite the citation's number in the page or recording")
    args = ap.parse_args()
    cites = citations()
    if args.follow:
        kept, edits = read_registry(), {}
        for page, at, path, mutant, line in cites:
            k = key(path, mutant, line)
            lines = source_lines(path, mutant)
            if k not in kept or (0 < line <= len(lines) and lines[line - 1].strip() == kept[k]):
                continue
            moved = [i + 1 for i, t in enumerate(lines) if t.strip() == kept[k]]
            if len(moved) == 1:
                edits.setdefault(page, {}).setdefault(at, []).append((Path(path).name, line, moved[0]))
        for page, by_line in edits.items():
            text = (ROOT / page).read_text().split("\n")
            for at, moves in by_line.items():
                for name, old, new in moves:
                    text[at - 1] = re.sub(rf"({re.escape(name)}:){old}(?!\d)", rf"\g<1>{new}", text[at - 1])
                    text[at - 1] = text[at - 1].replace(f"`:{old}`", f"`:{new}`")
                    print(f"{page}:{at}: {name}:{old} -> {new}")
            (ROOT / page).write_text("\n".join(text))
        kept_new = dict(kept)
        for page, by_line in edits.items():
            for moves in by_line.values():
                for name, old, new in moves:
                    for k in [k for k in kept if k.split(" [")[0].endswith(f"/{name}:{old}")]:
                        kept_new[k.replace(f"{name}:{old}", f"{name}:{new}")] = kept[k]
                        kept_new.pop(k, None)
        write_registry(kept_new)
        return main_check()
    if args.update:
        rows = {}
        for _, _, path, mutant, line in cites:
            lines = source_lines(path, mutant)
            rows[key(path, mutant, line)] = lines[line - 1].strip() if 0 < line <= len(lines) else ""
        write_registry(rows)
        print(f"check_cited_lines: kept the text of {len(rows)} cited lines in {REGISTRY.relative_to(ROOT)}")
        return 0
    return main_check()


def write_registry(rows: dict[str, str]) -> None:
    REGISTRY.write_text("# file:line [mutant]<TAB>the line's text when the output citing it was recorded\n"
                        "# (tools/check_cited_lines.py; --update only right after re-recording)\n" +
                        "".join(f"{k}\t{v}\n" for k, v in sorted(rows.items())))


def main_check() -> int:
    cites = citations()
    kept = read_registry()
    problems = []
    for page, at, path, mutant, line in cites:
        k = key(path, mutant, line)
        lines = source_lines(path, mutant)
        now = lines[line - 1].strip() if 0 < line <= len(lines) else "(past the end of the file)"
        if k not in kept:
            problems.append(f"{page}:{at} cites {k}, whose text was never kept: re-record the output, then "
                            f"run tools/check_cited_lines.py --update (the line is now: {now})")
        elif kept[k] != now:
            moved = [i + 1 for i, t in enumerate(lines) if t.strip() == kept[k]]
            where = f"that text is now at line {', '.join(map(str, moved))}" if moved else "that text is gone"
            problems.append(f"{page}:{at} cites {k}, which held `{kept[k]}` when recorded; the line now reads "
                            f"`{now}` ({where}). Re-record the output (or cite the new line), then run "
                            "tools/check_cited_lines.py --update")
    for p in problems:
        print(p)
    print(f"check_cited_lines: {len(cites)} citations of source lines, {len(problems)} out of date")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
