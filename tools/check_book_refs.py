#!/usr/bin/env python3
"""What the book names in backticks must exist in the repository.

A page that cites a test, a file, a function or a make command that was renamed or never
existed sends the student looking for nothing. This check reads every page of book/src/
(and README.md) and fails on:

- a test, `Suite.Name` (also `Suite.Name/3`, `Prefix/Suite.Name`, `Suite.*`), that no
  TEST/TEST_F/TEST_P under tests/ defines;
- a path of ours (`include/...`, `tests/...`, `tools/...`, ...) that does not exist
  (a `demo/serve` names its program: demo/serve.cpp will do; `NN` is a placeholder);
- a call, `name(...)`, or a snake_case name of six characters or more, that appears
  nowhere in the code, the tests, the reference or the tools;
- `make hint-N EXERCISE=K` where chapter N has fewer than K exercises, and a `make X`
  that the Makefile has no rule for;
- a chapter page whose headings do not number its core exercises 1, 2, ... as `make
  hint-N` does (a heading may cover two: "Exercises 1 and 2: ..."), or number one that
  the chapter does not have; and a `make hint-N EXERCISE=K` under a heading about
  another exercise.

    python3 tools/check_book_refs.py            # make test runs it
    python3 tools/check_book_refs.py PAGE...    # only these pages
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

OUR_DIRS = ("include", "solutions", "chapters", "tests", "bench", "tools", "emu",
            "reference", "book", "demo", "cmake")
GENERATED = ("book/book", "book/src/generated")  # written by make book: not in a fresh clone
CODE_GLOBS = ("include/**/*", "solutions/**/*", "emu/**/*", "tests/**/*", "demo/**/*",
              "bench/**/*", "tools/**/*.py", "tools/**/*.sh", "reference/**/*.py",
              "cmake/**/*", "Makefile", "CMakeLists.txt", "book/figures/*.py")
CODE_SUFFIXES = {"", ".h", ".cuh", ".cu", ".cpp", ".py", ".sh", ".cmake", ".txt", ".toml"}

TEST_REF = re.compile(r"`(?:[A-Za-z0-9_]+/)?([A-Z][A-Za-z0-9_]*)\.([A-Z][A-Za-z0-9_]*|\*)(?:/[0-9*]+)?`")
TEST_DEF = re.compile(r"\bTEST(?:_F|_P)?\(\s*([A-Za-z0-9_]+)\s*,\s*([A-Za-z0-9_]+)\s*\)")
PATH_REF = re.compile(r"`((?:%s)/[A-Za-z0-9_./*-]+)`" % "|".join(OUR_DIRS))
CALL_REF = re.compile(r"`(?:[A-Za-z_][A-Za-z0-9_]*::)*([A-Za-z_][A-Za-z0-9_]{3,})(?:<[^`(]*>)?\(")
SNAKE_REF = re.compile(r"`([a-z_][a-z0-9]*_[a-z0-9_]+)`")
MAKE_REF = re.compile(r"`make ([a-z][a-z0-9-]*)((?: [A-Z_]+=[^ `]+)*)`")
HINT_TARGET = re.compile(r"hint-([0-9]+)$")


def code_text(root: Path) -> str:
    parts = []
    for pattern in CODE_GLOBS:
        for path in root.glob(pattern):
            if path.name.startswith("test_check_book"):
                continue  # their planted pages name what does not exist
            if path.is_file() and (path.suffix in CODE_SUFFIXES or path.name == "Makefile"):
                try:
                    parts.append(path.read_text(encoding="utf-8", errors="ignore"))
                except OSError:
                    pass
    return "\n".join(parts)


def defined_tests(root: Path) -> set[tuple[str, str]]:
    found = set()
    for path in (root / "tests").rglob("*"):
        if path.suffix in (".cu", ".cpp", ".h", ".cuh"):
            found.update(TEST_DEF.findall(path.read_text(encoding="utf-8", errors="ignore")))
    return found


def make_targets(root: Path) -> list[re.Pattern]:
    rules = re.findall(r"^([a-z%][a-z0-9%-]*):", (root / "Makefile").read_text(), re.M)
    return [re.compile("^" + re.escape(r).replace("%", "[A-Za-z0-9]+") + "$") for r in rules]


def exercise_counts(root: Path) -> dict[int, tuple[int, int]]:
    """Chapter -> (its exercises, its core ones), as make hint-N numbers them."""
    import make_skeletons
    counts = {}
    for name in make_skeletons.chapter_names(root / "solutions"):
        found = make_skeletons.exercises(root, name[:2])
        counts[int(name[:2])] = (len(found), sum(not ex.stretch for ex in found))
    return counts


HEADING_NUMBERS = re.compile(r"exercises? ([0-9]+)(?:,? (?:and|to) ([0-9]+))?", re.I)


def check_headings(text: str, page: str, ctx: dict, chapter_text: str | None = None) -> list[str]:
    """A chapter's headings number its exercises as make hint-N does. chapter_text: all the
    pages of the chapter (8, 8.1, 8.2), whose headings together must cover its exercises;
    by default this page's."""
    m = re.match(r"ch([0-9]{2})-", page)
    if not m or int(m.group(1)) not in ctx["exercises"]:
        return []
    chapter = int(m.group(1))
    total, core = ctx["exercises"][chapter]
    seen, seen_errors = set(), []
    for line in (text if chapter_text is None else chapter_text).splitlines():
        if line.startswith("#"):
            for a, b in HEADING_NUMBERS.findall(line):
                seen.update(range(int(a), int(b or a) + 1))
    # Under a heading about exercise J, a `make hint-N EXERCISE=K` must have K = J.
    section = set()
    for line_no, line in enumerate(text.splitlines(), 1):
        if line.startswith("#"):
            section = {k for a, b in HEADING_NUMBERS.findall(line) for k in range(int(a), int(b or a) + 1)}
            if not section and re.search(r"stretch exercise", line, re.I) and total - core == 1:
                section = {total}
            continue
        for k in re.findall(rf"`make hint-{chapter} EXERCISE=([0-9]+)`", line):
            if section and int(k) not in section:
                errors_here = f"{page}:{line_no}: make hint-{chapter} EXERCISE={k} under a heading " \
                              f"about exercise {' and '.join(map(str, sorted(section)))}"
                seen_errors.append(errors_here)
    errors = list(seen_errors)
    errors += [f"{page}: no heading for exercise {k} (make hint-{chapter} has {core} core "
              f"exercises)" for k in range(1, core + 1) if k not in seen]
    errors += [f"{page}: a heading names exercise {k}, but make hint-{chapter} has {total}"
               for k in sorted(seen) if k > total]
    return errors


def path_exists(root: Path, ref: str) -> bool:
    ref = ref.rstrip("/.")
    if "NN" in ref or ref.startswith(GENERATED):
        return True  # a placeholder (solutions/NN-slug/), or what make book writes
    if "*" in ref:
        return any(root.glob(ref))
    p = root / ref
    return p.exists() or any(p.with_suffix(s).exists() for s in (".cpp", ".cu", ".py"))


def check_page(text: str, page: str, root: Path, ctx: dict) -> list[str]:
    errors = []
    # Code blocks (included or typed output) and comments are blanked, keeping line numbers.
    blank = lambda m: "\n" * m.group(0).count("\n")  # noqa: E731
    text = re.sub(r"```.*?```", blank, text, flags=re.S)
    text = re.sub(r"<!--.*?-->", blank, text, flags=re.S)
    for line_no, line in enumerate(text.splitlines(), 1):
        where = f"{page}:{line_no}"
        for suite, name in TEST_REF.findall(line):
            ok = (any(s == suite for s, _ in ctx["tests"]) if name == "*"
                  else (suite, name) in ctx["tests"])
            if not ok:
                errors.append(f"{where}: no test {suite}.{name} under tests/")
        for ref in PATH_REF.findall(line):
            if not path_exists(root, ref):
                errors.append(f"{where}: no file {ref}")
        for name in set(CALL_REF.findall(line)) | {s for s in SNAKE_REF.findall(line) if len(s) >= 6}:
            if name not in ctx["code"]:
                errors.append(f"{where}: {name} appears nowhere in the code, tests, reference or tools")
        for target, args in MAKE_REF.findall(line):
            if not any(r.match(target) for r in ctx["targets"]) and not target.endswith("-N"):
                errors.append(f"{where}: the Makefile has no rule for make {target}")
            hint = HINT_TARGET.match(target)
            k = re.search(r"EXERCISE=([0-9]+)", args)
            if hint and k:
                chapter, number = int(hint.group(1)), int(k.group(1))
                have = ctx["exercises"].get(chapter, (0, 0))[0]
                if number > have:
                    errors.append(f"{where}: make hint-{chapter} EXERCISE={number}, but chapter "
                                  f"{chapter} has {have} exercises")
    return errors


def main(argv: list[str]) -> int:
    root = ROOT
    pages = [Path(a) for a in argv[1:]] or sorted((root / "book" / "src").glob("*.md")) + [root / "README.md"]
    ctx = {"code": code_text(root), "tests": defined_tests(root), "targets": make_targets(root),
           "exercises": exercise_counts(root)}
    texts = {page: page.read_text(encoding="utf-8") for page in pages}
    errors = []
    for page, text in texts.items():
        # A chapter's pages share its number: ch08-serving-loop.md, ch08b-..., ch08c-...
        same = "\n".join(t for p, t in texts.items() if p.name[:4] == page.name[:4])
        errors += check_page(text, page.name, root, ctx) + check_headings(text, page.name, ctx, same)
    for e in errors:
        print(e)
    if errors:
        print(f"check_book_refs: {len(errors)} problem(s): the book names what the repository does not have")
        return 1
    print(f"check_book_refs: every test, file, function and make command the book names exists "
          f"({len(pages)} pages)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
