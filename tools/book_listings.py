#!/usr/bin/env python3
"""mdBook preprocessor: a listing of a solution shows its code and its contract, not the
skeleton generator's markers.

A page includes a solution by anchor, `{{#include ../../solutions/NN-slug/FILE:anchor}}`.
The file is marked for tools/make_skeletons.py:

    // TODO(chNN): the contract           <- shown: it is what the code must do
    // HINT(1): a nudge                   <- not shown: `make hint-N` shows the hints
    //   (a hint's continuation lines)
    // BEGIN SOLUTION(chNN)               <- not shown
    // STUB: PA_TODO("chNN");             <- not shown: the skeleton's line
    ...the answer...                      <- shown
    // END SOLUTION                       <- not shown

This preprocessor runs before mdBook's `links` (book/book.toml). For every include of a
file that holds such markers, it writes the file's listing view (the file without its
marker lines; ANCHOR lines kept, so mdBook finds the anchor as before) to
SRC/generated/listings/PATH (PATH relative to the repository; rewritten only when it
changes) and points the include there. mdBook's own include then cuts the anchor from it.
Nothing is copied into the pages; the view is made from the solution at every build.

An include by line numbers (FILE:10:20) is left as it is: the numbers count the file's own
lines. If its lines hold markers, the book check (tools/check_book.py) names the listing.

    book_listings.py supports RENDERER    (mdBook asks; every renderer is supported)
    book_listings.py < [context, book]    (mdBook's preprocessor protocol, JSON)
    book_listings.py --view FILE          (print FILE's listing view)
"""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_skeletons import comment_prefix, marker_patterns  # noqa: E402

# mdBook's include: {{#include PATH}} or {{#include PATH:SUFFIX}}; \{{#include ...}} is
# escaped (mdBook prints it as it is).
INCLUDE = re.compile(r"(?<!\\)\{\{#include\s+([^}:\s]+)(:[^}\s]*)?\s*\}\}")
NUMERIC = re.compile(r"^:\d*(:\d*)?$")
VIEWS = Path("generated") / "listings"  # under the book's src


def listing_view(text: str, c: str) -> str:
    """TEXT without the generator's marker lines (comment prefix C): BEGIN SOLUTION, END
    SOLUTION, STUB:, and each HINT(k): with the comment lines that continue it (up to the
    BEGIN SOLUTION below). Every other line is kept, the TODO contract and ANCHOR lines
    among them. A file without markers comes back unchanged."""
    pat = marker_patterns(c)
    out = []
    in_hint = False
    for line in text.split("\n"):
        if pat["begin"].match(line) or pat["end"].match(line) or pat["stub"].match(line):
            in_hint = False
            continue
        if pat["hint"].match(line):
            in_hint = True
            continue
        if in_hint:
            if pat["comment"].match(line) and not pat["anchor"].search(line):
                continue  # the hint goes on
            in_hint = False
        out.append(line)
    return "\n".join(out)


def has_markers(text: str, c: str) -> bool:
    pat = marker_patterns(c)
    return any(pat[k].match(line) for line in text.split("\n")
               for k in ("begin", "end", "stub", "hint"))


def view_of(target: Path, repo: Path, views: Path) -> Path | None:
    """The listing view of TARGET, written under VIEWS; None where TARGET has no markers
    (or is not a file of the repository with a known comment style)."""
    c = comment_prefix(target)
    if c is None or not target.is_file():
        return None
    try:
        rel = target.resolve().relative_to(repo)
    except ValueError:
        return None
    text = target.read_text(encoding="utf-8")
    if not has_markers(text, c):
        return None
    out = views / rel
    view = listing_view(text, c)
    if not out.is_file() or out.read_text(encoding="utf-8") != view:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(view, encoding="utf-8")
    return out


def rewrite(content: str, chapter_dir: Path, repo: Path, views: Path) -> str:
    """CONTENT (a page's markdown in CHAPTER_DIR) with each include of a marked file by
    anchor (or whole) pointed at the file's listing view."""
    def one(m: re.Match) -> str:
        path, suffix = m.group(1), m.group(2) or ""
        if NUMERIC.match(suffix) and suffix:
            return m.group(0)
        out = view_of(chapter_dir / path, repo, views)
        if out is None:
            return m.group(0)
        return "{{#include " + os.path.relpath(out, chapter_dir) + suffix + "}}"
    return INCLUDE.sub(one, content)


def items_of(book: dict) -> list:
    # mdBook 0.5 calls the list "items", 0.4 "sections".
    return book.get("items", book.get("sections", []))


def preprocess(context: dict, book: dict) -> dict:
    root = Path(context["root"]).resolve()
    src = root / context["config"]["book"].get("src", "src")
    repo = root.parent
    views = src / VIEWS

    def walk(items):
        for item in items:
            ch = item.get("Chapter") if isinstance(item, dict) else None
            if not ch:
                continue
            if ch.get("content") and ch.get("path"):
                chapter_dir = (src / ch["path"]).parent
                ch["content"] = rewrite(ch["content"], chapter_dir, repo, views)
            walk(ch.get("sub_items", []))
    walk(items_of(book))
    return book


def main(argv: list[str]) -> int:
    if len(argv) >= 1 and argv[0] == "supports":
        return 0
    if len(argv) == 2 and argv[0] == "--view":
        path = Path(argv[1])
        c = comment_prefix(path)
        text = path.read_text(encoding="utf-8")
        sys.stdout.write(listing_view(text, c) if c else text)
        return 0
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    context, book = json.load(sys.stdin)
    json.dump(preprocess(context, book), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
