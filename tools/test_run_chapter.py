"""Tests for tools/run_chapter.sh (make test-chapter-N, test-solution-N, test-mine-N): the order
of the tests, the core-only run while the stretch regions are untouched, and the exit status of
each flavor. Run: .venv/bin/python -m pytest tools/

The test program is a fake (a Python script that applies --gtest_filter to a list of tests and
prints what GoogleTest prints), in a build directory whose CMake project builds nothing, run on
this repository's chapter 11 (its chapters/ as generated: every stretch region untouched).
"""

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# (test, outcome): TESTs first, as GoogleTest registers them, then the TEST_P suites.
TESTS = [
    ("MlaInTheEngine.Greedy", "OK"),
    ("MlaScoreColumns.EachKeyColumnIsReadFromItsChunk", "OK"),
    ("Ch11/MlaScores.FirstStageMatchesReference/a", "OK"),
    ("Ch11/MlaGolden.MatchesReference/a", "OK"),
    ("Ch11/StretchMlaSplit.AsPlanned/a", "FAILED"),
]

FAKE = '''\
#!{python}
import fnmatch, sys
tests = {tests!r}
flt = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--gtest_filter=")), "*")
pos, _, neg = flt.partition("-")
def hit(name, pats):
    return any(fnmatch.fnmatchcase(name, p) for p in pats.split(":") if p)
run = [(t, o) for t, o in tests if hit(t, pos or "*") and not hit(t, neg)]
print("Running main() from gtest_main.cc")
print("Note: Google Test filter = " + flt)
print("[==========] Running %d tests from 1 test suite." % len(run))
for t, o in run:
    print("[ RUN      ] " + t)
    if o == "FAILED":
        print("x.cpp:1: Failure")
    print(("[       OK ] " if o == "OK" else "[  FAILED  ] ") + t + " (1 ms)")
print("[==========] %d tests from 1 test suite ran. (5 ms total)" % len(run))
passed = sum(o == "OK" for _, o in run)
print("[  PASSED  ] %d tests." % passed)
failed = [t for t, o in run if o == "FAILED"]
if failed:
    print("[  FAILED  ] %d tests, listed below:" % len(failed))
    for t in failed:
        print("[  FAILED  ] " + t)
sys.exit(1 if failed else 0)
'''


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """A build directory with targets test_ch11_{solution,chapter,mine} that build nothing."""
    if not shutil.which("cmake"):
        pytest.skip("no cmake")
    src, build = tmp_path_factory.mktemp("fake-src"), tmp_path_factory.mktemp("fake-build")
    (src / "CMakeLists.txt").write_text(textwrap.dedent("""\
        cmake_minimum_required(VERSION 3.16)
        project(fake NONE)
        foreach(f solution chapter mine)
          add_custom_target(test_ch11_${f})
        endforeach()
        """))
    subprocess.run(["cmake", "-S", str(src), "-B", str(build)], check=True, capture_output=True)
    return build


def run_chapter(build, flavor, tests=TESTS):
    fake = build / f"test_ch11_{flavor}"
    fake.write_text(FAKE.format(python=sys.executable, tests=tests))
    fake.chmod(0o755)
    env = dict(os.environ, PA_NO_PROGRESS="1")
    return subprocess.run(["bash", "tools/run_chapter.sh", str(build), flavor, "11"], cwd=ROOT,
                          capture_output=True, text=True, env=env)


def test_the_kernels_own_tests_run_first(build):
    out = run_chapter(build, "solution").stdout
    # The engine test (a TEST: GoogleTest runs it before any TEST_P) comes after the golden ones.
    assert out.index("First the kernel's own tests") < out.index("Then the rest")
    assert out.count("tests from 1 test suite ran") == 2
    log = (build / "test_ch11_solution.log").read_text()
    assert log.index("StretchMlaSplit") > 0
    results = (build / "test_ch11_solution.results").read_text().split()
    names = results[1::2]
    assert names.index("MlaScoreColumns.EachKeyColumnIsReadFromItsChunk") < names.index("MlaInTheEngine.Greedy")
    assert names.index("Ch11/MlaGolden.MatchesReference/a") < names.index("MlaInTheEngine.Greedy")


def test_the_solution_fails_on_a_stretch_test_and_a_students_chapter_does_not(build):
    sol = run_chapter(build, "solution")
    assert sol.returncode == 1, sol.stdout
    assert "The reference solution must pass every test, the Stretch ones too: 1 of 5 fail." in sol.stdout
    mine = run_chapter(build, "mine")
    assert mine.returncode == 0, mine.stdout  # the student's own chapters: the core decides
    assert "core: 4 of 4 pass -- chapter done; stretch: 0 of 2 exercises (optional)" in mine.stdout
    passing = [(t, "OK") for t, _ in TESTS]
    assert run_chapter(build, "solution", passing).returncode == 0
    core_fails = [(t, "FAILED" if "Golden" in t else o) for t, o in TESTS]
    assert run_chapter(build, "mine", core_fails).returncode == 1


def test_an_untouched_chapter_runs_its_core_tests_only(build):
    # chapters/11-* as generated: every stretch region untouched, so the Stretch tests do not run.
    r = subprocess.run([sys.executable, "tools/make_skeletons.py", "--stretch-untouched", "--chapter", "11"],
                       cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("chapters/11-* has stretch work in it")
    out = run_chapter(build, "chapter")
    assert out.returncode == 0, out.stdout
    assert "Core tests only: your stretch exercises are untouched" in out.stdout
    assert "StretchMlaSplit" not in (build / "test_ch11_chapter.results").read_text()
    assert "core: 4 of 4 pass -- chapter done; stretch: not run (2 exercises, untouched)" in out.stdout
    assert "stretch: not run" in (build / "test_ch11_chapter.log").read_text()


def test_a_crash_in_the_first_run_stops_there(build):
    # A program that dies mid-test: the summary says where, and the log says it stopped.
    fake = build / "test_ch11_solution"
    fake.write_text(f"#!{sys.executable}\nimport os\nprint('[ RUN      ] Ch11/MlaGolden.MatchesReference/a',"
                    " flush=True)\nos.abort()\n")
    env = dict(os.environ, PA_NO_PROGRESS="1")
    r = subprocess.run(["bash", "tools/run_chapter.sh", str(build), "solution", "11"], cwd=ROOT,
                       capture_output=True, text=True, env=env)
    assert r.returncode != 0
    assert "the test program stopped (signal ABRT) during Ch11/MlaGolden.MatchesReference/a" in r.stdout
    assert "Then the rest" not in r.stdout
    assert "the test program stopped" in (build / "test_ch11_solution.log").read_text()
