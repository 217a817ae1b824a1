#!/usr/bin/env python3
"""The words of prose on each page of the book: a lesson reads at a lesson's length.

Counts the words a reader reads as prose: code blocks, tables, {{#include}} lines, HTML
comments, headings and image lines are left out. A chapter page may have at most LIMIT
words (4,500). Pages over it today are listed in OVER with the count they may not grow
past, until they are split or paced (issue 62's work); a listed page that is back under
the limit must leave the list.

    python3 tools/book_words.py            # the table, and the check (exit 1 on a problem)
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 4500
# Pages over the limit today, and the most they may have until they are split.
OVER: dict[str, int] = {}

FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
COMMENT = re.compile(r"<!--.*?-->", re.S)
WORD = re.compile(r"[A-Za-z0-9][\w'’.,:/-]*")


def prose_words(text: str) -> int:
    text = COMMENT.sub("", FENCE.sub("", text))
    n = 0
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith(("|", "#", "{{#include", "![")):
            continue
        s = re.sub(r"\]\([^)]*\)", "]", s)  # a link counts its words, not its target
        n += len(WORD.findall(re.sub(r"`[^`]*`", "x", s)))
    return n


def problems(counts: dict[str, int], limit: int = LIMIT, over: dict[str, int] | None = None) -> list[str]:
    over = OVER if over is None else over
    out = []
    for page, n in sorted(counts.items()):
        allowed = max(limit, over.get(page, 0))
        if n > allowed:
            out.append(f"{page}: {n:,} words of prose, over "
                       + (f"its {allowed:,} (it is listed as over the {limit:,}-word limit: shorten it)"
                          if page in over else f"the {limit:,}-word limit of a chapter page")
                       + ": split the page or move history to Appendix C")
        elif page in over and n <= limit:
            out.append(f"{page}: {n:,} words, back under the limit: remove it from OVER in tools/book_words.py")
    return out


def main() -> int:
    pages = sorted((ROOT / "book" / "src").glob("ch[0-9]*.md"))
    counts = {p.name: prose_words(p.read_text()) for p in pages}
    for name, n in counts.items():
        print(f"  {name:40} {n:6,}" + ("  over" if n > LIMIT else ""))
    bad = problems(counts)
    for b in bad:
        print(b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
