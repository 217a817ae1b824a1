#!/usr/bin/env python3
"""make progress: one line on where the student stands, chapter by chapter.

    python3 tools/progress.py BUILD_DIR      e.g. build/cpu

Cheap on purpose: it builds and runs nothing. It reads the log that the last
`make test-chapter-N` left in BUILD_DIR/test_chNN_chapter.log, and compares the
files of chapters/NN-*/ with the untouched skeletons:

    done          the last run of the chapter's tests: none failed
    in progress   the exercise files were edited (with the last run's count)
    not started   neither (an untouched skeleton passes a few argument checks:
                  that is not progress)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_skeletons  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def counts(log: Path) -> tuple[int, int, int, int] | None:
    """(total, passed, failed, skipped) from a GoogleTest log, or None."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return None
    def last(pattern: str) -> int:
        found = re.findall(pattern, text, re.M)
        return int(found[-1]) if found else 0
    total = last(r"^\[=+\] (\d+) tests? from .* ran")
    if not total:
        return None  # crashed or interrupted before the summary
    passed, skipped = last(r"^\[  PASSED  \] (\d+) tests?"), last(r"^\[  SKIPPED \] (\d+) tests?")
    return total, passed, total - passed - skipped, skipped  # --gtest_brief omits the FAILED count


def edited(root: Path, name: str) -> bool:
    """True if chapters/<name> differs from its untouched skeleton."""
    want = make_skeletons.expected_tree(root, name[:2])
    return any(make_skeletons.differs(root / "chapters" / rel, out) for rel, out in want.items())


def ranges(numbers: list[int]) -> str:
    parts, i = [], 0
    while i < len(numbers):
        j = i
        while j + 1 < len(numbers) and numbers[j + 1] == numbers[j] + 1:
            j += 1
        parts.append(str(numbers[i]) if i == j else f"{numbers[i]}-{numbers[j]}")
        i = j + 1
    return ", ".join(parts)


def line(root: Path, build: Path) -> str:
    done, started, fresh = [], [], []
    for name in make_skeletons.chapter_names(root / "solutions"):
        n = int(name[:2])
        c = counts(build / f"test_ch{name[:2]}_chapter.log")
        if c and c[2] == 0 and c[1] > 0:
            done.append(n)
        elif edited(root, name):  # (an untouched skeleton passes a few argument checks)
            started.append(f"{n} in progress" + (f" ({c[1]} of {c[0]} tests pass)" if c else
                                                 " (tests not run yet)"))
        else:
            fresh.append(n)
    parts = []
    if done:
        parts.append(("chapter " if len(done) == 1 else "chapters ") + ranges(done) + " done")
    parts += started
    if fresh:
        parts.append(ranges(fresh) + " not started")
    if not (done or started):
        parts = ["chapters " + parts[0]] if parts else []
    return "Progress: " + "; ".join(parts)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: progress.py BUILD_DIR", file=sys.stderr)
        return 2
    build = Path(argv[0])
    print(line(ROOT, build if build.is_absolute() else ROOT / build))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
