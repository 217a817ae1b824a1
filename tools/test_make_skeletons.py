"""Tests for tools/make_skeletons.py. Run: .venv/bin/python -m pytest tools/

Each test builds a small fake repository (solutions/ and chapters/) in
tmp_path and runs the script on it with --root, as a student or CI would.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "make_skeletons.py"
HEADER = ("// Your exercise file. (Generated from solutions/{}; "
          "instructors regenerate with tools/make_skeletons.py.)")


def run(root, *args):
    return subprocess.run([sys.executable, str(SCRIPT), "--root", str(root), *args],
                          capture_output=True, text=True)


def write(root, rel, text):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def read(root, rel):
    return (root / rel).read_text()


def test_stub_lines_replace_the_region_and_hint_is_kept(tmp_path):
    write(tmp_path, "solutions/01-dense/kv.cu", """
        int answer() {
            // TODO(ch01): return the answer.
            // Hint: it is six times seven.
            // BEGIN SOLUTION(ch01)
            int a = 6;
            // STUB: PA_TODO("ch01");
            //STUB:   return 0;
            return a * 7;
            // END SOLUTION
        }
        """)
    r = run(tmp_path)
    assert r.returncode == 0, r.stderr
    assert read(tmp_path, "chapters/01-dense/kv.cu") == HEADER.format("01-dense/kv.cu") + "\n" + textwrap.dedent("""
        int answer() {
            // TODO(ch01): return the answer.
            // Hint: it is six times seven.
            PA_TODO("ch01");
              return 0;
        }
        """).lstrip("\n")


def test_default_stub_and_python_comments(tmp_path):
    write(tmp_path, "solutions/02-paged/a.py", """
        #!/usr/bin/env python3
        def f():
            # TODO(ch02): compute it
            # BEGIN SOLUTION
            return 42
            # END SOLUTION
        """)
    assert run(tmp_path).returncode == 0
    assert read(tmp_path, "chapters/02-paged/a.py") == textwrap.dedent("""
        #!/usr/bin/env python3
        # Your exercise file. (Generated from solutions/02-paged/a.py; instructors regenerate with tools/make_skeletons.py.)
        def f():
            # TODO(ch02): compute it
            # (your code here)
        """).lstrip("\n")


def test_header_goes_after_pragma_once(tmp_path):
    write(tmp_path, "solutions/01-a/x.h", """
        #pragma once
        inline int g() {
          // BEGIN SOLUTION
          return 1;
          // END SOLUTION
        }
        """)
    assert run(tmp_path).returncode == 0
    lines = read(tmp_path, "chapters/01-a/x.h").splitlines()
    assert lines[0] == "#pragma once"
    assert lines[1] == HEADER.format("01-a/x.h")
    assert lines[3] == "  // (your code here)"


def test_anchors_inside_a_region_are_kept_around_the_stub(tmp_path):
    write(tmp_path, "solutions/03-v1/k.cu", """
        // ANCHOR: whole
        __global__ void k(float* out) {
          // BEGIN SOLUTION
          // ANCHOR: inner
          float x = 1.0f;
          // STUB: // device stub: writes nothing
          out[0] = x;
          // ANCHOR_END: inner
          // END SOLUTION
        }
        // ANCHOR_END: whole
        """)
    assert run(tmp_path).returncode == 0
    body = read(tmp_path, "chapters/03-v1/k.cu").splitlines()[1:]
    assert body == [
        "// ANCHOR: whole",
        "__global__ void k(float* out) {",
        "  // ANCHOR: inner",
        "  // device stub: writes nothing",
        "  // ANCHOR_END: inner",
        "}",
        "// ANCHOR_END: whole",
    ]


def test_files_without_regions_are_copied_verbatim(tmp_path):
    src = write(tmp_path, "solutions/01-a/sub/notes.txt", "no regions\r\nhere")
    write(tmp_path, "solutions/01-a/plain.cu", "int x;\n")
    os.chmod(src, 0o755)
    assert run(tmp_path).returncode == 0
    out = tmp_path / "chapters/01-a/sub/notes.txt"
    assert out.read_bytes() == src.read_bytes()
    assert os.stat(out).st_mode & 0o100
    assert read(tmp_path, "chapters/01-a/plain.cu") == "int x;\n"


def test_trailing_newline_is_preserved(tmp_path):
    (tmp_path / "solutions/01-a").mkdir(parents=True)
    (tmp_path / "solutions/01-a/n.cu").write_text("// BEGIN SOLUTION\nx\n// END SOLUTION")
    assert run(tmp_path).returncode == 0
    assert read(tmp_path, "chapters/01-a/n.cu").endswith("// (your code here)")


def check_error(tmp_path, text, expected):
    write(tmp_path, "solutions/01-a/bad.cu", text)
    r = run(tmp_path)
    assert r.returncode != 0
    assert expected in r.stderr, r.stderr
    assert not (tmp_path / "chapters/01-a/bad.cu").exists()


def test_begin_without_end_is_an_error(tmp_path):
    check_error(tmp_path, "int a;\n// BEGIN SOLUTION\nint b;\n", "solutions/01-a/bad.cu:2:")


def test_end_without_begin_is_an_error(tmp_path):
    check_error(tmp_path, "int a;\n\n// END SOLUTION\n", "solutions/01-a/bad.cu:3:")


def test_nested_regions_are_an_error(tmp_path):
    check_error(tmp_path, "// BEGIN SOLUTION\n// BEGIN SOLUTION\n// END SOLUTION\n"
                "// END SOLUTION\n", "solutions/01-a/bad.cu:2:")


def test_stub_outside_a_region_is_an_error(tmp_path):
    check_error(tmp_path, "// STUB: x;\n", "solutions/01-a/bad.cu:1:")


def test_check_reports_stale_then_up_to_date(tmp_path):
    write(tmp_path, "solutions/01-a/k.cu", "// BEGIN SOLUTION\nx;\n// END SOLUTION\n")
    r = run(tmp_path, "--check")
    assert r.returncode == 1
    assert "chapters/01-a/k.cu (missing)" in r.stdout
    assert "chapters/ is stale: run python3 tools/make_skeletons.py" in r.stdout

    assert run(tmp_path).returncode == 0
    r = run(tmp_path, "--check")
    assert r.returncode == 0, r.stdout
    assert "chapters/ is up to date (1 files)" in r.stdout

    (tmp_path / "chapters/01-a/k.cu").write_text("student edit\n")
    write(tmp_path, "chapters/01-a/extra.cu", "left over\n")
    r = run(tmp_path, "--check")
    assert r.returncode == 1
    assert "chapters/01-a/k.cu (differs)" in r.stdout
    assert "chapters/01-a/extra.cu" in r.stdout
    assert read(tmp_path, "chapters/01-a/k.cu") == "student edit\n"  # --check writes nothing


def test_deleted_solution_file_removes_the_chapter_file(tmp_path):
    write(tmp_path, "solutions/01-a/keep.cu", "int k;\n")
    gone = write(tmp_path, "solutions/01-a/sub/gone.cu", "int g;\n")
    write(tmp_path, "solutions/02-b/all.cu", "int a;\n")
    assert run(tmp_path).returncode == 0
    assert (tmp_path / "chapters/01-a/sub/gone.cu").exists()

    gone.unlink()
    (tmp_path / "solutions/02-b/all.cu").unlink()
    (tmp_path / "solutions/02-b").rmdir()
    write(tmp_path, "chapters/README.md", "not owned by the generator\n")
    assert run(tmp_path).returncode == 0
    assert not (tmp_path / "chapters/01-a/sub").exists()
    assert not (tmp_path / "chapters/02-b").exists()
    assert (tmp_path / "chapters/01-a/keep.cu").exists()
    assert (tmp_path / "chapters/README.md").exists()
    assert run(tmp_path, "--check").returncode == 0


def test_chapter_option_limits_the_work(tmp_path):
    write(tmp_path, "solutions/01-a/a.cu", "int a;\n")
    write(tmp_path, "solutions/02-b/b.cu", "int b;\n")
    assert run(tmp_path, "--chapter", "2").returncode == 0
    assert (tmp_path / "chapters/02-b/b.cu").exists()
    assert not (tmp_path / "chapters/01-a").exists()
    assert run(tmp_path, "--check", "--chapter", "02").returncode == 0
    assert run(tmp_path, "--check").returncode == 1
    assert run(tmp_path, "--chapter", "07").returncode == 2


def test_output_is_deterministic_and_unchanged_files_are_not_rewritten(tmp_path):
    write(tmp_path, "solutions/01-a/k.cu", "// BEGIN SOLUTION\nx;\n// END SOLUTION\n")
    assert run(tmp_path).returncode == 0
    out = tmp_path / "chapters/01-a/k.cu"
    first = out.read_bytes()
    os.utime(out, (1_000_000, 1_000_000))
    r = run(tmp_path)
    assert r.returncode == 0
    assert "0 written" in r.stdout
    assert out.read_bytes() == first
    assert out.stat().st_mtime == 1_000_000


# --- contracts and tiered hints -------------------------------------------------------

sys.path.insert(0, str(SCRIPT.parent))
import make_skeletons  # noqa: E402

HINTED = """
    int answer() {
        // TODO(ch01): returns 42.
        //   (the contract goes on)
        // HINT(1): a product.
        // HINT(2): six times seven,
        //   in one line.
        // BEGIN SOLUTION
        // STUB: PA_TODO("ch01");
        return 6 * 7;
        // END SOLUTION
    }
    """


def test_hint_lines_are_stripped_from_the_chapter(tmp_path):
    write(tmp_path, "solutions/01-a/k.cu", HINTED)
    r = run(tmp_path)
    assert r.returncode == 0, r.stderr
    assert read(tmp_path, "chapters/01-a/k.cu") == HEADER.format("01-a/k.cu") + "\n" + textwrap.dedent("""
        int answer() {
            // TODO(ch01): returns 42.
            //   (the contract goes on)
            PA_TODO("ch01");
        }
        """).lstrip("\n")


def test_exercises_carry_contract_hints_and_chapter_line(tmp_path):
    write(tmp_path, "solutions/01-a/k.cu", HINTED)
    write(tmp_path, "solutions/01-a/j.cu", "// TODO(ch01): first.\n// BEGIN SOLUTION\nx;\n// END SOLUTION\n")
    assert run(tmp_path).returncode == 0
    exs = make_skeletons.exercises(tmp_path, "01")
    assert [e.file for e in exs] == ["01-a/j.cu", "01-a/k.cu"]  # sorted files, then lines
    j, k = exs
    assert j.hints == [] and j.contract == "TODO(ch01): first."
    assert k.contract == "TODO(ch01): returns 42.\n(the contract goes on)"
    assert k.hints == ["a product.", "six times seven,\nin one line."]
    lines = read(tmp_path, "chapters/01-a/k.cu").split("\n")
    assert lines[k.line - 1].strip() == "// TODO(ch01): returns 42."
    assert k.skeleton in read(tmp_path, "chapters/01-a/k.cu")


def test_hint_numbering_and_placement_are_checked(tmp_path):
    check_error(tmp_path, "// TODO(ch01): x\n// HINT(2): skipped one\n// BEGIN SOLUTION\n"
                "// END SOLUTION\n", "solutions/01-a/bad.cu:2: HINT(2) should be HINT(1)")
    check_error(tmp_path, "// HINT(1): far away\nint a;\n// BEGIN SOLUTION\n// END SOLUTION\n",
                "solutions/01-a/bad.cu:1: HINT lines must sit directly above BEGIN SOLUTION")
    check_error(tmp_path, "// BEGIN SOLUTION\n// HINT(1): inside\n// END SOLUTION\n",
                "solutions/01-a/bad.cu:2: HINT line inside")
    check_error(tmp_path, "int a;\n// HINT(1): at the end\n", "solutions/01-a/bad.cu:2:")


def test_every_exercise_of_the_course_has_a_contract_and_tiers():
    root = SCRIPT.parent.parent
    for name in make_skeletons.chapter_names(root / "solutions"):
        for ex in make_skeletons.exercises(root, name[:2]):
            where = f"solutions/{ex.file}:{ex.line}"
            tag = f"TODO(ch{name[:2]}, stretch):" if ex.stretch else f"TODO(ch{name[:2]}):"
            assert ex.contract.startswith(tag), where
            assert 2 <= len(ex.hints) <= 4, where
            assert all(h.strip() for h in ex.hints), where


HINT_SCRIPT = SCRIPT.parent / "hint.py"


def hint(root, *args):
    return subprocess.run([sys.executable, str(HINT_SCRIPT), "--root", str(root), *args],
                          capture_output=True, text=True)


def test_hint_reveals_one_tier_per_call_and_moves_on_when_edited(tmp_path):
    write(tmp_path, "solutions/01-a/k.cu", HINTED)
    write(tmp_path, "solutions/01-a/l.cu", "// TODO(ch01): second.\n// HINT(1): only.\n"
          "// BEGIN SOLUTION\nx;\n// END SOLUTION\n")
    assert run(tmp_path).returncode == 0
    r = hint(tmp_path, "1")
    assert r.returncode == 0, r.stderr
    assert "exercise 1 of 2" in r.stdout and "Hint 1 of 2" in r.stdout
    assert "Hint 2 of 2" not in r.stdout and "returns 42." in r.stdout
    r = hint(tmp_path, "1")
    assert "Hint 2 of 2" in r.stdout and "six times seven," in r.stdout
    r = hint(tmp_path, "1")
    assert "No more tiers" in r.stdout
    # Once exercise 1 is edited, the next call is about exercise 2.
    path = tmp_path / "chapters/01-a/k.cu"
    path.write_text(path.read_text().replace('PA_TODO("ch01");', "return 42;"))
    r = hint(tmp_path, "1")
    assert "exercise 2 of 2" in r.stdout and "only." in r.stdout
    r = hint(tmp_path, "1", "--exercise", "1", "--level", "1")
    assert "(edited)" in r.stdout and "Hint 1 of 2" in r.stdout and "Hint 2" not in r.stdout
    assert hint(tmp_path, "1", "--reset").returncode == 0
    assert "hints seen 0 of 2" in hint(tmp_path, "1", "--list").stdout
    assert hint(tmp_path, "1", "--exercise", "3").returncode == 2
    assert hint(tmp_path, "7").returncode == 2


STRETCHED = """
    int core() {
        // TODO(ch01): returns 42.
        // HINT(1): six times seven.
        // BEGIN SOLUTION(ch01)
        // STUB: PA_TODO("ch01");
        return 42;
        // END SOLUTION
    }
    int bonus() {
        // TODO(ch01, stretch): returns 43. Checked by StretchBonus.* and Ch01/StretchMore.*
        // HINT(1): one more than core().
        // BEGIN SOLUTION(ch01, stretch)
        // STUB: PA_TODO("ch01");
        return core() + 1;
        // END SOLUTION
    }
    """


def test_stretch_regions_are_stubbed_and_listed_after_the_core_ones(tmp_path):
    write(tmp_path, "solutions/01-a/a.cu", STRETCHED)
    write(tmp_path, "solutions/01-a/0.cu", "// TODO(ch01): first file.\n// BEGIN SOLUTION\nx;\n"
          "// END SOLUTION\n")
    r = run(tmp_path)
    assert r.returncode == 0, r.stderr
    text = read(tmp_path, "chapters/01-a/a.cu")
    assert "return 42" not in text and "core() + 1" not in text and "HINT" not in text
    assert text.count('PA_TODO("ch01");') == 2
    exs = make_skeletons.exercises(tmp_path, "01")
    # Core first (both files, in file order), the stretch one last, whatever its file.
    assert [(e.file, e.stretch) for e in exs] == [
        ("01-a/0.cu", False), ("01-a/a.cu", False), ("01-a/a.cu", True)]
    assert exs[2].contract.startswith("TODO(ch01, stretch): returns 43.")
    assert exs[2].suites == ["StretchBonus", "StretchMore"] and exs[1].suites == []
    assert make_skeletons.stretch_chapters(tmp_path) == ["01"]
    r = run(tmp_path, "--list-stretch")
    assert r.returncode == 0 and r.stdout.strip() == "01"


def test_the_stretch_tag_may_sit_on_either_marker_but_they_must_agree(tmp_path):
    write(tmp_path, "solutions/01-a/k.cu", "// TODO(ch01): x\n// BEGIN SOLUTION(ch01, stretch)\n"
          "// END SOLUTION\n")
    assert run(tmp_path).returncode == 2  # TODO core, BEGIN stretch
    write(tmp_path, "solutions/01-a/k.cu", "// TODO(ch01, stretch): x\n// BEGIN SOLUTION(ch01)\n"
          "// END SOLUTION\n")
    r = run(tmp_path)
    assert r.returncode == 2 and "solutions/01-a/k.cu:2: the TODO above says a stretch" in r.stderr
    write(tmp_path, "solutions/01-a/k.cu", "// TODO(ch01, stretch): x\n// BEGIN SOLUTION\n"
          "// END SOLUTION\n")
    assert run(tmp_path).returncode == 0
    assert [e.stretch for e in make_skeletons.exercises(tmp_path, "01")] == [True]
    write(tmp_path, "solutions/01-a/k.cu", "// TODO(ch01): x\n// BEGIN SOLUTION(ch01)\n"
          "// END SOLUTION\n")
    assert run(tmp_path).returncode == 0
    assert [e.stretch for e in make_skeletons.exercises(tmp_path, "01")] == [False]
    assert make_skeletons.stretch_chapters(tmp_path) == []


def test_core_only_keeps_the_core_answers_and_stubs_the_stretch_ones(tmp_path):
    write(tmp_path, "solutions/01-a/a.cu", STRETCHED)
    write(tmp_path, "solutions/02-b/b.cu", "// TODO(ch02): y\n// BEGIN SOLUTION\nint y;\n"
          "// END SOLUTION\n")
    out = tmp_path / "build" / "core-done"
    r = run(tmp_path, "--core-only", str(out), "--chapter", "01")
    assert r.returncode == 0, r.stderr
    text = (out / "01-a/a.cu").read_text()
    assert "return 42;" in text and "core() + 1" not in text
    assert text.count('\n    PA_TODO("ch01");') == 1 and "HINT" not in text  # the stretch stub
    assert "// BEGIN SOLUTION(ch01)" in text  # a core region stays whole
    assert not (out / "02-b").exists()  # --chapter limits it
    assert not (tmp_path / "chapters").exists()  # chapters/ is not touched
    mtime = (out / "01-a/a.cu").stat().st_mtime_ns
    assert run(tmp_path, "--core-only", str(out)).returncode == 0
    assert (out / "01-a/a.cu").stat().st_mtime_ns == mtime  # unchanged: not rewritten
    assert "int y;" in (out / "02-b/b.cu").read_text()


def test_stretch_untouched_tells_an_edited_stretch_region_from_an_edited_core_one(tmp_path):
    write(tmp_path, "solutions/01-a/a.cu", STRETCHED)
    assert run(tmp_path).returncode == 0
    chapter = tmp_path / "chapters/01-a/a.cu"
    skeleton = chapter.read_text()
    assert run(tmp_path, "--stretch-untouched", "--chapter", "01").returncode == 0  # as generated
    # The core exercise done: the stretch one is still untouched.
    core_done = skeleton.replace('    PA_TODO("ch01");\n', "    return 42;\n", 1)
    assert core_done != skeleton
    chapter.write_text(core_done)
    assert run(tmp_path, "--stretch-untouched", "--chapter", "01").returncode == 0
    # The stretch stub replaced, or code added below it, or its contract edited: touched.
    stub_at = core_done.rindex('    PA_TODO("ch01");\n')
    for edited in (core_done[:stub_at] + "    return core() + 1;\n" + core_done[stub_at + 21:],
                   core_done[:stub_at + 21] + "    return 43;\n" + core_done[stub_at + 21:],
                   core_done.replace("returns 43.", "returns 44.")):
        chapter.write_text(edited)
        r = run(tmp_path, "--stretch-untouched", "--chapter", "01")
        assert r.returncode == 1 and "chapters/01-a/a.cu:7: a stretch exercise, edited" in r.stdout, (r, edited)
    chapter.unlink()  # a missing file: its stretch exercise counts as edited (run its tests)
    assert run(tmp_path, "--stretch-untouched", "--chapter", "01").returncode == 1
    assert run(tmp_path, "--stretch-untouched").returncode == 2  # needs --chapter


def test_hint_marks_the_stretch_exercises(tmp_path):
    write(tmp_path, "solutions/01-a/a.cu", STRETCHED)
    assert run(tmp_path).returncode == 0
    r = hint(tmp_path, "1", "--list")
    assert "2 exercises (1 core, then 1 stretch: optional)" in r.stdout
    assert "2. [stretch] chapters/01-a/a.cu" in r.stdout and "1. chapters/01-a/a.cu" in r.stdout
    r = hint(tmp_path, "1", "--exercise", "2")
    assert "exercise 2 of 2 (stretch, optional; not started)" in r.stdout
    assert "returns 43." in r.stdout and "one more than core()" in r.stdout


def test_cmake_finds_the_same_stretch_files_as_the_generator():
    # CMakeLists.txt picks the core-done build's own sources at configure time with a regex of
    # its own (no Python there); this pins that regex to the generator's reading of the
    # markers, file by file, over the whole course.
    import re
    root = SCRIPT.parent.parent
    cmake = (root / "CMakeLists.txt").read_text()
    found = re.search(r'file\(STRINGS \$\{f\} hit REGEX "((?:[^"\\]|\\.)*stretch(?:[^"\\]|\\.)*)"\)', cmake)
    assert found, "CMakeLists.txt: the stretch-marker scan (file(STRINGS ... REGEX ...)) moved"
    # A CMake string literal: \\ -> \, \t -> tab; CMake's regex dialect then reads as Python's.
    pattern = re.compile(found.group(1).replace("\\\\", "\x00").replace("\\t", "\t").replace("\x00", "\\"))
    for name in make_skeletons.chapter_names(root / "solutions"):
        by_generator = {ex.file for ex in make_skeletons.exercises(root, name[:2]) if ex.stretch}
        by_cmake = {p.relative_to(root / "solutions").as_posix()
                    for p in sorted((root / "solutions" / name).iterdir())
                    if p.is_file() and any(pattern.search(line) for line in p.read_text(errors="replace").splitlines())}
        assert by_cmake == by_generator, name
