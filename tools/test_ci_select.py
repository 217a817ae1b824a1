"""Tests of tools/ci_select.py: what a change directs, and the rotation of the rest."""
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ci_select as cs  # noqa: E402

CHAPTERS = ["01", "02", "03", "04"]
INPUTS = {  # chapter -> the files its tests are built from (as chapter_inputs returns them)
    "01": {"emu/src/block.cpp", "solutions/01-dense-kv/a.cu", "tests/01-dense-kv/t.cpp"},
    "02": {"emu/src/block.cpp", "solutions/01-dense-kv/a.cu", "solutions/02-paged-kv/b.cpp"},
    "03": {"emu/src/block.cpp", "solutions/03-block-tables/c.cpp"},
    "04": {"emu/src/block.cpp", "solutions/04-paged-attention-v1/d.cuh", "include/pa/x.h"},
}


def test_a_change_directs_every_chapter_built_from_it():
    assert set(cs.directed_chapters(["solutions/01-dense-kv/a.cu"], INPUTS, CHAPTERS)) == {"01", "02"}
    assert set(cs.directed_chapters(["emu/src/block.cpp"], INPUTS, CHAPTERS)) == set(CHAPTERS)
    assert set(cs.directed_chapters(["include/pa/x.h"], INPUTS, CHAPTERS)) == {"04"}


def test_files_outside_every_chapter_direct_none():
    assert cs.directed_chapters(["NOTES.md", "book/src/ch04.md", "bench/x.cu"], INPUTS, CHAPTERS) == {}


def test_a_mutant_file_directs_its_own_chapter():
    assert set(cs.directed_chapters(["tests/exercise_mutants/03-off-by-one.mutant"], INPUTS, CHAPTERS)) == {"03"}
    assert set(cs.directed_chapters(["tests/mutants/04-missing-barrier.mutant"], INPUTS, CHAPTERS)) == {"04"}


def test_the_harness_and_an_unknown_base_direct_everything():
    assert set(cs.directed_chapters(["tools/run_mutants.py"], INPUTS, CHAPTERS)) == set(CHAPTERS)
    assert set(cs.directed_chapters(["CMakeLists.txt"], INPUTS, CHAPTERS)) == set(CHAPTERS)
    assert set(cs.directed_chapters(None, INPUTS, CHAPTERS)) == set(CHAPTERS)


def test_the_reason_names_the_file():
    why = cs.directed_chapters(["book/x.md", "solutions/03-block-tables/c.cpp"], INPUTS, CHAPTERS)
    assert why == {"03": "solutions/03-block-tables/c.cpp"}


def test_rotation_runs_every_item_once_in_share_commits():
    items = [f"m{i:02}" for i in range(11)]
    seen = []
    for k in range(100, 104):
        seen += cs.rotation(items, k, 4)
    assert sorted(seen) == items
    assert cs.rotation(items, 7, 4) == cs.rotation(items, 11, 4)  # k mod N, recomputable


def test_select_splits_into_directed_rotating_and_the_rest():
    d, r, rest = cs.select(CHAPTERS, {"02": "why"}, k=1, share=2)
    assert d == ["02"]
    assert r == ["03"]  # the undirected 01, 03, 04: place 1 is 03
    assert rest == ["01", "04"]
    assert sorted(d + r + rest) == CHAPTERS


def test_parse_deps_reads_ninja_deps_output():
    text = ("CMakeFiles/a.dir/x.cu.o: #deps 3, deps mtime 1 (VALID)\n"
            "    ../../solutions/01-dense-kv/x.cu\n    ../../include/pa/y.h\n    /usr/include/stdio.h\n\n"
            "CMakeFiles/b.dir/z.cpp.o: #deps 1, deps mtime 1 (VALID)\n    ../../emu/src/z.cpp\n")
    deps = cs.parse_deps(text)
    assert deps["CMakeFiles/a.dir/x.cu.o"][1] == "../../include/pa/y.h"
    assert deps["CMakeFiles/b.dir/z.cpp.o"] == ["../../emu/src/z.cpp"]


def test_repo_relative_keeps_the_repository_and_drops_the_rest(tmp_path):
    build = tmp_path / "build" / "cpu"
    assert cs.repo_relative("../../include/pa/y.h", build, tmp_path) == "include/pa/y.h"
    assert cs.repo_relative("/usr/include/stdio.h", build, tmp_path) is None
    assert cs.repo_relative("golden/golden.stamp", build, tmp_path) is None


def make_tree(root):
    (root / "include" / "pa").mkdir(parents=True)
    (root / "emu").mkdir()
    (root / "solutions" / "01-a").mkdir(parents=True)
    (root / "solutions" / "02-b").mkdir(parents=True)
    (root / "include" / "pa" / "backend.h").write_text('#include "../../emu/e.h"\n')
    (root / "include" / "pa" / "api.h").write_text('#include "pa/backend.h"\n')
    (root / "emu" / "e.h").write_text("")
    (root / "solutions" / "01-a" / "k.cuh").write_text('#include "pa/api.h"\n')
    (root / "solutions" / "01-a" / "one.cu").write_text('#include "k.cuh"\n')
    (root / "solutions" / "02-b" / "two.cu").write_text('#include "k.cuh"\n#include <vector>\n')
    (root / "solutions" / "02-b" / "three.cu").write_text('#include "pa/backend.h"\n')


def test_nvcc_closure_follows_project_includes_and_skips_the_emulator(tmp_path):
    make_tree(tmp_path)
    two = cs.include_closure(tmp_path / "solutions/02-b/two.cu", tmp_path)
    assert two == {"solutions/02-b/two.cu", "solutions/01-a/k.cuh", "include/pa/api.h", "include/pa/backend.h"}
    files = ["solutions/01-a/one.cu", "solutions/02-b/two.cu", "solutions/02-b/three.cu"]
    assert set(cs.directed_nvcc(["solutions/01-a/k.cuh"], files, tmp_path)) == set(files[:2])
    assert cs.directed_nvcc(["emu/e.h"], files, tmp_path) == {}  # nvcc never reads emu/
    assert set(cs.directed_nvcc(["include/pa/backend.h"], files, tmp_path)) == set(files)
    assert set(cs.directed_nvcc(None, files, tmp_path)) == set(files)


def test_changed_files_against_the_parent_and_the_work_tree(tmp_path):
    run = lambda *a: subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True)
    run("init", "-q")
    run("config", "user.email", "t@t")
    run("config", "user.name", "t")
    (tmp_path / "a.txt").write_text("1")
    run("add", ".")
    run("commit", "-qm", "one")
    assert cs.changed_files("HEAD~1", tmp_path) is None  # no parent: unknown, not empty
    (tmp_path / "b.txt").write_text("2")
    run("add", ".")
    run("commit", "-qm", "two")
    (tmp_path / "c.txt").write_text("3")  # untracked counts too
    assert cs.changed_files("HEAD~1", tmp_path) == ["b.txt", "c.txt"]
    assert cs.commit_count(tmp_path) == 2


def test_the_order_a_cap_cuts_from_moves_on_with_each_commit():
    assert cs.rotated(["01", "02", "03"], 4) == ["02", "03", "01"]
    assert cs.rotated([], 4) == []
    firsts = {cs.rotated(CHAPTERS, k)[0] for k in range(len(CHAPTERS))}
    assert firsts == set(CHAPTERS)


# tools/ci_budget.py: the run's budget and the capped phases' share of what is left of it.
import ci_budget as cb  # noqa: E402


def test_a_build_served_from_the_cache_is_held_to_the_warm_budget(monkeypatch):
    monkeypatch.setenv("PA_CI_SPEED", "0.5")
    assert cb.target(cb.SHARES["build"][0] * 0.5) == cb.BUDGET
    assert cb.target(60) == cb.WARM_BUDGET


def test_the_capped_phases_share_what_is_left_and_the_last_takes_the_rest(monkeypatch):
    monkeypatch.setenv("PA_CI_SPEED", "0.5")
    monkeypatch.setenv("PA_CI_START", "1000")
    monkeypatch.setenv("PA_CI_TARGET", "3600")
    left = (3600 - cb.RESERVE) * 0.5 - 500  # 500 s into the run
    weights = sum(cb.SHARES[p][0] for p in cb.CAPPED)
    first = cb.CAPPED[0]
    assert cb.cap(first, now=1500) == round(left * cb.SHARES[first][0] / weights)
    assert cb.cap(cb.CAPPED[-1], now=1500) == round(left)
    assert cb.cap(first, now=1000 + 3600) == 0  # past the budget: nothing starts
    monkeypatch.delenv("PA_CI_START")
    assert cb.cap(first) == round(cb.SHARES[first][0] * 0.5)  # by hand: its own share


def test_the_shares_fit_the_budget():
    assert sum(share for share, _ in cb.SHARES.values()) + cb.RESERVE <= cb.BUDGET


def test_a_chapters_own_file_is_named_before_what_it_is_built_on():
    changed = ["solutions/01-dense-kv/a.cu", "solutions/02-paged-kv/b.cpp"]
    why = cs.directed_chapters(changed, INPUTS, CHAPTERS)
    assert why["02"] == "solutions/02-paged-kv/b.cpp"  # its own, though 01's file reaches it too
    assert cs.own_change("02", why) and cs.own_change("01", why)
    why = cs.directed_chapters(["solutions/01-dense-kv/a.cu"], INPUTS, CHAPTERS)
    assert cs.own_change("01", why) and not cs.own_change("02", why)
    # A skeleton file is the chapter's own even where the graph does not list it.
    assert cs.own_change("03", cs.directed_chapters(["chapters/03-block-tables/c.cpp"], INPUTS, CHAPTERS))


def test_a_mutant_with_its_own_target_gives_a_chapter_without_a_solution(tmp_path):
    (tmp_path / "solutions" / "04-v1").mkdir(parents=True)
    mutants = tmp_path / "tests" / "mutants"
    mutants.mkdir(parents=True)
    (mutants / "13-early.mutant").write_text("chapter: 13\ntarget: tests/emu/test_emu_pipeline\n")
    (mutants / "04-plain.mutant").write_text("chapter: 4\n")
    (mutants / "04-own.mutant").write_text("chapter: 4\ntarget: tests/emu/x\n")  # 04 has a solution
    assert cs.target_chapters(tmp_path) == {"13": {"tests/emu/test_emu_pipeline"}}
    # Directed by what its program is built from, or by its own mutant files.
    inputs = {"13": {"emu/src/mbarrier.cpp", "tests/emu/hopper_pipeline.cuh"}}
    assert cs.directed_chapters(["emu/src/mbarrier.cpp"], inputs, ["13"]) == {"13": "emu/src/mbarrier.cpp"}
    assert cs.directed_chapters(["tests/mutants/13-early.mutant"], inputs, ["13"]) == {"13": "tests/mutants/13-early.mutant"}
    assert cs.directed_chapters(["solutions/04-v1/a.cu"], inputs, ["13"]) == {}
