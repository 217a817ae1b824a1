#!/usr/bin/env python3
"""make progress: one line on where the student stands, chapter by chapter.

    python3 tools/progress.py BUILD_DIR [BUILD_DIR ...]   e.g. build/cpu build/cpu-check

Cheap on purpose: it builds and runs nothing. It reads the logs that the chapter's test
runs left, BUILD_DIR/test_chNN_chapter.log in each BUILD_DIR given (`make test-chapter-N`
writes to build/cpu or build/cuda, `make check-chapter-N` to build/cpu-check), and takes
the newest: the last run decides, plain or checked. Then:

    done          the last run passed its core tests: no core test failed. (An untouched
                  skeleton never passes, so this holds whether or not the files differ
                  from it.) Stretch exercises are optional and counted apart:
                  "done, stretch 1 of 2".
    in progress   the last run failed (with its count of passing tests) or stopped
                  before its summary (a crash, or Ctrl-C), and the exercise files were
                  edited; or they were edited and no run has been logged yet
    not started   the exercise files are the untouched skeleton (it passes a few
                  argument checks: that is not progress)

Core and stretch. The tests of a stretch exercise are the GoogleTest suites whose names
start with Stretch (StretchSplitMerge.*, Ch10/StretchMerge.*); every other test is a core
test. make test-chapter-N (tools/run_chapter.sh) lists each test's result in a file and
asks this script for its summary line, which goes into the log:

    python3 tools/progress.py --summarize NN RESULTS_FILE
    == core: 40 of 40 pass -- chapter done; stretch: 1 of 2 exercises (optional)

(exit 0 when every core test passed). A stretch exercise is done when every test of the
Stretch suites its TODO names passed (tools/make_skeletons.py); exercises that name none
share the Stretch suites that no exercise names. While the student has not touched any
stretch region (tools/make_skeletons.py --stretch-untouched), make test-chapter-N runs the
core tests only and says so (--stretch-not-run):

    == core: 40 of 40 pass -- chapter done; stretch: not run (2 exercises, untouched)

and make progress shows "done, stretch not run" for the chapter.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_skeletons  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


# The line make test-chapter-N writes into its log when the test program died mid-run.
STOPPED = re.compile(r"^== Chapter \d+: (the test program stopped|no test ran)", re.M)


def summary(text: str) -> tuple[int, int, int, int] | None:
    """(total, passed, failed, skipped) from a GoogleTest log's text, or None. A log of
    several runs of the program (make test-chapter-N runs a chapter's kernel tests first,
    then the rest) counts them all."""
    def total_of(pattern: str) -> int:
        return sum(int(n) for n in re.findall(pattern, text, re.M))
    # Not anchored at the line's start: a kernel's or the emulator's output on stderr can
    # end without a newline just before GoogleTest's summary.
    total = total_of(r"\[=+\] (\d+) tests? from .* ran")
    if not total or STOPPED.search(text):
        return None  # crashed or interrupted before the summary
    passed, skipped = total_of(r"\[  PASSED  \] (\d+) tests?"), total_of(r"\[  SKIPPED \] (\d+) tests?")
    return total, passed, total - passed - skipped, skipped  # --gtest_brief omits the FAILED count


def counts(log: Path) -> tuple[int, int, int, int] | None:
    """(total, passed, failed, skipped) from a GoogleTest log, or None."""
    try:
        return summary(log.read_text(errors="replace"))
    except OSError:
        return None


def is_stretch(test: str) -> bool:
    """True for a test of a Stretch suite: StretchX.Case, Ch10/StretchX.Case/0."""
    suite = test.split(".", 1)[0]
    return suite.rsplit("/", 1)[-1].startswith("Stretch")


def suite_of(test: str) -> str:
    """The suite's own name, without its instantiation prefix: Ch10/StretchX.Y/0 -> StretchX."""
    return test.split(".", 1)[0].rsplit("/", 1)[-1]


def read_results(text: str) -> list[tuple[str, str]]:
    """(outcome, test) pairs from the lines "OK name", "FAILED name", "SKIPPED name"."""
    pairs = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in ("OK", "FAILED", "SKIPPED"):
            pairs.append((parts[0], parts[1]))
    return pairs


def chapter_summary(root: Path, num: str, results: list[tuple[str, str]],
                    stretch_run: bool = True) -> tuple[str, bool]:
    """The summary line of one run of chapter `num`'s tests, and whether the core passed.
    stretch_run False: the run left the Stretch suites out (every stretch region untouched)."""
    core = [(o, t) for o, t in results if not is_stretch(t)]
    passed = sum(o == "OK" for o, _ in core)
    failed = sum(o == "FAILED" for o, _ in core)
    skipped = sum(o == "SKIPPED" for o, _ in core)
    ok = failed == 0 and passed > 0
    text = f"core: {passed} of {len(core)} pass"
    if skipped:
        text += f" ({skipped} skipped)"
    text += " -- chapter done" if ok else f", {failed} fail"
    try:
        exs = [ex for ex in make_skeletons.exercises(root, num) if ex.stretch]
    except make_skeletons.RegionError:
        exs = []
    stretch = [(o, t) for o, t in results if is_stretch(t)]
    if not stretch_run and not stretch:
        if exs:
            text += (f"; stretch: not run ({len(exs)} exercise{'s' if len(exs) != 1 else ''}, "
                     "untouched)")
    elif exs:
        named = {s for ex in exs for s in ex.suites}

        def passes(suites) -> bool:
            mine = [o for o, t in stretch if suites(suite_of(t))]
            return "OK" in mine and "FAILED" not in mine

        done = sum(passes((lambda s, ex=ex: s in ex.suites) if ex.suites
                          else (lambda s: s not in named)) for ex in exs)
        text += f"; stretch: {done} of {len(exs)} exercises (optional)"
    elif stretch:
        text += (f"; stretch: {sum(o == 'OK' for o, _ in stretch)} of {len(stretch)} "
                 "Stretch tests pass (optional)")
    return text, ok


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


SUMMARY = re.compile(r"core: (\d+) of (\d+) pass(?: \(\d+ skipped\))?( -- chapter done)?"
                     r"(?:.*?; stretch: (?:(\d+) of (\d+) exercises|(not run)))?")


def state(root: Path, name: str, builds: list[Path]) -> str:
    """One chapter's state: done (with its stretch count), not started, or in progress."""
    log = newest_log(builds, name[:2])
    c = counts(log) if log else None
    # The core/stretch summary that make test-chapter-N writes, if this log has one.
    try:
        found = SUMMARY.findall(log.read_text(errors="replace")) if log and c else []
    except OSError:
        found = []
    if found:
        passed, total, done, s_done, s_all, not_run = found[-1]
        if done:
            if not_run:
                return "done, stretch not run"
            return f"done, stretch {s_done} of {s_all}" if s_all else "done"
        if not edited(root, name):
            return "not started"
        return f"in progress ({passed} of {total} core tests pass)"
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
    done, started, fresh, stretch = [], [], [], []
    for name in make_skeletons.chapter_names(root / "solutions"):
        n = int(name[:2])
        s = state(root, name, builds)
        if s.startswith("done"):
            done.append(n)
            if s != "done":
                stretch.append(f"{s.split('stretch ', 1)[1]} in chapter {n}")
        elif s == "not started":
            fresh.append(n)
        else:
            started.append(f"{n} {s}")
    parts = []
    if done:
        parts.append(("chapter " if len(done) == 1 else "chapters ") + ranges(done) + " done"
                     + (" (stretch exercises: " + ", ".join(stretch) + ")" if stretch else ""))
    parts += started
    if fresh:
        parts.append(ranges(fresh) + " not started")
    if not (done or started):
        parts = ["chapters " + parts[0]] if parts else []
    return "Progress: " + "; ".join(parts)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--summarize"]:
        stretch_run = "--stretch-not-run" not in argv
        argv = [a for a in argv if a != "--stretch-not-run"]
        if len(argv) != 3:
            print("usage: progress.py --summarize NN RESULTS_FILE [--stretch-not-run]", file=sys.stderr)
            return 2
        try:
            results = read_results(Path(argv[2]).read_text(errors="replace"))
        except OSError:
            results = []
        text, ok = chapter_summary(ROOT, f"{int(argv[1]):02d}", results, stretch_run)
        print(text)
        return 0 if ok else 1
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
