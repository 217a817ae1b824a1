#!/usr/bin/env python3
"""Generate the student skeletons in chapters/ from the solutions in solutions/.

solutions/NN-slug/ is the source of truth. Every file in it is written to
chapters/NN-slug/ at the same relative path, with each answer region replaced
by a stub:

    // TODO(ch01): hint lines above the region are ordinary lines: kept as is
    // BEGIN SOLUTION(ch01)
    ...answer code...
    // STUB: PA_TODO("ch01");      <- optional; zero or more, anywhere inside
    // END SOLUTION

becomes

    // TODO(ch01): hint lines above the region are ordinary lines: kept as is
    PA_TODO("ch01");

If a region has no STUB lines, it becomes a single `// (your code here)` line.

Contracts and tiered hints. The TODO comment above a region states the CONTRACT:
what must hold when the code is right (inputs, outputs, invariants). It stays in
chapters/. Hints go between the TODO block and BEGIN SOLUTION, one tier per
`HINT(k):` line, numbered 1, 2, 3, ... from the gentlest to the full recipe:

    // TODO(ch01): contract: what must hold (kept in chapters/)
    // HINT(1): a nudge (stripped from chapters/)
    //   a hint continues over the comment lines below it,
    // HINT(2): the method
    // HINT(3): the full recipe (the last tier gives everything but the code)
    // BEGIN SOLUTION(ch01)

HINT lines never reach chapters/; `make hint-N` (tools/hint.py) reads them from
solutions/ through exercises() below, so there is no generated hints file to keep
current. An exercise is one answer region: exercise k of chapter N is the k-th
region of solutions/NN-*/, files in sorted order, regions in line order. It is
an error for a HINT line to sit anywhere but in the comment block directly above
a BEGIN SOLUTION, or for the tiers not to be numbered 1, 2, 3, ...
Core and stretch. A region is a CORE exercise (required: the chapter is done when its
core tests pass) unless it is tagged as a STRETCH exercise (optional, counted apart):

    // TODO(ch10, stretch): contract ... Checked by StretchSplitMerge.*
    // HINT(1): ...
    // BEGIN SOLUTION(ch10, stretch)
    ...
    // END SOLUTION

The tag may sit on the TODO, on BEGIN SOLUTION or on both (they must agree). A stretch
exercise's tests are the GoogleTest suites whose names start with `Stretch`
(StretchSplitMerge.*, or Ch10/StretchMerge.* for a parameterised one); core tests never
run stretch code. The Stretch suites that a stretch TODO names (any word StretchXxx in it)
are that exercise's tests, for make test-chapter-N's count of stretch exercises done.
Stretch regions are stubbed like core ones. `make hint-N` lists them after the core ones.
`--core-only OUTDIR` writes the "core done" tree: each solution file with its core regions
kept and its stretch regions stubbed, at OUTDIR/NN-slug/...; CI builds it (the CMake
targets test_chNN_core) and proves that its core tests pass and its Stretch tests fail.
mdBook anchor lines (ANCHOR: / ANCHOR_END:) inside a region are kept, so that
the book can include the same anchor from a skeleton. Python, shell and CMake
files use `#` instead of `//`.

Usage:
    python3 tools/make_skeletons.py              # regenerate chapters/
    python3 tools/make_skeletons.py --check      # exit 1 if chapters/ is stale
    python3 tools/make_skeletons.py --chapter 04 # only chapters/04-*
    python3 tools/make_skeletons.py --root DIR   # work on another tree (tests)
    python3 tools/make_skeletons.py --core-only OUTDIR [--chapter 10]
                                                 # the "core done" tree (stretch stubbed)
    python3 tools/make_skeletons.py --list-stretch   # chapters with stretch exercises
    python3 tools/make_skeletons.py --stretch-untouched --chapter 11
                                    # exit 0 if chapters/11-*'s stretch regions are as generated

Students edit chapters/; instructors edit solutions/ and rerun this script,
which overwrites chapters/.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path

CHAPTER_DIR = re.compile(r"^\d\d-[A-Za-z0-9_.-]+$")

# Comment prefix per kind of file. Only these files may hold answer regions.
SLASH_SUFFIXES = {".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".hxx",
                  ".cu", ".cuh", ".inl", ".ipp"}
HASH_SUFFIXES = {".py", ".sh", ".cmake"}
HASH_NAMES = {"CMakeLists.txt"}

# Never generated, never reported as extra, never deleted.
IGNORED_NAMES = {"__pycache__", ".pytest_cache", ".DS_Store"}
IGNORED_SUFFIXES = {".pyc", ".pyo"}

HEADER = ("{c} Your exercise file. (Generated from solutions/{path}; "
          "instructors regenerate with tools/make_skeletons.py.)")
DEFAULT_STUB = "{c} (your code here)"


class RegionError(Exception):
    """A malformed answer region; the message starts with file:line."""


@dataclass
class Output:
    data: bytes
    executable: bool


def comment_prefix(path: Path) -> str | None:
    if path.suffix in SLASH_SUFFIXES:
        return "//"
    if path.suffix in HASH_SUFFIXES or path.name in HASH_NAMES:
        return "#"
    return None


def marker_patterns(c: str):
    c = re.escape(c)
    return {
        # BEGIN SOLUTION, optionally followed by a tag: BEGIN SOLUTION(ch04) or
        # BEGIN SOLUTION(ch04, stretch)
        "begin": re.compile(rf"^(\s*){c}\s*BEGIN SOLUTION\b(?:\((ch\d\d)(\s*,\s*stretch)?\))?"),
        "end": re.compile(rf"^\s*{c}\s*END SOLUTION\b"),
        # The stub text is everything after "STUB:" and one optional space,
        # so extra spaces keep their meaning as relative indentation.
        "stub": re.compile(rf"^\s*{c}\s*STUB:(?: ?)(.*)$"),
        "anchor": re.compile(r"\bANCHOR(?:_END)?:"),
        "hint": re.compile(rf"^\s*{c}\s*HINT\((\d+)\):(?: ?)(.*)$"),
        "comment": re.compile(rf"^\s*{c}(.*)$"),
        "todo": re.compile(r"\bTODO\(ch\d\d(\s*,\s*stretch)?\)"),
    }


@dataclass
class Exercise:
    """One answer region, as `make hint-N` shows it."""
    file: str            # path relative to chapters/ (and solutions/)
    line: int            # line of the TODO (or of the stub) in the chapter file
    contract: str        # the TODO comment block, comment markers removed
    hints: list          # the tiers, gentlest first; each a string
    skeleton: str        # the TODO block and stub lines exactly as in chapters/
    stretch: bool = False  # a stretch exercise (optional), not a core one
    suites: list = field(default_factory=list)  # the Stretch suites its TODO names


def comment_text(lines: list[str], c: str) -> str:
    """The text of comment lines without their markers, relative indents kept."""
    bodies = [re.sub(rf"^\s*{re.escape(c)} ?", "", line) for line in lines]
    rest = [b for b in bodies[1:] if b.strip()]
    indent = min((len(b) - len(b.lstrip()) for b in rest), default=0)
    return "\n".join([bodies[0].strip()] + [b[indent:].rstrip() for b in bodies[1:]])


def transform(text: str, display: str, c: str, keep_core: bool = False) -> tuple[str, int]:
    """Replace the answer regions of `text`. Returns (new text, region count).

    `display` is the path used in error messages, `c` the comment prefix;
    `keep_core` keeps the core regions' code (the "core done" tree).
    """
    new, exercises = parse(text, display, c, keep_core)
    return new, len(exercises)


STRETCH_SUITE = re.compile(r"\bStretch[A-Za-z0-9_]+")


def parse(text: str, display: str, c: str,
          keep_core: bool = False) -> tuple[str, list[Exercise]]:
    """The skeleton text of `text` and its exercises (one per answer region).

    Exercise.file is left empty and Exercise.line counts lines of the returned
    text (the caller adds the exercise-file header). With `keep_core`, core
    regions are kept as they are (markers and code) and only stretch regions
    are stubbed.
    """
    pat = marker_patterns(c)
    lines = text.split("\n")  # a trailing newline leaves a final "" element
    out: list[str] = []
    exercises: list[Exercise] = []
    region = None  # while inside a region: dict(line=, indent=, ...)
    comments_from = 0  # index in `out` where the current run of comment lines starts
    hints: list[list[str]] = []  # the HINT tiers above the next region, as lines
    hint_line = 0  # line of the first of them

    for lineno, line in enumerate(lines, start=1):
        where = f"{display}:{lineno}"
        begin = pat["begin"].match(line)
        hint = pat["hint"].match(line)
        if begin:
            if region is not None:
                raise RegionError(
                    f"{where}: BEGIN SOLUTION inside the region opened at "
                    f"line {region['line']} (regions cannot nest)")
            block = out[comments_from:]
            todo = next((i for i, b in enumerate(block) if pat["todo"].search(b)), None)
            contract = block[todo:] if todo is not None else []
            todo_stretch = (bool(pat["todo"].search(block[todo]).group(1))
                            if todo is not None else None)
            begin_stretch = bool(begin.group(3)) if begin.group(2) else None
            if None not in (todo_stretch, begin_stretch) and todo_stretch != begin_stretch:
                kind = lambda s: "a stretch exercise" if s else "a core exercise"
                raise RegionError(
                    f"{where}: the TODO above says {kind(todo_stretch)}, BEGIN SOLUTION "
                    f"says {kind(begin_stretch)} (tag both `(chNN, stretch)` or neither)")
            stretch = bool(todo_stretch or begin_stretch)
            contract_text = comment_text(contract, c) if contract else ""
            region = {"line": lineno, "indent": begin.group(1),
                      "stretch": stretch, "raw": [line],
                      "suites": list(dict.fromkeys(STRETCH_SUITE.findall(contract_text))),
                      "stubs": [], "anchors_before": [], "anchors_after": [],
                      "seen_code": False,
                      "start": len(out) - len(contract),
                      "contract": contract_text,
                      "hints": [re.sub(r"^HINT\(\d+\): ?", "", comment_text(h, c))
                                for h in hints]}
            hints = []
            continue
        if hint and region is None:
            number = int(hint.group(1))
            if number != len(hints) + 1:
                raise RegionError(f"{where}: HINT({number}) should be HINT({len(hints) + 1}) "
                                  "(tiers are numbered 1, 2, 3, ...)")
            if not hints:
                hint_line = lineno
            hints.append([line])
            continue
        if hints and region is None:
            if pat["comment"].match(line) and not pat["end"].match(line) \
                    and not pat["stub"].match(line):
                hints[-1].append(line)  # a hint goes on over the comment lines below it
                continue
            raise RegionError(f"{display}:{hint_line}: HINT lines must sit directly "
                              "above BEGIN SOLUTION (after the TODO that states the contract)")
        if pat["end"].match(line):
            if region is None:
                raise RegionError(f"{where}: END SOLUTION without BEGIN SOLUTION")
            if keep_core and not region["stretch"]:
                out.extend(region["raw"] + [line])
            else:
                out.extend(region["anchors_before"])
                if region["stubs"]:
                    out.extend(region["stubs"])
                else:
                    out.append(region["indent"] + DEFAULT_STUB.format(c=c))
                out.extend(region["anchors_after"])
            exercises.append(Exercise(
                file="", line=region["start"] + 1, contract=region["contract"],
                hints=region["hints"], skeleton="\n".join(out[region["start"]:]),
                stretch=region["stretch"], suites=region["suites"]))
            region = None
            comments_from = len(out)
            continue
        stub = pat["stub"].match(line)
        if region is None:
            if stub:
                raise RegionError(f"{where}: STUB: line outside a "
                                  "BEGIN SOLUTION / END SOLUTION region")
            out.append(line)
            if not pat["comment"].match(line):
                comments_from = len(out)
            continue
        # Inside a region.
        region["raw"].append(line)
        if hint:
            raise RegionError(f"{where}: HINT line inside a BEGIN SOLUTION / END SOLUTION "
                              "region (hints go above BEGIN SOLUTION)")
        if stub:
            body = stub.group(1).rstrip()
            region["stubs"].append(region["indent"] + body if body else "")
            region["seen_code"] = True
        elif pat["anchor"].search(line):
            key = "anchors_after" if region["seen_code"] else "anchors_before"
            region[key].append(line)
        elif line.strip():
            region["seen_code"] = True
        # Answer lines are dropped.

    if region is not None:
        raise RegionError(f"{display}:{region['line']}: BEGIN SOLUTION "
                          "without END SOLUTION")
    if hints:
        raise RegionError(f"{display}:{hint_line}: HINT lines must sit directly "
                          "above BEGIN SOLUTION (after the TODO that states the contract)")
    return "\n".join(out), exercises


def add_header(text: str, rel: str, c: str) -> str:
    """Put the exercise-file header first, or after `#pragma once` / a shebang."""
    header = HEADER.format(c=c, path=rel)
    lines = text.split("\n")
    first = lines[0].strip() if lines else ""
    at = 1 if (first == "#pragma once" or first.startswith("#!")) else 0
    lines.insert(at, header)
    return "\n".join(lines)


def render(src: Path, rel: str, keep_core: bool = False) -> Output:
    """The chapter file for one solution file (`keep_core`: its "core done" version)."""
    raw = src.read_bytes()
    executable = bool(src.stat().st_mode & stat.S_IXUSR)
    c = comment_prefix(src)
    display = f"solutions/{rel}"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return Output(raw, executable)  # binary: copied verbatim
    if c is None:
        marker = re.search(r"\b(BEGIN|END) SOLUTION\b", text)
        if marker:
            lineno = text.count("\n", 0, marker.start()) + 1
            raise RegionError(
                f"{display}:{lineno}: answer markers in a file type with no "
                "known comment style (extend SLASH_SUFFIXES or HASH_SUFFIXES "
                "in tools/make_skeletons.py)")
        return Output(raw, executable)
    normalized = text.replace("\r\n", "\n")
    new, regions = transform(normalized, display, c, keep_core)
    if regions == 0 or keep_core:
        # No regions: copied verbatim. The core-done tree has no header (nobody edits it).
        return Output(raw if regions == 0 else new.encode("utf-8"), executable)
    return Output(add_header(new, rel, c).encode("utf-8"), executable)


def ignored(path: Path) -> bool:
    return path.name in IGNORED_NAMES or path.suffix in IGNORED_SUFFIXES


def walk_files(top: Path) -> list[Path]:
    """All files under `top`, sorted, skipping caches."""
    found = []
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if not ignored(Path(d)))
        for name in sorted(filenames):
            if not ignored(Path(name)):
                found.append(Path(dirpath) / name)
    return sorted(found)


def chapter_names(parent: Path) -> list[str]:
    if not parent.is_dir():
        return []
    return sorted(p.name for p in parent.iterdir()
                  if p.is_dir() and CHAPTER_DIR.match(p.name))


def select(names: list[str], chapter: str | None) -> list[str]:
    if chapter is None:
        return names
    return [n for n in names if n.startswith(chapter + "-")]


def expected_tree(root: Path, chapter: str | None,
                  keep_core: bool = False) -> dict[str, Output]:
    """Map from path relative to chapters/ to the content it must have.

    With `keep_core`: the "core done" tree (core regions kept, stretch ones stubbed).
    """
    solutions = root / "solutions"
    want: dict[str, Output] = {}
    for name in select(chapter_names(solutions), chapter):
        for src in walk_files(solutions / name):
            rel = src.relative_to(solutions).as_posix()
            want[rel] = render(src, rel, keep_core)
    return want


def actual_files(root: Path, chapter: str | None) -> list[str]:
    """Files now in the chapter dirs this generator owns."""
    chapters = root / "chapters"
    return [p.relative_to(chapters).as_posix()
            for name in select(chapter_names(chapters), chapter)
            for p in walk_files(chapters / name)]


def differs(path: Path, want: Output) -> bool:
    if not path.is_file() or path.is_symlink():
        return True
    if path.read_bytes() != want.data:
        return True
    return bool(path.stat().st_mode & stat.S_IXUSR) != want.executable


def solution_sources(root: Path, chapter: str | None):
    """(rel, text, comment prefix) of each source file of the chapter(s) in solutions/ that
    can hold exercise regions; rel is relative to solutions/."""
    solutions = root / "solutions"
    for name in select(chapter_names(solutions), chapter):
        for src in walk_files(solutions / name):
            c = comment_prefix(src)
            if c is None:
                continue
            try:
                text = src.read_text(encoding="utf-8").replace("\r\n", "\n")
            except UnicodeDecodeError:
                continue
            yield src.relative_to(solutions).as_posix(), text, c


def exercises(root: Path, chapter: str) -> list[Exercise]:
    """The exercises of chapter `chapter` ("04"), in order, read from solutions/."""
    found: list[Exercise] = []
    for rel, text, c in solution_sources(root, chapter):
        _, regions = parse(text, f"solutions/{rel}", c)
        order = exercise_number(text)
        for ex in regions:
            ex.file = rel
            ex.line += 1  # the exercise-file header comes first
            found.append((order, len(found), ex))
    # The core exercises first, then the stretch ones; each in the order the files' headers
    # give ("Chapter 8, exercise 2 of 4: ..."), which is the book's; files without a number
    # keep their place after the numbered ones.
    return [ex for _, _, ex in sorted(found, key=lambda e: (e[2].stretch, e[0], e[1]))]


def stretch_chapters(root: Path) -> list[str]:
    """The chapters ("09", "10") that have at least one stretch exercise."""
    return [name[:2] for name in chapter_names(root / "solutions")
            if any(ex.stretch for ex in exercises(root, name[:2]))]


def write_core_done(root: Path, chapter: str | None, outdir: Path) -> int:
    """Writes the "core done" tree of the chapters to outdir/NN-slug/ (unchanged files are
    not rewritten, so that builds from it stay incremental)."""
    want = expected_tree(root, chapter, keep_core=True)
    written = 0
    for rel, out in sorted(want.items()):
        path = outdir / rel
        if not differs(path, out):
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(out.data)
        os.chmod(path, 0o755 if out.executable else 0o644)
        written += 1
    print(f"core-done tree in {outdir}: {len(want)} files, {written} written")
    return 0


def touched_stretch(root: Path, chapter: str) -> list[str]:
    """The stretch exercises of chapter `chapter` ("11") whose region the student has edited
    in chapters/, as "FILE:LINE" of the skeleton's TODO ([] when every one is untouched: as
    generated). A region is the TODO's contract and the stub lines below it; code added right
    after the stub counts as an edit of it. The rest of the file (the core regions) may differ."""
    import difflib
    touched = []
    chapters = root / "chapters"
    for rel, text, c in solution_sources(root, chapter):
        skeleton, regions = parse(text, f"solutions/{rel}", c)
        spans = [(ex.line + 1, ex.line + 1 + len(ex.skeleton.split("\n")))  # 1-based, end exclusive,
                 for ex in regions if ex.stretch]                          # after the header line
        if not spans:
            continue
        want = add_header(skeleton, rel, c).split("\n")
        try:
            have = (chapters / rel).read_text(encoding="utf-8").replace("\r\n", "\n").split("\n")
        except (OSError, UnicodeDecodeError):
            touched += [f"chapters/{rel}:{a}" for a, _ in spans]
            continue
        if have == want:
            continue
        ops = difflib.SequenceMatcher(None, want, have, autojunk=False).get_opcodes()
        for a, b in spans:
            lo, hi = a - 1, b - 1  # 0-based [lo, hi)
            for tag, i1, i2, _j1, _j2 in ops:
                if tag == "equal":
                    continue
                # A change inside the region, or an insertion just after its last line.
                if (i1 < hi and i2 > lo) or (i1 == i2 and lo < i1 <= hi):
                    touched.append(f"chapters/{rel}:{a}")
                    break
    return touched


def exercise_number(text: str) -> int:
    """The first exercise number a file's first lines state, or a large number if none."""
    m = re.search(r"exercises? (\d+)", "\n".join(text.split("\n")[:3]))
    return int(m.group(1)) if m else 1_000_000


def check(root: Path, chapter: str | None) -> int:
    want = expected_tree(root, chapter)
    chapters = root / "chapters"
    stale = []
    for rel, out in sorted(want.items()):
        path = chapters / rel
        if not path.exists():
            stale.append(f"chapters/{rel} (missing)")
        elif differs(path, out):
            stale.append(f"chapters/{rel} (differs)")
    for rel in actual_files(root, chapter):
        if rel not in want:
            stale.append(f"chapters/{rel} (no solution file: should be deleted)")
    if stale:
        for line in stale:
            print(line)
        print("chapters/ is stale: run python3 tools/make_skeletons.py")
        return 1
    print(f"chapters/ is up to date ({len(want)} files)")
    return 0


def generate(root: Path, chapter: str | None) -> int:
    want = expected_tree(root, chapter)  # raises before anything is written
    chapters = root / "chapters"
    written = removed = 0
    for rel, out in sorted(want.items()):
        path = chapters / rel
        if not differs(path, out):
            continue  # leave mtimes alone so builds stay incremental
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.is_symlink():
            path.unlink()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(out.data)
        mode = 0o755 if out.executable else 0o644
        os.chmod(path, mode)
        written += 1

    # Delete what no longer has a solution file, and chapter dirs whose
    # solution chapter is gone.
    solution_chapters = set(chapter_names(root / "solutions"))
    for name in select(chapter_names(chapters), chapter):
        top = chapters / name
        if name not in solution_chapters:
            removed += sum(1 for _ in walk_files(top))
            shutil.rmtree(top)
            continue
        for p in walk_files(top):
            if p.relative_to(chapters).as_posix() not in want:
                p.unlink()
                removed += 1
        # Remove directories left empty, deepest first.
        for dirpath, _dirs, _files in sorted(os.walk(top), reverse=True):
            d = Path(dirpath)
            if d != top and not any(d.iterdir()):
                d.rmdir()

    print(f"chapters/: {len(want)} files, {written} written, {removed} removed")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Generate chapters/ (student skeletons) from solutions/.")
    parser.add_argument("--check", action="store_true",
                        help="do not write; exit 1 if chapters/ is stale")
    parser.add_argument("--chapter", metavar="NN",
                        help="only this chapter, e.g. 04")
    parser.add_argument("--core-only", metavar="OUTDIR", type=Path,
                        help="write the 'core done' tree (core regions kept, stretch "
                             "regions stubbed) to OUTDIR/NN-slug/ instead of chapters/")
    parser.add_argument("--list-stretch", action="store_true",
                        help="print the chapters (NN) that have stretch exercises")
    parser.add_argument("--stretch-untouched", action="store_true",
                        help="with --chapter: exit 0 if every stretch region of chapters/NN-* is as "
                             "generated (the student has not started one), 1 (naming them) if not")
    parser.add_argument("--root", metavar="DIR", type=Path,
                        default=Path(__file__).resolve().parent.parent,
                        help="repository root (default: this script's ../)")
    args = parser.parse_args(argv)

    root = args.root.resolve()
    if not (root / "solutions").is_dir():
        print(f"make_skeletons: no solutions/ directory in {root}", file=sys.stderr)
        return 2

    chapter = None
    if args.chapter is not None:
        digits = args.chapter.lower().removeprefix("ch")
        if not digits.isdigit():
            parser.error(f"--chapter wants a number like 04, got {args.chapter!r}")
        chapter = f"{int(digits):02d}"
        if not select(chapter_names(root / "solutions"), chapter):
            print(f"make_skeletons: no solutions/{chapter}-* directory",
                  file=sys.stderr)
            return 2

    try:
        if args.stretch_untouched:
            if chapter is None:
                parser.error("--stretch-untouched needs --chapter NN")
            touched = touched_stretch(root, chapter)
            for where in touched:
                print(f"{where}: a stretch exercise, edited")
            return 1 if touched else 0
        if args.list_stretch:
            print(" ".join(n for n in stretch_chapters(root) if chapter in (None, n)))
            return 0
        if args.core_only is not None:
            return write_core_done(root, chapter, args.core_only.resolve())
        return check(root, chapter) if args.check else generate(root, chapter)
    except RegionError as err:
        print(f"make_skeletons: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
