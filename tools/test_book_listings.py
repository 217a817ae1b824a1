"""Tests for tools/book_listings.py, the mdBook preprocessor that shows a solution in the
book without the skeleton generator's markers. Run: .venv/bin/python -m pytest tools/"""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import book_listings  # noqa: E402
import make_skeletons  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "book_listings.py"

SOLUTION = textwrap.dedent("""\
    // ANCHOR: kernel
    int answer() {
      // TODO(ch01): return the answer. The contract stays.
      // HINT(1): a nudge
      //   that goes on over two lines.
      // HINT(2): the recipe
      // BEGIN SOLUTION(ch01)
      // STUB: PA_TODO("ch01");
      int a = 6;  // a comment of the answer stays
      return a * 7;
      // END SOLUTION
    }
    // ANCHOR_END: kernel
    """)
VIEW = textwrap.dedent("""\
    // ANCHOR: kernel
    int answer() {
      // TODO(ch01): return the answer. The contract stays.
      int a = 6;  // a comment of the answer stays
      return a * 7;
    }
    // ANCHOR_END: kernel
    """)


def markers(text, c):
    pat = make_skeletons.marker_patterns(c)
    return [line for line in text.split("\n")
            if any(pat[k].match(line) for k in ("begin", "end", "stub", "hint"))]


def test_view_drops_the_markers_and_hints_and_keeps_the_rest():
    assert book_listings.listing_view(SOLUTION, "//") == VIEW


def test_view_of_a_hash_file():
    text = "def f():\n    # TODO(ch01): f\n    # HINT(1): x\n    #   y\n    # BEGIN SOLUTION\n" \
           "    # STUB: raise NotImplementedError\n    return 1\n    # END SOLUTION\n"
    assert book_listings.listing_view(text, "#") == "def f():\n    # TODO(ch01): f\n    return 1\n"


def test_every_solution_file_views_without_markers():
    """On the real solutions: no marker is left, every TODO contract and ANCHOR is kept, and
    the view is the file with exactly the marker lines (and hint continuations) gone."""
    files = [p for p in sorted((ROOT / "solutions").rglob("*"))
             if p.is_file() and make_skeletons.comment_prefix(p)]
    marked = 0
    for path in files:
        c = make_skeletons.comment_prefix(path)
        text = path.read_text()
        view = book_listings.listing_view(text, c)
        assert markers(view, c) == [], path
        keep = [line for line in text.split("\n") if "TODO(ch" in line or "ANCHOR" in line]
        assert [line for line in view.split("\n") if "TODO(ch" in line or "ANCHOR" in line] == keep
        # The view is a subsequence of the file's lines.
        it = iter(text.split("\n"))
        assert all(line in it for line in view.split("\n")), path
        marked += bool(markers(text, c))
    assert marked >= 30  # (the solutions hold the course's exercises)


def test_the_preprocessor_points_includes_at_the_view(tmp_path):
    """mdBook's protocol: [context, book] on stdin, the book on stdout; an include of a
    marked file by anchor (or whole) goes to its view; by line numbers, or of a file
    without markers, it is left alone; an escaped include too."""
    repo = tmp_path
    (repo / "solutions" / "01-x").mkdir(parents=True)
    (repo / "solutions" / "01-x" / "k.cu").write_text(SOLUTION)
    (repo / "include").mkdir()
    (repo / "include" / "plain.h").write_text("int plain;\n")
    (repo / "book" / "src").mkdir(parents=True)
    content = ("```cpp\n{{#include ../../solutions/01-x/k.cu:kernel}}\n```\n"
               "{{#include ../../solutions/01-x/k.cu}}\n"
               "{{#include ../../solutions/01-x/k.cu:2:4}}\n"
               "{{#include ../../include/plain.h}}\n"
               "\\{{#include ../../solutions/01-x/k.cu}}\n")
    chapter = {"Chapter": {"name": "One", "content": content, "number": [1], "sub_items": [],
                           "path": "one.md", "source_path": "one.md", "parent_names": []}}
    context = {"root": str(repo / "book"), "config": {"book": {"src": "src"}},
               "renderer": "html", "mdbook_version": "0.5.4"}
    book = {"items": [chapter, "Separator"]}
    out = subprocess.run([sys.executable, str(SCRIPT)], input=json.dumps([context, book]),
                         capture_output=True, text=True, check=True).stdout
    got = json.loads(out)["items"][0]["Chapter"]["content"]
    assert got == ("```cpp\n{{#include generated/listings/solutions/01-x/k.cu:kernel}}\n```\n"
                   "{{#include generated/listings/solutions/01-x/k.cu}}\n"
                   "{{#include ../../solutions/01-x/k.cu:2:4}}\n"
                   "{{#include ../../include/plain.h}}\n"
                   "\\{{#include ../../solutions/01-x/k.cu}}\n")
    view = repo / "book" / "src" / "generated" / "listings" / "solutions" / "01-x" / "k.cu"
    assert view.read_text() == VIEW
    assert subprocess.run([sys.executable, str(SCRIPT), "supports", "html"]).returncode == 0
