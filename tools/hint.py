#!/usr/bin/env python3
"""make hint-N: the next hint for chapter N, one tier at a time.

Every exercise (a TODO(chNN) in chapters/) has a contract, which the skeleton shows,
and two or three hints, from a nudge to the full recipe. Each call reveals one more
tier of one exercise and remembers it in .hints/revealed.json (git-ignored; delete it,
or pass --reset, to start over). The hints are read from solutions/ (the HINT(k):
lines that tools/make_skeletons.py keeps out of chapters/).

    python3 tools/hint.py 4                # the first unfinished exercise, next tier
    python3 tools/hint.py 4 --exercise 2   # exercise 2 of chapter 4, next tier
    python3 tools/hint.py 4 --exercise all # every exercise of chapter 4, next tier
    python3 tools/hint.py 4 --level 2      # up to tier 2 (of the chosen exercise)
    python3 tools/hint.py 4 --list         # the exercises, their state, tiers seen
    python3 tools/hint.py 4 --reset        # forget what chapter 4 revealed

The core exercises (TODO(chNN)) come first; the stretch ones (TODO(chNN, stretch): optional,
harder, counted apart by make progress) after them, marked as such.

An exercise is "unfinished" while its stub (PA_TODO or "(your code here)") is still
in chapters/ just below its TODO; once you have written code there, `make hint-N`
moves on to the next untouched one (ask for a finished one with --exercise K).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_skeletons  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
STATE = Path(".hints") / "revealed.json"


def key(ex) -> str:
    return f"{ex.file}:{ex.ordinal}"


def load_state(root: Path) -> dict:
    try:
        return json.loads((root / STATE).read_text())
    except (OSError, ValueError):
        return {}


def save_state(root: Path, state: dict) -> None:
    path = root / STATE
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")


def untouched(root: Path, ex) -> bool:
    """True while chapters/ still holds the exercise's TODO and stub as generated."""
    try:
        text = (root / "chapters" / ex.file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    norm = lambda t: "\n".join(line.rstrip() for line in t.replace("\r\n", "\n").split("\n"))
    return norm(ex.skeleton) in norm(text)


def indent(text: str, by: str = "    ") -> str:
    return "\n".join(by + line if line.strip() else "" for line in text.split("\n"))


def show(ex, number: int, total: int, level: int, fresh: bool) -> None:
    state = "not started" if fresh else "edited"
    if ex.stretch:
        state = f"stretch, optional; {state}"
    print(f"== Chapter {int(ex.file[:2])}, exercise {number} of {total} ({state}): "
          f"chapters/{ex.file}:{ex.line}")
    if ex.contract:
        print("   What must hold (the TODO):")
        print(indent(ex.contract.split(":", 1)[1].strip() if ex.contract.startswith("TODO(")
                     else ex.contract, "     "))
    if not ex.hints:
        print("   This exercise has no hints; the chapter's book page explains it.")
        return
    for k in range(1, level + 1):
        last = " (the last: the full recipe)" if k == len(ex.hints) and k > 1 else ""
        print(f"   Hint {k} of {len(ex.hints)}{last}:")
        print(indent(ex.hints[k - 1], "     "))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Tiered hints for a chapter's exercises.")
    parser.add_argument("chapter", help="chapter number, e.g. 4")
    parser.add_argument("--exercise", "-e", default="",
                        help="exercise number (1, 2, ...) or 'all' (default: the first unfinished)")
    parser.add_argument("--level", "-l", type=int, default=0,
                        help="show the tiers up to this one (default: one more than last time)")
    parser.add_argument("--list", action="store_true", help="list the exercises")
    parser.add_argument("--reset", action="store_true", help="forget the revealed tiers")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    root = args.root.resolve()
    digits = args.chapter.lower().removeprefix("ch")
    if not digits.isdigit():
        print(f"hint: not a chapter number: {args.chapter!r} (try: make hint-4)", file=sys.stderr)
        return 2
    chapter = f"{int(digits):02d}"
    try:
        exs = make_skeletons.exercises(root, chapter)
    except make_skeletons.RegionError as err:
        print(f"hint: {err}", file=sys.stderr)
        return 2
    if not exs:
        names = " ".join(make_skeletons.chapter_names(root / "solutions"))
        print(f"hint: chapter {int(digits)} has no exercises. Chapters: {names}", file=sys.stderr)
        return 2
    seen: dict[str, int] = {}
    for ex in exs:  # the ordinal of a region within its file: a key that survives edits elsewhere
        seen[ex.file] = seen.get(ex.file, 0) + 1
        ex.ordinal = seen[ex.file]

    state = load_state(root)
    if args.reset:
        for ex in exs:
            state.pop(key(ex), None)
        save_state(root, state)
        print(f"Forgot the hints revealed for chapter {int(chapter)}.")
        return 0

    fresh = [untouched(root, ex) for ex in exs]
    if args.list:
        n_stretch = sum(ex.stretch for ex in exs)
        print(f"== Chapter {int(chapter)}: {len(exs)} exercises"
              + (f" ({len(exs) - n_stretch} core, then {n_stretch} stretch: optional)"
                 if n_stretch else ""))
        for i, ex in enumerate(exs, 1):
            print(f"   {i}. {'[stretch] ' if ex.stretch else ''}chapters/{ex.file}:{ex.line}  "
                  f"{'not started' if fresh[i - 1] else 'edited'}, "
                  f"hints seen {state.get(key(ex), 0)} of {len(ex.hints)}")
        return 0

    if args.exercise.lower() == "all":
        chosen = list(range(len(exs)))
    elif args.exercise:
        if not args.exercise.isdigit() or not 1 <= int(args.exercise) <= len(exs):
            print(f"hint: chapter {int(chapter)} has exercises 1 to {len(exs)}; "
                  f"got EXERCISE={args.exercise}", file=sys.stderr)
            return 2
        chosen = [int(args.exercise) - 1]
    else:
        # The first exercise still untouched; else the first with hints left to show.
        pick = next((i for i, f in enumerate(fresh) if f), None)
        if pick is None:
            pick = next((i for i, ex in enumerate(exs) if state.get(key(ex), 0) < len(ex.hints)), 0)
        chosen = [pick]

    for n, i in enumerate(chosen):
        ex = exs[i]
        have = state.get(key(ex), 0)
        level = args.level if args.level > 0 else have + 1
        level = max(0, min(level, len(ex.hints)))
        state[key(ex)] = max(have, level)
        if n:
            print()
        show(ex, i + 1, len(exs), level, fresh[i])
        if ex.hints and args.level <= 0 and have >= len(ex.hints):
            print("   (No more tiers: that was the full recipe. Compare with the solution in\n"
                  f"   solutions/{ex.file}, or run make test-solution-{int(chapter)}.)")
    save_state(root, state)

    print()
    if len(chosen) == 1:
        ex = exs[chosen[0]]
        more = state[key(ex)] < len(ex.hints)
        nxt = [f"make hint-{int(chapter)}" + ("" if not args.exercise else f" EXERCISE={chosen[0] + 1}")
               + " for the next tier"] if more else []
        if len(exs) > 1:
            nxt.append(f"EXERCISE=1..{len(exs)} for another exercise")
        nxt.append(f"make test-chapter-{int(chapter)} to check your code")
        print("   Next: " + ";\n         ".join(nxt) + ".")
    else:
        print(f"   Next: make hint-{int(chapter)} EXERCISE=all for the next tier of each;\n"
              f"         make test-chapter-{int(chapter)} to check your code.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
