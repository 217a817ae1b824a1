"""tools/book_words.py counts a page's prose, not its code, tables, includes or comments, and
holds chapter pages to the limit (pages listed as over it may not grow)."""
import book_words as w


def test_only_prose_counts():
    page = """# Title

Two words.

```cpp
int not_prose = 0;
```

| a | table | row |
|---|---|---|
{{#include ../../x.h:anchor}}
<!-- a comment
   of many words -->
![a figure](f.svg)
- a list item counts, `code in it` as one
"""
    assert w.prose_words(page) == 2 + 7  # inline code is one word


def test_the_limit_and_the_pages_over_it():
    assert w.problems({"ch01.md": 100}, limit=200, over={}) == []
    assert "over the 200-word limit" in w.problems({"ch01.md": 201}, limit=200, over={})[0]
    assert w.problems({"ch08.md": 250}, limit=200, over={"ch08.md": 260}) == []
    assert "over its 260" in w.problems({"ch08.md": 261}, limit=200, over={"ch08.md": 260})[0]
    assert "remove it from OVER" in w.problems({"ch08.md": 150}, limit=200, over={"ch08.md": 260})[0]


def test_the_real_book():
    assert w.main() == 0


def test_a_link_counts_its_words_not_its_target():
    import book_words as w
    assert w.prose_words("See [chapter 8](ch08b-preemption-and-forks.md#exercise-3-preemption) here.\n") == 4
