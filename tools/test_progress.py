"""Tests for tools/progress.py (make progress). Run: .venv/bin/python -m pytest tools/

Each test makes a fake repository (solutions/NN-*/ directories) and fake build
directories holding GoogleTest logs, as `make test-chapter-N` (build/cpu) and
`make check-chapter-N` (build/cpu-check) leave them. Whether the student edited a
chapter is decided by comparing chapters/ with the generated skeleton; the tests set it
directly.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parent
sys.path.insert(0, str(TOOLS))
import progress  # noqa: E402

PASSING = """\
== Chapter 3 (03-block-tables): your code in chapters/03-block-tables
[==========] 42 tests from 9 test suites ran. (5123 ms total)
[  PASSED  ] 42 tests.
"""
FAILING = """\
== Chapter 3 (03-block-tables): your code in chapters/03-block-tables
[  FAILED  ] BlockManager.AppendSlots (3 ms)
[==========] 42 tests from 9 test suites ran. (5123 ms total)
[  PASSED  ] 30 tests.
"""
CRASHED = """\
== Chapter 3 (03-block-tables): your code in chapters/03-block-tables
emu: out-of-bounds write at 0x7f...
"""


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A fake root with chapters 1-10, none edited; returns (root, plain, checked, edits)."""
    root = tmp_path / "repo"
    for n in range(1, 11):
        (root / "solutions" / f"{n:02d}-chapter").mkdir(parents=True)
    plain, checked = tmp_path / "build" / "cpu", tmp_path / "build" / "cpu-check"
    plain.mkdir(parents=True)
    checked.mkdir(parents=True)
    edits = set()
    monkeypatch.setattr(progress, "edited", lambda _root, name: int(name[:2]) in edits)
    return root, plain, checked, edits


def write_log(build, n, text, age=0):
    """Writes build/test_chNN_chapter.log, `age` seconds in the past."""
    log = build / f"test_ch{n:02d}_chapter.log"
    log.write_text(text)
    t = 1_700_000_000 - age
    os.utime(log, (t, t))
    return log


def test_a_checked_run_that_passed_counts(repo):
    # The bug: make progress read build/cpu only, so a chapter that passed in
    # make check-chapter-3 read "chapters 1-10 not started".
    root, plain, checked, _ = repo
    write_log(checked, 3, PASSING)
    assert progress.line(root, [plain, checked]) == "Progress: chapter 3 done; 1-2, 4-10 not started"


def test_an_edited_chapter_after_a_checked_run_is_not_untested(repo):
    # The bug: after a checked run it said "in progress (tests not run yet)".
    root, plain, checked, edits = repo
    edits.add(3)
    write_log(checked, 3, FAILING)
    assert progress.state(root, "03-chapter", [plain, checked]) == "in progress (30 of 42 tests pass)"


def test_a_passing_chapter_is_done_whether_or_not_its_files_differ(repo):
    root, plain, checked, edits = repo
    write_log(plain, 3, PASSING)
    assert progress.state(root, "03-chapter", [plain, checked]) == "done"
    edits.add(3)
    assert progress.state(root, "03-chapter", [plain, checked]) == "done"


def test_the_newest_run_decides_plain_or_checked(repo):
    root, plain, checked, edits = repo
    edits.add(3)
    write_log(plain, 3, FAILING, age=100)
    write_log(checked, 3, PASSING, age=10)
    assert progress.state(root, "03-chapter", [plain, checked]) == "done"
    write_log(plain, 3, FAILING, age=1)  # a later plain run broke it again
    assert progress.state(root, "03-chapter", [plain, checked]) == "in progress (30 of 42 tests pass)"


def test_an_untouched_skeleton_is_not_started_even_with_a_failing_run(repo):
    root, plain, checked, _ = repo
    write_log(plain, 3, FAILING)  # a skeleton passes some argument checks
    assert progress.line(root, [plain, checked]) == "Progress: chapters 1-10 not started"


def test_edited_but_never_run(repo):
    root, plain, checked, edits = repo
    edits.add(4)
    assert progress.state(root, "04-chapter", [plain, checked]) == "in progress (tests not run yet)"


def test_a_run_that_stopped_before_its_summary(repo):
    root, plain, checked, edits = repo
    edits.add(3)
    write_log(plain, 3, PASSING, age=100)
    write_log(checked, 3, CRASHED, age=1)
    assert progress.state(root, "03-chapter", [plain, checked]).startswith(
        "in progress (the last run stopped before its summary")


def test_the_whole_line(repo):
    root, plain, checked, edits = repo
    edits.update({4, 5})
    for n in (1, 2, 3):
        write_log(plain if n != 2 else checked, n, PASSING)
    write_log(plain, 4, FAILING)
    assert progress.line(root, [plain, checked]) == (
        "Progress: chapters 1-3 done; 4 in progress (30 of 42 tests pass); "
        "5 in progress (tests not run yet); 6-10 not started")


def test_summary_counts_skipped_and_tolerates_a_line_without_newline():
    text = ("[  SKIPPED ] Model.CudaGraphs\n"
            "emu: a message with no newline[==========] 100 tests from 26 test suites ran. (1 ms total)\n"
            "[  PASSED  ] 97 tests.\n[  SKIPPED ] 3 tests, listed below:\n")
    assert progress.summary(text) == (100, 97, 0, 3)
    assert progress.summary("[  PASSED  ] 1 test.\n") is None  # no "ran" line: crashed


def test_summary_adds_up_the_runs_of_a_two_pass_log():
    # make test-chapter-11 runs the kernel's own tests first, then the rest: two summaries.
    text = ("[==========] 40 tests from 3 test suites ran. (1 ms total)\n[  PASSED  ] 30 tests.\n"
            "[  SKIPPED ] 2 tests.\n"
            "[==========] 20 tests from 9 test suites ran. (1 ms total)\n[  PASSED  ] 20 tests.\n")
    assert progress.summary(text) == (60, 50, 8, 2)
    # The second run died: the line make test-chapter-N writes then says so.
    stopped = (text.split("[====")[0] + "[==========] 40 tests from 3 test suites ran. (1 ms total)\n"
               "[  PASSED  ] 40 tests.\n== Chapter 11: the test program stopped (signal SEGV) during X.Y, "
               "its test number 3.\n")
    assert progress.summary(stopped) is None


def test_stretch_not_run_while_untouched(repo):
    root, plain, checked, edits = repo
    (root / "solutions/03-chapter/k.cu").write_text(STRETCH_SOLUTION)
    results = progress.read_results("OK Core.A\nOK Ch03/CoreP.B/0\n")
    assert progress.chapter_summary(root, "03", results, stretch_run=False) == (
        "core: 2 of 2 pass -- chapter done; stretch: not run (2 exercises, untouched)", True)
    text, ok = progress.chapter_summary(root, "03", [("FAILED", "Core.A")], stretch_run=False)
    assert not ok and text == "core: 0 of 1 pass, 1 fail; stretch: not run (2 exercises, untouched)"
    edits.add(3)
    write_log(plain, 3, PASSING + "\n== Chapter 3: core: 42 of 42 pass -- chapter done; "
              "stretch: not run (2 exercises, untouched)\n")
    assert progress.state(root, "03-chapter", [plain, checked]) == "done, stretch not run"
    assert progress.line(root, [plain, checked]).startswith(
        "Progress: chapter 3 done (stretch exercises: not run in chapter 3); ")
    results_file = plain / "results"
    results_file.write_text("OK Core.A\n")
    out = subprocess.run([sys.executable, str(TOOLS / "progress.py"), "--summarize", "3", str(results_file),
                          "--stretch-not-run"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("core: 1 of 1 pass -- chapter done"), out


def test_the_command_line_needs_a_build_dir():
    out = subprocess.run([sys.executable, str(TOOLS / "progress.py")], capture_output=True, text=True)
    assert out.returncode == 2
    assert "usage: progress.py BUILD_DIR" in out.stderr


STRETCH_SOLUTION = """\
// TODO(ch03): core.
// BEGIN SOLUTION(ch03)
x;
// END SOLUTION
// TODO(ch03, stretch): the first bonus. Tests: StretchOne.*
// BEGIN SOLUTION(ch03, stretch)
y;
// END SOLUTION
// TODO(ch03, stretch): the second bonus. Tests: StretchTwo.* and Ch03/StretchTwoMore.*
// BEGIN SOLUTION(ch03, stretch)
z;
// END SOLUTION
"""


def test_summarize_counts_core_and_stretch_apart(repo):
    root = repo[0]
    (root / "solutions/03-chapter/k.cu").write_text(STRETCH_SOLUTION)
    results = progress.read_results(
        "OK Core.A\nOK Ch03/CoreP.B/0\nSKIPPED Core.Gpu\nFAILED StretchOne.X\nOK StretchOne.Y\n"
        "OK StretchTwo.Z\nOK Ch03/StretchTwoMore.W/1\nnoise line\n")
    assert progress.chapter_summary(root, "03", results) == (
        "core: 2 of 3 pass (1 skipped) -- chapter done; stretch: 1 of 2 exercises (optional)", True)
    # Every stretch test failing (the stubs): the chapter is still done.
    results = [(("FAILED" if progress.is_stretch(t) else o), t) for o, t in results]
    assert progress.chapter_summary(root, "03", results)[0].endswith(
        "chapter done; stretch: 0 of 2 exercises (optional)")
    # A core failure: not done, whatever the stretch tests say.
    text, ok = progress.chapter_summary(root, "03", [("FAILED", "Core.A"), ("OK", "StretchOne.X")])
    assert not ok and text.startswith("core: 0 of 1 pass, 1 fail; stretch: 1 of 2")
    assert progress.chapter_summary(root, "04", [("OK", "A.B")]) == ("core: 1 of 1 pass -- chapter done", True)
    assert progress.is_stretch("Ch10/StretchMerge.Case/3") and not progress.is_stretch("Merge.Stretch")


def test_summarize_from_the_command_line(tmp_path):
    results = tmp_path / "results"
    results.write_text("OK Core.A\nFAILED Core.B\n")
    out = subprocess.run([sys.executable, str(TOOLS / "progress.py"), "--summarize", "3", str(results)],
                         capture_output=True, text=True)
    assert out.returncode == 1 and out.stdout.startswith("core: 1 of 2 pass, 1 fail"), out


def test_a_chapter_done_with_stretch_exercises_left(repo):
    root, plain, checked, edits = repo
    edits.add(3)
    write_log(plain, 3, FAILING + "\n== Chapter 3: core: 40 of 40 pass -- chapter done; "
              "stretch: 1 of 2 exercises (optional)\n")
    assert progress.state(root, "03-chapter", [plain, checked]) == "done, stretch 1 of 2"
    write_log(plain, 4, FAILING + "\n== Chapter 4: core: 30 of 40 pass, 10 fail; "
              "stretch: 0 of 1 exercises (optional)\n")
    edits.add(4)
    assert progress.state(root, "04-chapter", [plain, checked]) == "in progress (30 of 40 core tests pass)"
    write_log(plain, 5, PASSING + "\n== Chapter 5: core: 42 of 42 pass -- chapter done\n")
    assert progress.line(root, [plain, checked]) == (
        "Progress: chapters 3, 5 done (stretch exercises: 1 of 2 in chapter 3); "
        "4 in progress (30 of 40 core tests pass); 1-2, 6-10 not started")
