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

THEME = Path(__file__).resolve().parent.parent / "book" / "theme"
LAYOUT_CSS = (THEME / "layout.css").read_text()
LAYOUT_JS = (THEME / "layout.js").read_text()
# The book's layout: theme/layout.css, and theme/layout.js run after the page, as mdBook
# runs it after book.js.
LAYOUT = f"<style>{LAYOUT_CSS}</style>", f"<script>{LAYOUT_JS}</script>"

# A table that cannot reflow (40 columns of unbreakable cells), one that can (prose and a
# long path in code, which layout.css lets break), a long code line.
WIDE_ROW = "<tr>" + "".join(f"<td>column&nbsp;number&nbsp;{i}</td>" for i in range(40)) + "</tr>"
WIDE_TABLE = f'<div class="table-wrapper"><table>{WIDE_ROW}{WIDE_ROW}</table></div>'
PROSE = "the reader sees every word of this cell without scrolling sideways " * 3
PATH = "chapters/05-paged-attention-v2/" + "a_very_long_file_name_" * 4 + "v2.cu"
REFLOW_ROW = f"<tr><td>1</td><td><code>{PATH}</code></td><td>{PROSE}</td><td>{PROSE}</td></tr>"
REFLOW_TABLE = (f'<div class="table-wrapper"><table><thead><tr><th>#</th><th>File (edit this)</th>'
                f'<th>What it does</th><th>Why</th></tr></thead>{REFLOW_ROW}{REFLOW_ROW}</table></div>')
LONG_LINE = "x = " + "1 + " * 200 + "1"
LONG_COMMENT = "  // TODO(ch01): " + "a contract that a student must read to its end, " * 4
# A listing as highlight.js leaves it: a block comment's span runs over several lines.
HIGHLIGHTED = (f'<span class="hljs-keyword">int</span> x = 1;\n'
               f'<span class="hljs-comment">/* {"a comment that goes on " * 6}\n'
               f'   {"and on " * 20}*/</span>\n'
               f'{LONG_COMMENT}\n    {LONG_LINE}\n')
SHOWS_MARKERS = "  // BEGIN SOLUTION\n  // STUB: PA_TODO(\"ch01\");\n  ...\n  // END SOLUTION"


def page(body, head="", tail=""):
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'>"
            f"<style>main {{ max-width: 750px; margin: 0 auto; }} .table-wrapper {{ overflow-x: auto; }}"
            f"pre > code {{ display: block; overflow-x: auto; }}"
            f"</style>{head}</head><body><main><h1 id='top'>Page</h1>{body}</main>{tail}</body></html>")


def book_page(body):
    """A page with the book's layout (theme/layout.css and theme/layout.js)."""
    return page(body, head=LAYOUT[0], tail=LAYOUT[1])


def listing(text, lang="cpp"):
    return f"<pre><code class='language-{lang}'>{text}</code></pre>"


PAGES = {
    "index.html": page("<h2 id='here'>Here</h2><p><a href='clean.html#here'>ok</a> "
                       "<a href='#top'>ok</a> <a href='https://example.com/x#y'>outside</a></p>"),
    # Everything the book's layout must fit in the column: long lines (code, a comment, a
    # highlighted block comment, program output) wrap; a table with long cells reflows; a
    # listing marked shows-markers may show them.
    "clean.html": book_page(f"<h2 id='here'>Here</h2>{listing(HIGHLIGHTED)}"
                            f"{listing(LONG_LINE, 'text')}{REFLOW_TABLE}"
                            f"<pre><code class='language-cpp shows-markers'>{SHOWS_MARKERS}</code></pre>"),
    "anchor.html": page("<h2 id='sec'>Section</h2><p><a href='index.html#nowhere'>a bad anchor</a></p>"),
    "missing.html": page("<p><a href='gone.html'>a missing page</a></p>"),
    "console.html": page("<script>console.error('planted error');</script>"),
    "exception.html": page("<script>undefinedFunction();</script>"),
    "image.html": page("<h2 id='fig'>Figure</h2><img src='no-such.svg' alt='planted'>"),
    "alt.html": page("<h2 id='fig'>Figure</h2><img src='data:image/svg+xml,"
                     "%3Csvg xmlns=%22http://www.w3.org/2000/svg%22 width=%2210%22 height=%2210%22/%3E'>"),
    # Planted: a table that scrolls in its wrapper (its right-hand part hidden until the
    # reader scrolls), even with the book's layout (it cannot reflow); and a table that
    # sticks out of the column with nothing around it.
    "table.html": page(f"<h2 id='t'>Table</h2>{WIDE_TABLE}"),
    "table-layout.html": book_page(f"<h2 id='t'>Table</h2>{WIDE_TABLE}"),
    "table-bare.html": page(f"<h2 id='t'>Table</h2><table>{WIDE_ROW}</table>"),
    # Planted: a listing whose long line scrolls (mdBook's own layout), and one that
    # neither scrolls nor wraps.
    "listing.html": page(f"<h2 id='l'>Listing</h2>{listing(LONG_COMMENT + chr(10) + LONG_LINE)}"),
    "listing-visible.html": page(f"<h2 id='l'>Listing</h2><pre><code style='display:block; "
                                 f"overflow-x:visible; white-space:pre'>{LONG_LINE}</code></pre>"),
    # Planted: the generator's markers in a listing (with the book's layout, which fits it).
    "markers.html": book_page("<h2 id='m'>Solution</h2>" + listing(
        "int f() {\n  // TODO(ch01): the contract, shown\n  // HINT(1): a nudge\n"
        "  //   that goes on\n  // BEGIN SOLUTION(ch01)\n  // STUB: PA_TODO(\"ch01\");\n"
        "  return 1;\n  // END SOLUTION\n}")),
    "markers-hash.html": book_page("<h2 id='m'>Solution</h2>" + listing(
        "def f():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION", "python")),
    "include.html": page("<pre><code>{{#include generated/ch01-tour.txt}}</code></pre>"),
}
THEMES = ["light", "navy"]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    book = tmp_path_factory.mktemp("book")
    for name, html in PAGES.items():
        (book / name).write_text(html)
    rep, pages, _ = check_book.run(book, CHROMIUM, THEMES, None)
    assert sorted(pages) == sorted(PAGES)
    return rep


def problems_of(rep, name, theme=None):
    return [f"{what} {where}" for page, th, what, where in rep.problems
            if page == name and (theme is None or th in (theme, ""))]


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
    ("table.html", ["table 1 ('column number 0 | column number 1 | column number 2') is cut off",
                    "(scrollWidth > clientWidth", "in 750 px", "(#t)"]),
    ("table-layout.html", ["table 1 ('column number 0", "is cut off", "in 750 px", "(#t)"]),
    ("table-bare.html", ["table 1 ('column number 0", "is cut off", "in 750 px", "(#t)"]),
    ("listing.html", ["listing 1 (language-cpp, '// TODO(ch01): a contract that a student",
                      "is cut off: its lines are", "(scrollWidth > clientWidth)",
                      "the longest, 805 characters: 'x = 1 + 1 + ", "(#l)"]),
    ("listing-visible.html", ["listing 1 (no language, 'x = 1 + 1 + 1", "is cut off", "(#l)"]),
    ("markers.html", ["listing 1 (language-cpp, 'int f() {') shows the skeleton generator's "
                      "markers: '// HINT(1): a nudge' (its line 3) and 3 more", "(#m)"]),
    ("markers-hash.html", ["listing 1 (language-python, 'def f():') shows the skeleton "
                           "generator's markers: '# BEGIN SOLUTION' (its line 2) and 1 more"]),
    ("include.html", ["unresolved mdBook include: {{#include generated/ch01-tour.txt}}"]),
])
def test_planted_problem_is_found(report, name, wanted):
    found = problems_of(report, name)
    assert found, f"{name}: the planted problem was not found"
    text = "\n".join(found)
    for w in wanted:
        assert w in text, f"{name}: {w!r} not in the report:\n{text}"


@pytest.mark.parametrize("name", ["table.html", "table-layout.html", "listing.html", "markers.html"])
def test_widths_and_markers_are_checked_in_every_theme(report, name):
    for theme in THEMES:
        assert problems_of(report, name, theme), f"{name}: nothing found in the {theme} theme"


def test_markers_only_where_the_listing_has_them(report):
    # The TODO contract is no marker: markers.html's one problem names 4 marker lines, and
    # the listing's lines are not cut off (the book's layout wraps them).
    found = problems_of(report, "markers.html", "light")
    assert len(found) == 1 and "TODO" not in found[0], found


def test_marker_pattern_is_the_generators():
    """check_book.MARKER (read by Python and by the page's JavaScript) matches a line
    exactly when tools/make_skeletons.py reads it as a marker."""
    import re
    import make_skeletons
    lines = ["// BEGIN SOLUTION", "  // BEGIN SOLUTION(ch04)", "// BEGIN SOLUTION(ch10, stretch)",
             "  // END SOLUTION", "//STUB: PA_TODO(\"ch01\");", "  // HINT(1): a nudge",
             "  // HINT(12): the last", "    # BEGIN SOLUTION", "# END SOLUTION", "# STUB: pass",
             "# HINT(2): x", "// TODO(ch01): the contract", "//   a hint's continuation",
             "int x;  // END SOLUTION", "// BEGIN SOLUTIONS", "// HINT: no number",
             "// ANCHOR: name", "return STUB;"]
    mine = re.compile(check_book.MARKER)
    for line in lines:
        theirs = any(make_skeletons.marker_patterns(c)[k].match(line)
                     for c in ("//", "#") for k in ("begin", "end", "stub", "hint"))
        assert bool(mine.match(line)) == theirs, line


def test_layout_js_keeps_the_text_and_the_highlighting(tmp_path):
    """theme/layout.js cuts a listing into lines (for the hanging indent): the text (what
    the copy button copies) is unchanged, every piece keeps its highlight.js class, and a
    wrapped line's continuation hangs right of the line's own indent."""
    import html
    from playwright.sync_api import sync_playwright
    (tmp_path / "p.html").write_text(book_page(listing(HIGHLIGHTED)))
    want = html.unescape(HIGHLIGHTED.replace('<span class="hljs-keyword">', "")
                         .replace('<span class="hljs-comment">', "").replace("</span>", ""))
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM)
        tab = browser.new_page(viewport=check_book.VIEWPORT)
        tab.goto((tmp_path / "p.html").as_uri())
        got = tab.evaluate("""() => {
          const code = document.querySelector('pre > code');
          const lines = [...code.querySelectorAll(':scope > .line')];
          const rects = (el) => [...el.getClientRects()];
          // The comment line (the 4th): its first and last text boxes' left edges.
          const r = document.createRange();
          r.selectNodeContents(lines[3]);
          const boxes = [...r.getClientRects()];
          return {text: code.textContent, inner: code.innerText, lines: lines.length,
                  comments: [...code.querySelectorAll('.hljs-comment')].map((s) => s.textContent),
                  keyword: code.querySelector('.line > .hljs-keyword').textContent,
                  first: boxes[0].left, last: boxes[boxes.length - 1].left,
                  indent: getComputedStyle(lines[3]).getPropertyValue('--indent'),
                  ch: (() => { const s = document.createElement('span'); s.textContent = 'x';
                               code.appendChild(s); const w = s.getBoundingClientRect().width;
                               s.remove(); return w; })(),
                  wrapped: boxes[boxes.length - 1].top - boxes[0].top};
        }""")
        browser.close()
    assert got["text"] == want and got["inner"].rstrip("\n") == want.rstrip("\n")
    assert got["lines"] == 5 and got["keyword"] == "int"
    # The block comment over two lines is cut in two pieces, each still a comment.
    assert len(got["comments"]) == 2 and got["comments"][1].endswith("*/")
    assert got["indent"] == "2ch" and got["wrapped"] > 0, got
    # The contract's continuation starts 2 + 4 characters right of the line's start.
    assert abs(got["last"] - got["first"] - 6 * got["ch"]) < 2, got
