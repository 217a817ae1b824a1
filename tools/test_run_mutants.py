"""Tests for the worker pool of tools/run_mutants.py (make ci's mutant suites).
Run: .venv/bin/python -m pytest tools/

The builds and test runs are faked (no compiler): each fake build records which worker's
build directory built which target, each fake test run fails (the mutant is killed) unless
the mutant is named "*-survives". What is checked: every mutant runs exactly once, in the
tree of the worker that built its chapter; a worker builds only the chapters it was dealt;
the lines come out in chapter order whatever the timing; a failed unmutated build stops
the run with its message.
"""

import os
import random
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parent
sys.path.insert(0, str(TOOLS))
import run_mutants  # noqa: E402


def mutant(name, chapter, tmp):
    return {"name": name, "chapter": "%02d" % chapter, "suite": "exercise", "mode": "plain",
            "ran_as": "plain", "file": "f.cu", "find": "good", "replace": "bad",
            "expect": ["killed"], "why": "a test", "log": tmp / "logs" / f"{name}.log"}


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """Fake configure/build/run_test; returns the calls recorded."""
    calls = {"built": [], "ran": [], "configured": []}
    lock = threading.Lock()
    (tmp_path / "logs").mkdir()
    fail_build = set()

    def name_of(build_dir):  # "tree-1/plain": the worker's copy and the build's name
        assert build_dir.parent.name == "build"  # inside the worker's scratch copy
        return f"{build_dir.parent.parent.name}/{build_dir.name}"

    def configure(tree, build_dir, mode, python, opt, log, shared=False):
        assert build_dir == run_mutants.build_dir(tree, build_dir.name)
        with lock:
            calls["configured"].append(name_of(build_dir))
        build_dir.mkdir(parents=True, exist_ok=True)

    def build(build_dir, targets, jobs, opt=None):
        time.sleep(random.uniform(0, 0.01))
        targets = [targets] if isinstance(targets, str) else targets
        if any((name_of(build_dir), t) in fail_build for t in targets):
            return 1, "error: it does not compile"
        for t in targets:
            (build_dir / t).write_text("binary")
            with lock:
                calls["built"].append((name_of(build_dir), t))
        return 0, ""

    def run_test(binary, m, timeout, tool=None, fail_fast=False, only=None):
        time.sleep(random.uniform(0, 0.01))
        tree_file = (binary.parent.parent.parent / "f.cu").read_text()
        with lock:
            calls["ran"].append((m["name"], name_of(binary.parent), binary.name, tree_file))
        if m["name"].endswith("-survives"):
            return 0, "all pass", False
        return 1, "killed", False

    monkeypatch.setattr(run_mutants, "configure", configure)
    monkeypatch.setattr(run_mutants, "build", build)
    monkeypatch.setattr(run_mutants, "run_test", run_test)
    monkeypatch.setattr(run_mutants.Pool, "test_times", lambda *a: {})
    calls["fail_build"] = fail_build
    return tmp_path, calls


def make_pool(tmp, mutants, jobs, seconds=None):
    order = sorted(mutants, key=lambda m: (m["ran_as"], m["chapter"], m["name"]))
    groups = run_mutants.deal_groups(order)
    trees = []
    for k in range(min(jobs, len(groups))):
        t = tmp / run_mutants.worker_dir("tree", k)
        t.mkdir(exist_ok=True)
        (t / "f.cu").write_text("good")
        trees.append(t)
    args = types.SimpleNamespace(opt="-O1", timeout=10, record=None, test_times=None)
    return run_mutants.Pool(groups, args, "python3", tmp, tmp / "logs", trees, 2, seconds), order


@pytest.mark.parametrize("jobs", [1, 2, 3])
def test_every_mutant_once_in_order_each_worker_builds_only_its_chapters(fake, capsys, jobs):
    tmp, calls = fake
    mutants = [mutant(f"{c:02d}-m{i}", c, tmp) for c in (1, 2, 3, 4) for i in range(c + 2)]
    mutants.append(mutant("02-z-survives", 2, tmp))
    random.shuffle(mutants)
    pool, order = make_pool(tmp, mutants, jobs)
    results = pool.run(order)
    assert pool.error is None
    assert [r[0]["name"] for r in results] == [m["name"] for m in order]
    killed = {r[0]["name"]: r[1] for r in results}
    assert killed["02-z-survives"] is False
    assert sum(killed.values()) == len(mutants) - 1
    # Each mutant ran once, planted in its worker's tree, against that worker's build.
    assert sorted(r[0] for r in calls["ran"]) == sorted(m["name"] for m in mutants)
    assert all(tree_text == "bad" for *_, tree_text in calls["ran"])
    for k in range(len(pool.trees)):
        assert (pool.trees[k] / "f.cu").read_text() == "good"  # restored
    # A chapter's test is built in one worker's build dir only (dealt whole).
    dirs_of = {}
    for bdir, target in calls["built"]:
        dirs_of.setdefault(target, set()).add(bdir)
    assert all(len(d) == 1 for d in dirs_of.values()), dirs_of
    for name, bdir, target, _ in calls["ran"]:
        assert dirs_of[target] == {bdir}
    assert len({bdir for bdir, _ in calls["built"]}) == min(jobs, 4)
    # The printed lines: one build line per chapter, before its first mutant, then the
    # mutants in chapter order.
    out = capsys.readouterr().out.splitlines()
    names = [l.split()[0] for l in out if not l.startswith("   plain build of")]
    assert names == [m["name"] for m in order]
    for c in (1, 2, 3, 4):
        first = next(i for i, l in enumerate(out) if l.split()[0].startswith(f"{c:02d}-"))
        assert out[first - 1].startswith(f"   plain build of test_ch{c:02d}_solution")


def test_check_mode_mutants_go_to_one_worker_in_one_build(fake, capsys):
    tmp, calls = fake
    mutants = [mutant(f"{c:02d}-m{i}", c, tmp) for c in (1, 2, 3) for i in range(2)]
    for c in (1, 2, 4):
        m = mutant(f"{c:02d}-race", c, tmp)
        m["ran_as"] = "check"
        mutants.append(m)
    pool, order = make_pool(tmp, mutants, 2)
    results = pool.run(order)
    assert [r[0]["name"] for r in results] == [m["name"] for m in order]
    check_dirs = {bdir for bdir, _ in calls["built"] if bdir.endswith("/check")}
    assert len(check_dirs) == 1
    out = capsys.readouterr().out
    assert "   check build of test_ch01_solution test_ch02_solution test_ch04_solution" in out


def test_a_worker_prefers_chapters_it_built_before(fake):
    tmp, calls = fake
    mutants = [mutant(f"{c:02d}-m{i}", c, tmp) for c in (1, 2) for i in range(3)]
    # Worker 1 built chapter 1 in an earlier step, worker 0 chapter 2.
    for tree, target in (("tree-1", "test_ch01_solution"), ("tree", "test_ch02_solution")):
        (tmp / tree / "build" / "plain").mkdir(parents=True)
        (tmp / tree / "build" / "plain" / target).write_text("old")
    pool, order = make_pool(tmp, mutants, 2)
    pool.run(order)
    assert set(calls["built"]) == {("tree/plain", "test_ch02_solution"),
                                   ("tree-1/plain", "test_ch01_solution")}


def test_an_unmutated_build_failure_stops_the_run(fake):
    tmp, calls = fake
    mutants = [mutant(f"{c:02d}-m{i}", c, tmp) for c in (1, 2) for i in range(3)]
    calls["fail_build"].add(("tree/plain", "test_ch01_solution"))
    calls["fail_build"].add(("tree-1/plain", "test_ch01_solution"))
    pool, order = make_pool(tmp, mutants, 2)
    results = pool.run(order)
    assert pool.error and "UNMUTATED" in pool.error and "test_ch01_solution" in pool.error
    assert len(results) < len(mutants)


def test_the_deal_balances_by_seconds_not_by_count():
    """Chapter 9's few mutants take longest: dealt first, alone, not left to the end."""
    tmp = Path("/nonexistent")
    mutants = ([mutant(f"09-m{i}", 9, tmp) for i in range(4)]
               + [mutant(f"{c:02d}-m{i}", c, tmp) for c in (1, 2, 3) for i in range(20)])
    order = sorted(mutants, key=lambda m: (m["ran_as"], m["chapter"], m["name"]))
    groups = run_mutants.deal_groups(order)
    seconds = {m["name"]: (30.0 if m["chapter"] == "09" else 1.0) for m in mutants}
    args = types.SimpleNamespace(opt="-O1", timeout=10, record=None, test_times=None)
    pool = run_mutants.Pool(groups, args, "python3", tmp, tmp, [tmp / "t0", tmp / "t1"], 2, seconds)
    assert pool.queues[0] == [("plain", "09")]
    assert sorted(pool.queues[1]) == [("plain", "01"), ("plain", "02"), ("plain", "03")]
    # Worker 0, done with its own, takes the largest group worker 1 has not started.
    pool.queues[0].clear()
    assert pool.take(0)[0] == ("plain", "01")
    assert pool.queues[1] == [("plain", "02"), ("plain", "03")]


def test_stages_put_the_cheap_tests_first_each_in_the_binarys_order():
    names = ["A.slow", "A.fast", "B.mid", "B.unknown", "C.fast", "C.second"]
    times = {"A.slow": 5000, "A.fast": 1, "B.mid": 50, "C.fast": 10, "C.second": 900}
    assert run_mutants.stages_of(names, times) == [
        ["A.fast", "C.fast"], ["B.mid"], ["C.second"], ["A.slow", "B.unknown"]]
    # No times, or all in one stage: one run of the plain filter.
    assert run_mutants.stages_of(names, {}) == [None]
    assert run_mutants.stages_of(["A.fast", "C.fast"], times) == [None]
    assert run_mutants.stages_of(None, times) == [None]


def test_a_staged_run_stops_at_the_first_failing_stage_and_runs_every_test_otherwise(monkeypatch):
    ran = []
    failing = set()

    def run_test(binary, m, timeout, tool=None, fail_fast=False, only=None):
        assert fail_fast
        ran.append(only)
        bad = [n for n in (only or []) if n in failing]
        return (1, f"{bad[0]} failed", False) if bad else (0, "ok;", False)

    monkeypatch.setattr(run_mutants, "run_test", run_test)
    names = ["S.a", "S.b", "S.c", "S.d"]
    stages = run_mutants.stages_of(names, {"S.a": 2000, "S.b": 1, "S.c": 20, "S.d": 3})
    failing.update({"S.a", "S.c"})
    code, out, timed_out = run_mutants.run_staged("bin", {}, 10, stages)
    assert (code, out) == (1, "S.c failed") and ran == [["S.b", "S.d"], ["S.c"]]
    ran.clear()
    failing.clear()
    code, out, _ = run_mutants.run_staged("bin", {}, 10, stages)
    assert code == 0 and sorted(n for r in ran for n in r) == ["S.a", "S.b", "S.c", "S.d"]
    ran.clear()
    code, out, _ = run_mutants.run_staged("bin", {}, 10, run_mutants.stages_of(names, {}))  # no times
    assert ran == [None]


def test_times_come_from_a_googletest_json_report(tmp_path):
    report = tmp_path / "test_ch01_solution.json"
    report.write_text('{"testsuites": [{"name": "Ch01/Golden", "testsuite": ['
                      '{"name": "Case/d64", "time": "0.012s"}, {"name": "Other", "time": "3s"}]}]}')
    assert run_mutants.load_times(report) == {"Ch01/Golden.Case/d64": 12.0, "Ch01/Golden.Other": 3000.0}
    assert run_mutants.load_times(tmp_path / "none.json") == {}


def test_the_second_run_stops_once_every_expect_is_matched(monkeypatch):
    ran = []

    def run_test(binary, m, timeout, tool=None, fail_fast=False, only=None):
        assert not fail_fast
        ran.append(only)
        return (1 if "S.b" in (only or []) else 0), " ".join(f"<{n}>" for n in (only or ["all"])), False

    monkeypatch.setattr(run_mutants, "run_test", run_test)
    stages = run_mutants.stages_of(["S.a", "S.b", "S.c", "S.d"], {"S.a": 2000, "S.b": 1, "S.c": 20, "S.d": 500})
    code, out, _ = run_mutants.run_until_named("bin", {"expect": ["<S.b>", "<S.c>"]}, 10, stages)
    assert code == 1 and ran == [["S.b"], ["S.c"]]
    ran.clear()
    code, out, _ = run_mutants.run_until_named("bin", {"expect": ["<S.x>"]}, 10, stages)
    assert code == 1 and len(ran) == 4 and all(f"<{n}>" in out for n in "S.a S.b S.c S.d".split())
    ran.clear()
    run_mutants.run_until_named("bin", {"expect": ["<S.x>"]}, 10, [None])  # no times
    assert ran == [None]


def test_the_heavy_kernel_chapters_build_at_O0_in_a_directory_of_their_own_unless_opt_is_given():
    for chapter in ("08", "09", "10", "11"):
        assert run_mutants.opt_of(("plain", chapter), None) == "-O0"
        assert run_mutants.build_name(("plain", chapter), None) == "plain-O0"
    assert run_mutants.opt_of(("plain", "12"), None) == "-O1"
    assert run_mutants.build_name(("plain", "12"), None) == "plain"
    assert run_mutants.build_name(("check", "all"), None) == "check"
    assert run_mutants.opt_of(("plain", "09"), "-O2") == "-O2"
    assert run_mutants.build_name(("plain", "09"), "-O2") == "plain"


def test_checked_mode_keeps_cmakes_release_flags_and_builds_sit_two_levels_into_the_copy():
    """Checked mode's build has make check-chapter-N's flags (PA_EMU_CHECK's -O1 decides), and
    every build dir is TREE/build/NAME, as build/cpu-check is in the repository: the same
    relative source paths and command lines, so ccache shares the objects."""
    assert run_mutants.opt_of(("check", "all"), None) is None
    assert run_mutants.opt_of(("check", "all"), "-O2") == "-O2"
    tree = Path("/w/tree-1")
    assert run_mutants.build_dir(tree, "check") == tree / "build" / "check"


def test_the_sync_keeps_the_copys_own_builds(tmp_path, monkeypatch):
    monkeypatch.setattr(run_mutants, "source_files", lambda: ["tools/run_mutants.py"])
    tree = tmp_path / "tree"
    (tree / "build" / "plain").mkdir(parents=True)
    (tree / "build" / "plain" / "test_ch01_solution").write_text("binary")
    (tree / "stale.txt").write_text("gone")
    copied, removed = run_mutants.sync_tree(tree)
    assert (copied, removed) == (1, 1)
    assert (tree / "build" / "plain" / "test_ch01_solution").is_file()
    assert (tree / "tools" / "run_mutants.py").is_file() and not (tree / "stale.txt").exists()


def test_with_ccache_the_plain_builds_keep_the_main_builds_flags_in_one_directory(monkeypatch):
    """With ccache as the launcher (CI), the scratch builds' first build is the main build's
    objects (cache hits): its flags, and one plain directory (chapter 9 too); a mutant's
    rebuild still compiles at its chapter's level (opt_of), through tools/mutant_compile.sh."""
    monkeypatch.setenv("CMAKE_CXX_COMPILER_LAUNCHER", "ccache")
    assert run_mutants.shares_main_objects(None)
    assert not run_mutants.shares_main_objects("-O2")  # --opt: the flags asked for
    assert run_mutants.build_name(("plain", "09"), None, shared=True) == "plain"
    assert run_mutants.opt_of(("plain", "09"), None) == "-O0"
    monkeypatch.delenv("CMAKE_CXX_COMPILER_LAUNCHER")
    assert not run_mutants.shares_main_objects(None)


def test_the_mutant_launcher_swaps_only_the_optimisation_level():
    script = str(run_mutants.ROOT / "tools" / "mutant_compile.sh")
    args = ["echo", "c++", "-O3", "-DNDEBUG", "a b.cu", "-O1"]
    plain = subprocess.run([script, *args], capture_output=True, text=True, check=True).stdout
    assert plain.split() == ["c++", "-O3", "-DNDEBUG", "a", "b.cu", "-O1"]
    env = dict(os.environ, PA_MUTANT_OPT="-O0")
    swapped = subprocess.run([script, "printf", "<%s>", *args[1:]], capture_output=True, text=True,
                             check=True, env=env).stdout
    assert swapped == "<c++><-O0><-DNDEBUG><a b.cu><-O0>"


def test_a_time_cap_cuts_what_is_left_and_runs_it_never(fake, capsys, monkeypatch):
    tmp, calls = fake
    mutants = [mutant(f"{c:02d}-m{i}", c, tmp) for c in (1, 2, 3) for i in range(2)]
    order = sorted(mutants, key=lambda m: (m["ran_as"], m["chapter"], m["name"]))
    groups = run_mutants.deal_groups(order)
    (tmp / "tree").mkdir(exist_ok=True)
    (tmp / "tree" / "f.cu").write_text("good")
    # A cap already spent after the first mutant: the clock jumps past it once one has run.
    args = types.SimpleNamespace(opt="-O1", timeout=10, record=None, test_times=None, budget=100.0,
                                 rotate=1)
    pool = run_mutants.Pool(groups, args, "python3", tmp, tmp / "logs", [tmp / "tree"], 2)
    assert pool.queues[0] == [("plain", "02"), ("plain", "03"), ("plain", "01")]  # rotated
    real = run_mutants.run_one
    monkeypatch.setattr(run_mutants, "run_one", lambda *a, **k: (pool.__setattr__("deadline", 0), real(*a, **k))[1])
    results = pool.run(order)
    ran = [r for r in results if r is not None]
    assert [r[0]["name"] for r in ran] == ["02-m0"]
    assert [r[0] for r in calls["ran"]] == ["02-m0"]  # the cut ones never ran
    assert sum(r is None for r in results) == 5


def test_under_a_cap_the_given_chapters_are_dealt_first(fake):
    tmp, calls = fake
    mutants = [mutant(f"{c:02d}-m0", c, tmp) for c in (1, 2, 3, 4)]
    order = sorted(mutants, key=lambda m: (m["ran_as"], m["chapter"], m["name"]))
    groups = run_mutants.deal_groups(order)
    (tmp / "tree").mkdir(exist_ok=True)
    args = types.SimpleNamespace(opt="-O1", timeout=10, record=None, test_times=None, budget=100.0,
                                 rotate=1, order="04 01")
    pool = run_mutants.Pool(groups, args, "python3", tmp, tmp / "logs", [tmp / "tree"], 2)
    assert [key[1] for key in pool.queues[0]] == ["04", "01", "02", "03"]


def test_a_mutant_names_its_test_program_or_runs_its_chapters(tmp_path):
    base = "chapter: 13\nfile: tests/emu/hopper_pipeline.cuh\nwhy: w\nfind: a\nreplace: b\nexpect: x\n"
    (tmp_path / "13-own.mutant").write_text(base + "target: tests/emu/test_emu_pipeline\n")
    (tmp_path / "13-plain.mutant").write_text(base)
    own = run_mutants.parse_mutant(tmp_path / "13-own.mutant")
    plain = run_mutants.parse_mutant(tmp_path / "13-plain.mutant")
    assert run_mutants.target_of(own) == "tests/emu/test_emu_pipeline"
    assert run_mutants.target_of(plain) == "test_ch13_solution"
    assert run_mutants.targets_of([own, plain, own]) == ["test_ch13_solution", "tests/emu/test_emu_pipeline"]
