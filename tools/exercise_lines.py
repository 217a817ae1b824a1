#!/usr/bin/env python3
"""The lines a student writes, chapter by chapter: code lines inside the answer regions.

    python3 tools/exercise_lines.py            # the working tree
    python3 tools/exercise_lines.py REV [REV]  # at git revisions (e.g. a before and an after)

A line counts when it is inside BEGIN SOLUTION ... END SOLUTION and is neither blank nor a
comment. Core and stretch regions (`BEGIN SOLUTION(chNN, stretch)`) are counted apart.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEGIN = re.compile(r"^\s*(//|#)\s*BEGIN SOLUTION\b(.*)$")
END = re.compile(r"^\s*(//|#)\s*END SOLUTION\b")
COMMENT = re.compile(r"^\s*(//|#|/\*|\*)")


def files_at(rev: str | None) -> dict[str, str]:
    """{path: text} of every file under solutions/ at `rev` (None: the working tree)."""
    if rev is None:
        return {str(p.relative_to(ROOT)): p.read_text(errors="replace")
                for p in sorted((ROOT / "solutions").rglob("*")) if p.is_file()}
    names = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, "solutions/"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    return {n: subprocess.run(["git", "show", f"{rev}:{n}"], cwd=ROOT, capture_output=True,
                              text=True, errors="replace", check=True).stdout for n in names}


def count(files: dict[str, str]) -> dict[str, dict[str, int]]:
    """{chapter: {"core": lines, "stretch": lines, "regions": n, "chapter_lines": total}}."""
    out: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for path, text in files.items():
        chapter = path.split("/")[1]
        kind = None
        for line in text.split("\n"):
            out[chapter]["chapter_lines"] += 1
            begin = BEGIN.match(line)
            if begin:
                kind = "stretch" if "stretch" in begin.group(2) else "core"
                out[chapter]["regions_" + kind] += 1
            elif END.match(line):
                kind = None
            elif kind and line.strip() and not COMMENT.match(line):
                out[chapter][kind] += 1
    return out


def main(argv: list[str]) -> int:
    revs = argv or [None]
    tables = [(rev or "working tree", count(files_at(rev))) for rev in revs]
    chapters = sorted({c for _, t in tables for c in t})
    head = "| chapter |" + "".join(f" {name}: core (regions) | stretch (regions) |" for name, _ in tables)
    print(head + " chapter's lines |")
    print("|---|" + "---:|---:|" * len(tables) + "---:|")
    for c in chapters:
        row = f"| {c} |"
        for _, t in tables:
            x = t.get(c, {})
            row += f" {x.get('core', 0)} ({x.get('regions_core', 0)}) | {x.get('stretch', 0)} ({x.get('regions_stretch', 0)}) |"
        print(row + f" {tables[-1][1].get(c, {}).get('chapter_lines', 0)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
