"""tools/book_path.py: the introduction's list of chapters comes from SUMMARY.md, and a page
without its sentence (or a README that stops early) is an error, not a stale list."""
import book_path

SUMMARY = """# Summary
[Introduction](introduction.md)
[How to use this course](how-to-use.md)
# Part
- [One](ch01-one.md)
- [Two](ch02-two.md)
---
[Appendix A: More](appendix-more.md)
"""
TEXTS = {"ch01-one.md": {"summary": "The first."}, "ch02-two.md": {"summary": "The\n second."},
         "appendix-more.md": {"summary": "An appendix."}}


def test_chapters_are_numbered_in_summary_order_and_appendices_follow():
    out = book_path.render(SUMMARY, TEXTS)
    assert out.startswith("1. **[One](ch01-one.md).** The first.\n2. **[Two](ch02-two.md).** The second.\n")
    assert "After the 2 chapters:" in out
    assert "- **[Appendix A: More](appendix-more.md).** An appendix." in out


def test_nested_pages_are_listed_inside_their_chapter_not_numbered_as_chapters():
    summary = SUMMARY.replace("- [One](ch01-one.md)\n", "- [One](ch01-one.md)\n    - [More of one](ch01b-more.md)\n"
                              "    - [Yet more](ch01c-yet.md)\n")
    texts = dict(TEXTS, **{"ch01b-more.md": {"summary": "Its second page."},
                           "ch01c-yet.md": {"summary": "Its third."}})
    assert [p[3] for p in book_path.pages(summary)] == [False, False, False, True, True, False, False]
    out = book_path.render(summary, texts)
    assert out.startswith("1. **[One](ch01-one.md).** The first.\n"
                          "   - **[1.1 More of one](ch01b-more.md).** Its second page.\n"
                          "   - **[1.2 Yet more](ch01c-yet.md).** Its third.\n"
                          "2. **[Two](ch02-two.md).** The second.\n")
    assert "After the 2 chapters:" in out
    assert book_path.problems(summary, texts) == []
    assert book_path.problems(summary, TEXTS) == [
        "ch01b-more.md is in SUMMARY.md but has no summary in book/path.toml",
        "ch01c-yet.md is in SUMMARY.md but has no summary in book/path.toml"]
    # README names chapters, not pages: 1 and 2 are enough.
    assert book_path.readme_problems(summary, "Chapters: 1 one, 2 two.\n") == []


def test_a_new_chapter_without_its_sentence_is_named():
    summary = SUMMARY.replace("- [Two](ch02-two.md)\n", "- [Two](ch02-two.md)\n- [Three](ch03-three.md)\n")
    assert book_path.problems(summary, TEXTS) == [
        "ch03-three.md is in SUMMARY.md but has no summary in book/path.toml"]


def test_a_sentence_for_a_page_summary_does_not_list_is_named():
    texts = dict(TEXTS, **{"ch09-gone.md": {"summary": "Gone."}})
    assert book_path.problems(SUMMARY, texts) == [
        "book/path.toml has a summary of ch09-gone.md, which SUMMARY.md does not list"]


def test_readme_must_name_every_chapter():
    assert book_path.readme_problems(SUMMARY, "x\n\nChapters: 1 one, 2 two.\n\nMore") == []
    assert book_path.readme_problems(SUMMARY, "Chapters: 1 one; and more.\n") == [
        "README.md's \"Chapters:\" paragraph does not name chapter(s) 2"]
    assert book_path.readme_chapters("Chapters: 1 a, 2 b, 4–5 c; 6 d\n") == {1, 2, 4, 5, 6}


def test_the_real_book_is_complete():
    assert book_path.main(["book_path.py", "--check"]) == 0
