#!/usr/bin/env python3
"""make progress: one line on where the student stands, chapter by chapter.

    python3 tools/progress.py BUILD_DIR [BUILD_DIR ...]   e.g. build/cpu build/cpu-check

Cheap on purpose: it builds and runs nothing. It reads the logs that the chapter's test
runs left, BUILD_DIR/test_chNN_chapter.log in each BUILD_DIR given (`make test-chapter-N`
writes to build/cpu or build/cuda, `make check-chapter-N` to build/cpu-check), and takes
the newest: the last run decides, plain or checked. Then:

    done          the last run passed: no test failed. (An untouched skeleton never
                  passes, so this holds whether or not the files differ from it.)
    in progress   the last run failed (with its count of passing tests) or stopped
                  before its summary (a crash, or Ctrl-C), and the exercise files were
                  edited; or they were edited and no run has been logged yet
    not started   the exercise files are the untouched skeleton (it passes a few
                  argument checks: that is not progress)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_skeletons  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def summary(text: str) -> tuple[int, int, int, int] | None:
    """(total, passed, failed, skipped) from a GoogleTest log's text, or None."""
    def last(pattern: str) -> int:
        found = re.findall(pattern, text, re.M)
        return int(found[-1]) if found else 0
    # Not anchored at the line's start: a kernel's or the emulator's output on stderr can
    # end without a newline just before GoogleTest's summary.
    total = last(r"\[=+\] (\d+) tests? from .* ran")
    if not total:
        return None  # crashed or interrupted before the summary
    passed, skipped = last(r"\[  PASSED  \] (\d+) tests?"), last(r"\[  SKIPPED \] (\d+) tests?")
    return total, passed, total - passed - skipped, skipped  # --gtest_brief omits the FAILED count


def counts(log: Path) -> tuple[int, int, int, int] | None:
    """(total, passed, failed, skipped) from a GoogleTest log, or None."""
    try:
        return summary(log.read_text(errors="replace"))
    except OSError:
        return None


def newest_log(builds: list[Path], num: str) -> Path | None:
    """The chapter's most recent test log among the build directories, or None."""
    logs = []
    for build in builds:
        log = build / f"test_ch{num}_chapter.log"
        try:
            logs.append((log.stat().st_mtime, log))
        except OSError:
            pass
    return max(logs)[1] if logs else None


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


def state(root: Path, name: str, builds: list[Path]) -> str:
    """One chapter's state: done, not started, or in progress (with why)."""
    log = newest_log(builds, name[:2])
    c = counts(log) if log else None
    if c and c[2] == 0 and c[1] > 0:
        return "done"
    if not edited(root, name):  # an untouched skeleton passes a few argument checks
        return "not started"
    if c:
        return f"in progress ({c[1]} of {c[0]} tests pass)"
    if log:
        return "in progress (the last run stopped before its summary: a crash, or interrupted)"
    return "in progress (tests not run yet)"


def line(root: Path, builds: Path | list[Path]) -> str:
    if isinstance(builds, Path):
        builds = [builds]
    done, started, fresh = [], [], []
    for name in make_skeletons.chapter_names(root / "solutions"):
        n = int(name[:2])
        s = state(root, name, builds)
        if s == "done":
            done.append(n)
        elif s == "not started":
            fresh.append(n)
        else:
            started.append(f"{n} {s}")
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
    if not argv:
        print("usage: progress.py BUILD_DIR [BUILD_DIR ...]", file=sys.stderr)
        return 2
    builds = []
    for arg in argv:
        build = Path(arg) if Path(arg).is_absolute() else ROOT / arg
        if build.resolve() not in [b.resolve() for b in builds]:
            builds.append(build)
    print(line(ROOT, builds))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
