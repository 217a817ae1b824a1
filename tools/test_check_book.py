"""The book check's own tests: a tiny built "book" with one planted problem a page, each of
which must be found (and named), and a clean page that must pass. Needs Chromium and
Playwright (tools/setup.sh installs both); skipped, saying so, where they are missing."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import check_book  # noqa: E402

CHROMIUM = check_book.find_chromium(None)
pytest.importorskip("playwright", reason="playwright is not installed (tools/setup.sh)")
if not CHROMIUM:
    pytest.skip("Chromium is not installed (tools/setup.sh)", allow_module_level=True)

LAYOUT_CSS = (Path(__file__).resolve().parent.parent / "book" / "theme" / "layout.css").read_text()
WIDE_ROW = "<tr>" + "".join(f"<td>column&nbsp;number&nbsp;{i}</td>" for i in range(40)) + "</tr>"
WIDE_TABLE = f'<div class="table-wrapper"><table>{WIDE_ROW}{WIDE_ROW}</table></div>'
LONG_LINE = "x = " + "1 + " * 200 + "1"


def page(body, head=""):
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'>"
            f"<style>main {{ max-width: 750px; margin: 0 auto; }} .table-wrapper {{ overflow-x: auto; }}"
            f"</style>{head}</head><body><main><h1 id='top'>Page</h1>{body}</main></body></html>")


PAGES = {
    "index.html": page("<h2 id='here'>Here</h2><p><a href='clean.html#here'>ok</a> "
                       "<a href='#top'>ok</a> <a href='https://example.com/x#y'>outside</a></p>"),
    "clean.html": page(f"<h2 id='here'>Here</h2><pre><code style='display:block; overflow-x:auto'>{LONG_LINE}</code></pre>"
                       f"{WIDE_TABLE}", head=f"<style>{LAYOUT_CSS}</style>"),
    "anchor.html": page("<h2 id='sec'>Section</h2><p><a href='index.html#nowhere'>a bad anchor</a></p>"),
    "missing.html": page("<p><a href='gone.html'>a missing page</a></p>"),
    "console.html": page("<script>console.error('planted error');</script>"),
    "exception.html": page("<script>undefinedFunction();</script>"),
    "image.html": page("<h2 id='fig'>Figure</h2><img src='no-such.svg' alt='planted'>"),
    "alt.html": page("<h2 id='fig'>Figure</h2><img src='data:image/svg+xml,"
                     "%3Csvg xmlns=%22http://www.w3.org/2000/svg%22 width=%2210%22 height=%2210%22/%3E'>"),
    "table.html": page(f"<h2 id='t'>Table</h2>{WIDE_TABLE}"),
    "listing.html": page(f"<h2 id='l'>Listing</h2><pre><code style='display:block; overflow-x:visible; white-space:pre'>"
                         f"{LONG_LINE}</code></pre>"),
    "include.html": page("<pre><code>{{#include generated/ch01-tour.txt}}</code></pre>"),
}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    book = tmp_path_factory.mktemp("book")
    for name, html in PAGES.items():
        (book / name).write_text(html)
    rep, pages, _ = check_book.run(book, CHROMIUM, ["light"], None)
    assert sorted(pages) == sorted(PAGES)
    return rep


def problems_of(rep, name):
    return [f"{what} {where}" for page, _, what, where in rep.problems if page == name]


def test_clean_pages_pass(report):
    assert problems_of(report, "index.html") == []
    assert problems_of(report, "clean.html") == []


@pytest.mark.parametrize("name, wanted", [
    ("anchor.html", ["broken anchor 'index.html#nowhere'", "no id 'nowhere' on index.html",
                     '(#sec)']),
    ("missing.html", ["broken link 'gone.html'"]),
    ("console.html", ["console error: planted error"]),
    ("exception.html", ["uncaught exception", "undefinedFunction"]),
    ("image.html", ["image does not load: no-such.svg", "(#fig)"]),
    ("alt.html", ["image without alt text", "(#fig)"]),
    ("table.html", ["table 1", "does not stay in view (position: sticky)", "(#t)"]),
    ("listing.html", ["listing 1", "neither scrolls nor wraps", "(#l)"]),
    ("include.html", ["unresolved mdBook include: {{#include generated/ch01-tour.txt}}"]),
])
def test_planted_problem_is_found(report, name, wanted):
    found = problems_of(report, name)
    assert found, f"{name}: the planted problem was not found"
    text = "\n".join(found)
    for w in wanted:
        assert w in text, f"{name}: {w!r} not in the report:\n{text}"
