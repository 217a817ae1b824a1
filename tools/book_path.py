"""The introduction's "The path": every page of book/src/SUMMARY.md after the introduction
and how-to-use, in order, each with its sentence from book/path.toml (numbered chapters as
a numbered list, a chapter's nested pages (8.1, 8.2) as a list inside its item, the pages
after them as a list of their own).

    python3 tools/book_path.py OUT.md        (build_book.sh: book/src/generated/path.md)
    python3 tools/book_path.py --check       (every page has its sentence, nothing extra,
                                              and README's "Chapters:" names every chapter)
"""
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUMMARY = ROOT / "book/src/SUMMARY.md"
README = ROOT / "README.md"
TEXTS = ROOT / "book/path.toml"
LINK = re.compile(r"^(\s*)(-\s*)?\[([^\]]+)\]\(([^)]+)\)")


def pages(summary_text):
    """(title, file, numbered, nested) for each page of SUMMARY.md, in order: numbered pages
    are list items ("- [..](..)"), nested ones indented under their chapter's item (mdBook
    numbers them 8.1, 8.2); the prefix and suffix pages are bare links."""
    out = []
    for line in summary_text.splitlines():
        m = LINK.match(line)
        if m:
            numbered = bool(m.group(2))
            out.append((m.group(3), m.group(4), numbered, numbered and len(m.group(1)) > 0))
    return out


def problems(summary_text, texts):
    listed = [f for _, f, _, _ in pages(summary_text)]
    skip = {"introduction.md", "how-to-use.md"}
    out = [f"{f} is in SUMMARY.md but has no summary in book/path.toml"
           for f in listed if f not in skip and f not in texts]
    out += [f"book/path.toml has a summary of {f}, which SUMMARY.md does not list"
            for f in texts if f not in listed]
    return out


def readme_chapters(readme_text):
    """The chapter numbers README's "Chapters:" paragraph names ("4–5" names both)."""
    m = re.search(r"^Chapters: (.*?)(?:\n\n|\Z)", readme_text, re.M | re.S)
    if not m:
        return set()
    found = set()
    for a, b in re.findall(r"(?:^|[;,] )(\d+)(?:[–-](\d+))? ", m.group(1).replace("\n", " ")):
        found.update(range(int(a), int(b or a) + 1))
    return found


def readme_problems(summary_text, readme_text):
    count = sum(1 for _, _, numbered, nested in pages(summary_text) if numbered and not nested)
    missing = sorted(set(range(1, count + 1)) - readme_chapters(readme_text))
    return [f"README.md's \"Chapters:\" paragraph does not name chapter(s) {', '.join(map(str, missing))}"] \
        if missing else []


def render(summary_text, texts):
    numbered, after, chapter, section = [], [], 0, 0
    for title, f, is_numbered, nested in pages(summary_text):
        if f in ("introduction.md", "how-to-use.md"):
            continue
        text = " ".join(texts[f]["summary"].split())
        if nested:  # inside its chapter's item: indented to the item's text
            section += 1
            numbered.append(" " * len(f"{chapter}. ") + f"- **[{chapter}.{section} {title}]({f}).** {text}")
        elif is_numbered:
            chapter, section = chapter + 1, 0
            numbered.append(f"{chapter}. **[{title}]({f}).** {text}")
        else:
            after.append(f"- **[{title}]({f}).** {text}")
    lines = numbered
    if after:
        lines += ["", f"After the {chapter} chapters:", ""] + after
    return "\n".join(lines) + "\n"


def main(argv):
    summary_text = SUMMARY.read_text()
    texts = tomllib.loads(TEXTS.read_text())
    bad = problems(summary_text, texts) + readme_problems(summary_text, README.read_text())
    if bad:
        print("book_path.py: " + "\n  ".join(bad), file=sys.stderr)
        return 1
    if argv[1:] != ["--check"]:
        Path(argv[1]).parent.mkdir(parents=True, exist_ok=True)
        Path(argv[1]).write_text(render(summary_text, texts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
