#!/usr/bin/env python3
"""The book check: load every page of the built book in headless Chromium.

    check_book.py [BOOK_DIR] [--screenshots DIR] [--chromium PATH] [--themes light,navy]

BOOK_DIR is mdBook's output (default book/book, written by `make book`). Each page is
served from a local HTTP server and loaded in Chromium (Debian's `chromium` package,
driven by Playwright from PyPI), once per theme. It fails (exit 1) on:

  - a console error or an uncaught exception, or a file of the book that does not load;
  - a broken internal link: an <a href> to a page or file of the book that does not
    exist, or whose #fragment is no element id on the target page;
  - an image that does not load (naturalWidth 0), or has no alt text;
  - a table wider than the column (or than its wrapper): its scrollWidth, or its wrapper's,
    more than the room it has; a table reflows to the column, it is not scrolled;
  - a listing (<pre>) whose lines are wider than its box (scrollWidth > clientWidth of
    the <code> block or of the <pre>), or a <pre> that sticks out of the column: a
    listing wraps its long lines in the page, it is not scrolled;
  - a listing that shows the skeleton generator's markers (BEGIN SOLUTION, END SOLUTION,
    STUB:, HINT(k):), unless its code block is marked ```LANG,shows-markers;
  - anything else wider than the content column that does not scroll in a container;
  - an unresolved mdBook include (a literal "{{#include" in the page).

Widths and markers are checked at a 1280 px wide viewport in every theme; the rest in the
first. Each problem is printed as PAGE (theme): WHAT, with WHERE (the section it is in).
Screenshots go to --screenshots (default build/book-screenshots): PAGE.png, the content
column (750 px at a 1280 px wide viewport) over the page's whole height, in the first
theme, and PAGE-THEME-figureN.png, each figure as the other themes show it. Each theme runs in a
browser of its own, in parallel.
"""
import argparse
import base64
import difflib
import functools
import http.server
import os
import shutil
import sys
import threading
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_CANDIDATES = ["/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"]
VIEWPORT = {"width": 1280, "height": 900}
# A line of the skeleton generator's markers (tools/make_skeletons.py: BEGIN SOLUTION, END
# SOLUTION, STUB:, HINT(k):, after // or #), as a regular expression that Python and
# JavaScript read alike. The TODO(chNN) contract is no marker: listings show it.
MARKER = r"^\s*(?://|#)\s*(?:BEGIN SOLUTION\b|END SOLUTION\b|STUB:|HINT\(\d+\):)"
# print.html is every chapter on one page (about 250,000 px tall): checked, not pictured.
NO_SCREENSHOT = {"print.html"}
# print.html is also the biggest page to load: the other themes see its chapters one by one.
FIRST_THEME_ONLY = {"print.html"}
SHOT_MARGIN = 24  # px either side of the content column in the screenshots

# Runs in the page once it has loaded; returns what the checks need. Widths are CSS px.
COLLECT_JS = r"""
async (markerSource) => {
  const main = document.querySelector('main') || document.body;
  const colW = main.clientWidth;
  const colRect = main.getBoundingClientRect();
  const heads = [...main.querySelectorAll('h1,h2,h3,h4,h5,h6')];
  const where = (el) => {
    let h = null;
    for (const x of heads) {
      if (x === el || (x.compareDocumentPosition(el) & Node.DOCUMENT_POSITION_FOLLOWING)) h = x;
      else break;
    }
    if (!h) return 'at the top of the page';
    return 'in "' + h.textContent.trim().slice(0, 70) + '"' + (h.id ? ' (#' + h.id + ')' : '');
  };
  const scrolls = (el) => ['auto', 'scroll'].includes(getComputedStyle(el).overflowX);
  // The nearest ancestor below main (or the element itself) that clips or scrolls sideways.
  const clipper = (el) => {
    for (let x = el; x && x !== main; x = x.parentElement)
      if (getComputedStyle(x).overflowX !== 'visible') return x;
    return null;
  };
  const out = {theme: document.documentElement.className, colW,
               hasThemes: !!document.getElementById('mdbook-theme-list'), ids: [], links: [],
               images: [], tables: [], listings: [], overflow: [], includes: []};

  for (const el of document.querySelectorAll('[id]')) out.ids.push(el.id);
  for (const el of document.querySelectorAll('a[name]')) out.ids.push(el.getAttribute('name'));
  for (const a of document.querySelectorAll('a[href]'))
    out.links.push({href: a.getAttribute('href'), text: a.textContent.trim().slice(0, 50),
                    where: main.contains(a) ? where(a) : 'in the page chrome (sidebar/navigation)'});

  // Images: load lazy ones now, wait for each to settle, then look at what arrived.
  const imgs = [...document.querySelectorAll('img')];
  for (const img of imgs) img.loading = 'eager';
  await Promise.all(imgs.map((img) => img.decode().catch(() => null)));
  for (const img of imgs)
    out.images.push({src: img.getAttribute('src'), alt: img.getAttribute('alt'),
                     ok: img.complete && img.naturalWidth > 0, where: where(img)});

  // Tables: the room a table has is the column (or its wrapper, if narrower). Its width is
  // the widest of its own box, its scrollWidth and its wrapper's scrollWidth (a cell's
  // content that sticks out of the table counts too). Wider than its room: its right-hand
  // part is cut off, or scrolled to.
  main.querySelectorAll('table').forEach((t, i) => {
    const box = clipper(t);
    const room = box ? Math.min(box.clientWidth, colW) : colW;
    const width = Math.ceil(Math.max(t.scrollWidth, t.getBoundingClientRect().width,
                                     box ? box.scrollWidth : 0));
    out.tables.push({index: i + 1, width, room, where: where(t),
                     head: (t.rows[0] ? [...t.rows[0].cells].slice(0, 3).map((c) => c.textContent.trim())
                            .join(' | ') : '').replace(/\s+/g, ' ').slice(0, 60)});
  });

  // Listings: the lines' width (scrollWidth of the <code> box and of the <pre>) against
  // the box (clientWidth), and the <pre> against the column; and the lines that are the
  // skeleton generator's markers (tools/make_skeletons.py), unless the listing is marked
  // as one that shows them on purpose (```cpp,shows-markers: class "shows-markers").
  const marker = new RegExp(markerSource);
  main.querySelectorAll('pre').forEach((pre, i) => {
    const code = pre.querySelector(':scope > code') || pre;
    // The box whose lines stick out the most: the <code> block, or the <pre> around it.
    const box = [code, pre].reduce((a, b) =>
      (b.scrollWidth - b.clientWidth > a.scrollWidth - a.clientWidth ? b : a));
    const width = box.scrollWidth, room = box.clientWidth;
    const right = pre.getBoundingClientRect().right;
    const lines = code.textContent.split('\n');
    const first = (lines.find((l) => l.trim()) || '').trim().slice(0, 60);
    const info = {index: i + 1, where: where(pre), lang: code.className.split(/\s+/)
                    .filter((c) => c.startsWith('language-')).join(' '),
                  width, room, first, pastColumn: Math.ceil(right - colRect.right), markers: []};
    if (!code.classList.contains('shows-markers'))
      lines.forEach((l, k) => { if (marker.test(l)) info.markers.push([k + 1, l.trim().slice(0, 60)]); });
    if (width > room + 1) {
      const longest = lines.reduce((a, b) => (b.length > a.length ? b : a), '');
      info.longest = [longest.length, longest.trim().slice(0, 60)];
    }
    out.listings.push(info);
  });

  // Anything else that sticks out of the column without a scroll container around it.
  for (const el of main.querySelectorAll('*')) {
    if (el.closest('pre, table')) continue;
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.right <= colRect.right + 1) continue;
    if (clipper(el.parentElement)) continue;
    out.overflow.push({tag: el.tagName.toLowerCase(), width: Math.round(r.width),
                       sticksOut: Math.round(r.right - colRect.right), where: where(el)});
  }

  const text = main.textContent;
  const re = /\{\{#(include|rustdoc_include|playground|title)\b[^}]*\}?\}?/g;
  let m;
  while ((m = re.exec(text)) !== null) out.includes.push(m[0].slice(0, 100));
  return out;
}
"""


class _IdParser(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids = set()

    def handle_starttag(self, tag, attrs):
        for k, v in attrs:
            if (k == "id" or (tag == "a" and k == "name")) and v:
                self.ids.add(v)


def ids_of_file(path):
    p = _IdParser()
    p.feed(path.read_text(encoding="utf-8", errors="replace"))
    return p.ids


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(directory):
    """A local HTTP server for the book (mdBook's 404 page wants a site root)."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def find_chromium(given):
    for c in [given, os.environ.get("PA_CHROMIUM")] + CHROMIUM_CANDIDATES:
        if c and (shutil.which(c) or Path(c).is_file()):
            return shutil.which(c) or c
    return None


class Report:
    def __init__(self):
        self.problems = []  # (page, theme, what, where)
        self.widest = {}  # "table" / "listing": (width, room, page, theme, name)

    def fail(self, page, theme, what, where=""):
        self.problems.append((page, theme, what, where))

    def measure(self, page, theme, kind, width, room, name):
        """Keep the widest table and listing of the book (against its room)."""
        if kind not in self.widest or width - room > self.widest[kind][0] - self.widest[kind][1]:
            self.widest[kind] = (width, room, page, theme, name)

    def widest_text(self):
        return "; ".join(f"widest {kind}: {w} px in {r} ({page}, {name})"
                         for kind, (w, r, page, _, name) in sorted(self.widest.items()))


def check_page_data(page, theme, data, rep, full=True):
    """The checks on what COLLECT_JS returned (everything but links and console). Widths
    and markers are checked in every theme; alt text and includes in the first (full)."""
    seen = set()
    for img in data["images"]:
        key = (img["src"], img["where"])
        if not img["ok"] and key not in seen:  # (mdBook 0.5 draws each image twice, for zoom)
            seen.add(key)
            rep.fail(page, theme, f"image does not load: {img['src']} (alt: {img['alt']!r})", img["where"])
        if full and not (img["alt"] or "").strip() and key not in seen:
            seen.add(key)
            rep.fail(page, theme, f"image without alt text: {img['src']}", img["where"])
    col = data["colW"]
    for t in data["tables"]:
        rep.measure(page, theme, "table", t["width"], t["room"], repr(t["head"]))
        if t["width"] > t["room"] + 1:
            rep.fail(page, theme, f"table {t['index']} ({t['head']!r}) is cut off: it is "
                     f"{t['width']} px wide in {t['room']} px (scrollWidth > clientWidth; "
                     f"the column is {col} px)", t["where"])
    for li in data["listings"]:
        name = f"listing {li['index']} ({li['lang'] or 'no language'}, {li['first']!r})"
        rep.measure(page, theme, "listing", li["width"], li["room"], repr(li["first"]))
        if li["width"] > li["room"] + 1:
            n, line = li["longest"]
            rep.fail(page, theme, f"{name} is cut off: its lines are {li['width']} px in a "
                     f"{li['room']} px box (scrollWidth > clientWidth); the longest, "
                     f"{n} characters: {line!r}", li["where"])
        elif li["pastColumn"] > 1:
            rep.fail(page, theme, f"{name} sticks out of the {col} px column by "
                     f"{li['pastColumn']} px", li["where"])
        if li["markers"]:
            k, line = li["markers"][0]
            more = len(li["markers"]) - 1
            rep.fail(page, theme, f"{name} shows the skeleton generator's markers: {line!r} "
                     f"(its line {k})" + (f" and {more} more" if more else "") +
                     "; a listing shows the solution and its contract, not the markers "
                     "(tools/book_listings.py takes them out of included files)", li["where"])
    seen = set()
    for o in data["overflow"]:
        key = (o["where"], o["tag"])
        if key in seen:
            continue
        seen.add(key)
        rep.fail(page, theme, f"<{o['tag']}> ({o['width']} px) sticks out of the column by "
                 f"{o['sticksOut']} px", o["where"])
    if full:
        for inc in data["includes"]:
            rep.fail(page, theme, f"unresolved mdBook include: {inc}")


def check_links(book, base, page_links, page_ids, rep):
    """Every link to a file of the book must exist; a #fragment must be an id there."""
    netloc = urlsplit(base).netloc
    extra_ids = {}
    for page, links in page_links.items():
        page_url = urljoin(base, page)
        for link in links:
            href = link["href"]
            url = urljoin(page_url, href)
            parts = urlsplit(url)
            if parts.scheme in ("http", "https") and parts.netloc != netloc:
                continue  # outside the book: not checked (no network here)
            if parts.scheme not in ("http", "https"):
                if parts.scheme in ("mailto", "javascript", "tel", "data"):
                    continue
                rep.fail(page, "", f"link to {href!r} ({link['text']!r}) leaves the book "
                         f"({parts.scheme}: URL)", link["where"])
                continue
            rel = unquote(parts.path).lstrip("/")
            if rel == "" or rel.endswith("/"):
                rel += "index.html"
            target = (book / rel).resolve()
            if not target.is_relative_to(book) or not target.is_file():
                rep.fail(page, "", f"broken link {href!r} ({link['text']!r}): "
                         f"{rel} is not a file of the book", link["where"])
                continue
            frag = unquote(parts.fragment)
            if not frag or not rel.endswith(".html"):
                continue
            if rel in page_ids:
                ids = page_ids[rel]
            else:
                ids = extra_ids.setdefault(rel, ids_of_file(target))
            if frag not in ids:
                near = difflib.get_close_matches(frag, sorted(ids), n=1, cutoff=0.6)
                hint = f" (did you mean #{near[0]}?)" if near else ""
                rep.fail(page, "", f"broken anchor {href!r} ({link['text']!r}): no id "
                         f"{frag!r} on {rel}{hint}", link["where"])


def check_theme(base, chromium, theme, full, pages, shots, rep, page_links, page_ids, times):
    """Load every page in one theme, in a browser of its own (one thread per theme).
    full: every check and a full-page screenshot; otherwise console errors, loads,
    images, widths and markers, and a screenshot of each figure (how it reads in this
    theme)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium)
        ctx = browser.new_context(viewport=VIEWPORT)
        # No print dialog from print.html; the theme set as a reader's choice would be.
        init = "window.print = () => {};"
        if theme != "light":
            init += f"try {{ localStorage.setItem('mdbook-theme', '{theme}'); }} catch (e) {{}}"
        ctx.add_init_script(init)
        tab = ctx.new_page()
        cdp = ctx.new_cdp_session(tab)
        events = []

        def on_console(m):
            if m.type != "error":
                return
            loc = m.location or {}
            url = loc.get("url", "")
            if url.endswith("/favicon.ico"):
                return  # Chromium asks for one where a page links none (toc.html): not the book's
            where = f" ({url[len(base) - 1:] if url.startswith(base) else url}:{loc.get('lineNumber', '')})"
            events.append(f"console error: {m.text}" + (where if url else ""))

        def on_response(r):
            if r.url.startswith(base) and r.status >= 400 and r.url != base + "favicon.ico":
                events.append(f"HTTP {r.status} for {r.url[len(base) - 1:]}")

        tab.on("console", on_console)
        tab.on("pageerror", lambda e: events.append(f"uncaught exception: {e}"))
        def on_failed(r):
            # ERR_ABORTED: a request still in flight when the check moves on to the next
            # page (the favicon, typically). A file that is not there answers 404 instead.
            if r.url.startswith(base) and "ERR_ABORTED" not in (r.failure or ""):
                events.append(f"failed to load {r.url[len(base) - 1:]}: {r.failure}")

        tab.on("requestfailed", on_failed)
        tab.on("response", on_response)
        for page in pages:
            if not full and page in FIRST_THEME_ONLY:
                continue
            events.clear()
            t0 = time.monotonic()
            tab.goto(base + page, wait_until="load")
            tab.evaluate("document.fonts.ready.then(() => true)")
            data = tab.evaluate(COLLECT_JS, MARKER)
            if theme != "light" and data["hasThemes"] and theme not in data["theme"].split():
                rep.fail(page, theme, f"the {theme} theme did not apply (<html class={data['theme']!r}>)")
            for e in dict.fromkeys(events):
                rep.fail(page, theme, e)
            check_page_data(page, theme, data, rep, full=full)
            if full:
                page_links[page] = data["links"]
                page_ids[page] = set(data["ids"])
            stem = Path(page).stem
            if shots and full and page not in NO_SCREENSHOT:
                # The whole height, the content column's width (and a margin): the sidebar
                # is the same on every page, and the narrower picture is quicker to encode.
                x, w, h = tab.evaluate("(() => { const m = (document.querySelector('main') || "
                                       "document.body).getBoundingClientRect(); return [m.left, "
                                       "m.width, document.documentElement.scrollHeight]; })()")
                x0 = max(0, x - SHOT_MARGIN)
                clip = {"x": x0, "y": 0, "height": h,
                        "width": min(VIEWPORT["width"] - x0, w + 2 * SHOT_MARGIN)}
                try:  # Chromium's own call: its fast PNG encoding is about 1.7x quicker
                    shot = cdp.send("Page.captureScreenshot", {
                        "format": "png", "captureBeyondViewport": True,
                        "optimizeForSpeed": True, "clip": dict(clip, scale=1)})
                    (shots / f"{stem}.png").write_bytes(base64.b64decode(shot["data"]))
                except Exception:  # noqa: BLE001 (an older Chromium: Playwright's way)
                    tab.screenshot(path=str(shots / f"{stem}.png"), full_page=True, clip=clip)
            elif shots and page not in NO_SCREENSHOT:
                figs = tab.locator("main img, main svg, main object").filter(visible=True)
                for i in range(figs.count()):
                    figs.nth(i).screenshot(path=str(shots / f"{stem}-{theme}-figure{i + 1}.png"))
            times.append((page, theme, time.monotonic() - t0))
        ctx.close()
        browser.close()


def run(book, chromium, themes, shots, pages=None):
    """Check the built book in BOOK (a folder); returns (Report, pages, per-page times)."""
    book = Path(book).resolve()
    if pages is None:
        pages = sorted(p.name for p in book.glob("*.html"))
    rep = Report()
    page_links, page_ids, times = {}, {}, []
    httpd = serve(book)
    base = f"http://127.0.0.1:{httpd.server_address[1]}/"
    if shots:
        shots = Path(shots)
        shots.mkdir(parents=True, exist_ok=True)
        for old in shots.glob("*.png"):
            old.unlink()
    errors = []

    def worker(theme, full):
        try:
            check_theme(base, chromium, theme, full, pages, shots, rep, page_links, page_ids, times)
        except Exception as e:  # noqa: BLE001 (reported, and the check fails)
            errors.append(f"{theme}: {type(e).__name__}: {e}")

    try:
        threads = [threading.Thread(target=worker, args=(t, i == 0)) for i, t in enumerate(themes)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        httpd.shutdown()
    for e in errors:
        rep.fail("(browser)", "", f"the check itself failed: {e}")
    check_links(book, base, page_links, page_ids, rep)
    return rep, pages, times


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("book", nargs="?", default=str(ROOT / "book" / "book"))
    ap.add_argument("--screenshots", default=str(ROOT / "build" / "book-screenshots"),
                    help="folder for the screenshots ('' for none)")
    ap.add_argument("--chromium", help="Chromium binary (default: $PA_CHROMIUM, /usr/bin/chromium)")
    ap.add_argument("--themes", default="light,navy",
                    help="mdBook themes, comma-separated; the first gets every check, the "
                         "others console errors, failed loads, images, widths and markers "
                         "(default light,navy)")
    ap.add_argument("--notes", action="store_true",
                    help="also print each page's time")
    args = ap.parse_args(argv)

    book = Path(args.book)
    if not (book / "index.html").is_file():
        print(f"check_book: no built book in {book} (run `make book` first)", file=sys.stderr)
        return 2
    chromium = find_chromium(args.chromium)
    if not chromium:
        print("check_book: Chromium not found (Debian: apt-get install chromium; or set "
              "PA_CHROMIUM): run tools/setup.sh", file=sys.stderr)
        return 2
    try:
        import playwright  # noqa: F401
    except ImportError:
        print("check_book: the playwright Python package is missing: run tools/setup.sh",
              file=sys.stderr)
        return 2

    themes = [t for t in args.themes.split(",") if t]
    start = time.monotonic()
    rep, pages, times = run(book, chromium, themes, args.screenshots or None)
    took = time.monotonic() - start
    if args.notes:
        for page, theme, t in times:
            print(f"time: {page} ({theme}) {t:.2f} s")
    where_shots = f"; screenshots in {args.screenshots}" if args.screenshots else ""
    if rep.problems:
        print(f"check_book: {len(rep.problems)} problem(s) in {book}:")
        order = {t: i for i, t in enumerate([""] + themes)}
        for page, theme, what, where in sorted(rep.problems, key=lambda p: (p[0], order.get(p[1], 9))):
            t = f" ({theme})" if theme and len(themes) > 1 else ""
            print(f"  {page}{t}: {what}" + (f"\n      {where}" if where else ""))
        print(f"check_book: {rep.widest_text()}")
        print(f"check_book: FAILED ({len(pages)} pages x {len(themes)} themes in "
              f"{took:.1f} s{where_shots})")
        return 1
    print(f"check_book: {len(pages)} pages x {len(themes)} themes ({', '.join(themes)}) in "
          f"Chromium, {took:.1f} s: no console errors, all links, anchors and images "
          f"resolve, nothing wider than the column, no generator markers{where_shots}")
    print(f"check_book: {rep.widest_text()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
