"""check_book_refs finds what the book names and the repository lacks (planted pages)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import check_book_refs as cbr  # noqa: E402


@pytest.fixture(scope="module")
def ctx():
    root = cbr.ROOT
    return {"code": cbr.code_text(root), "tests": cbr.defined_tests(root),
            "targets": cbr.make_targets(root), "exercises": cbr.exercise_counts(root)}


def errors(text, ctx):
    return cbr.check_page(text, "planted.md", cbr.ROOT, ctx)


def test_the_book_as_it_is_passes():
    assert cbr.main(["check_book_refs.py"]) == 0


def test_real_names_pass(ctx):
    page = ("`Allocator.DoubleFreeAndUnknownBlocksAreRefused`, `Allocator.*`, "
            "`include/pa/async_copy.h`, `demo/serve`, `solutions/NN-slug/`, `cp_async16(dst, src)`, "
            "`pa::launch(...)`, `make test-chapter-8`, `make hint-1 EXERCISE=1`, `make ci`.\n")
    assert errors(page, ctx) == []


@pytest.mark.parametrize("text, says", [
    ("See `StretchSplit.FillsAboutTwoWaves`.", "no test StretchSplit.FillsAboutTwoWaves"),
    ("It is in `include/pa/no_such_header.h`.", "no file include/pa/no_such_header.h"),
    ("Call `cp_async_wait_at_most(n)` here.", "cp_async_wait_at_most appears nowhere"),
    ("The `first_needed_blok` helper.", "first_needed_blok appears nowhere"),
    ("Run `make hint-1 EXERCISE=40`.", "chapter 1 has"),
    ("Run `make test-everything`.", "no rule for make test-everything"),
])
def test_each_planted_name_is_found_on_its_line(ctx, text, says):
    found = errors("Intro line.\n\n" + text + "\n", ctx)
    assert len(found) == 1 and says in found[0] and found[0].startswith("planted.md:3:"), found


def test_code_blocks_and_comments_are_not_read_and_lines_still_count(ctx):
    page = "```\n`NoSuch.Test`\n```\n<!-- `NoSuch.Other` -->\n`Missing.Here`\n"
    assert errors(page, ctx) == ["planted.md:5: no test Missing.Here under tests/"]


def test_a_chapter_page_numbers_its_exercises_as_make_hint_does(ctx):
    total, core = ctx["exercises"][2]
    assert core == 4  # chapter 2: allocate, free, the write, the gather
    covered = "## Exercises 1 and 2: the allocator\n## Exercise 3: the write\n## Exercise 4: the gather\n"
    assert cbr.check_headings(covered, "ch02-planted.md", ctx) == []
    one_short = "## Exercise 1: the allocator\n## Exercise 2: the write\n## Exercise 3: the gather\n"
    assert cbr.check_headings(one_short, "ch02-planted.md", ctx) == [
        "ch02-planted.md: no heading for exercise 4 (make hint-2 has 4 core exercises)"]
    too_many = covered + f"## Stretch exercise {total + 1}: none\n"
    assert cbr.check_headings(too_many, "ch02-planted.md", ctx) == [
        f"ch02-planted.md: a heading names exercise {total + 1}, but make hint-2 has {total}"]


def test_a_hint_command_under_another_exercises_heading_is_found(ctx):
    page = ("## Exercise 3: the write\n\nThe hints: `make hint-2 EXERCISE=3`.\n"
            "## Exercise 4: the gather\n\nThe hints: `make hint-2 EXERCISE=3`.\n"
            "## Stretch exercise: dense to paged\n\nThe hints: `make hint-2 EXERCISE=5`.\n"
            "## Exercises 1 and 2: the allocator\n\n`make hint-2 EXERCISE=2`.\n")
    assert cbr.check_headings(page, "ch02-planted.md", ctx) == [
        "ch02-planted.md:6: make hint-2 EXERCISE=3 under a heading about exercise 4"]


def test_a_chapter_split_over_pages_is_numbered_across_them(ctx):
    first = "## Exercises 1 and 2: the allocator\n"
    second = "## Exercise 3: the write\n## Exercise 4: the gather\n"
    assert cbr.check_headings(first, "ch02-a.md", ctx, first + second) == []
    assert cbr.check_headings(first, "ch02-a.md", ctx) != []


def test_what_make_book_writes_is_not_required(ctx):
    assert errors("Open `book/book/index.html`; the outputs are in `book/src/generated/`.\n", ctx) == []
