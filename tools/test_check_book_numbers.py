"""What tools/check_book_numbers.py counts as a measured number, and what accounts for one."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import check_book_numbers as c  # noqa: E402


def found(text):
    return [n for m in c.MEASURED.finditer(text) for n in c.numbers(m)]


def test_units_ranges_and_separators():
    assert found("v2 takes 23.4 µs, 61.4% of it, 2.43× faster") == ["23.4", "61.4", "2.43"]
    assert found("57.7–60.4% of the read ceiling") == ["57.7", "60.4"]
    assert found("11-18% faster") == ["11", "18"]
    assert found("16,384 us in all") == ["16384"]


def test_arithmetic_is_not_a_measurement():
    assert found("offset `35 % 16 = 3`, `32 × 8 = 256` blocks, A 16 × 16") == []
    assert found("(offset 5, x elements each)") == []


def test_marked_numbers():
    para = "2.6 times <!-- derived: 2.6 = 165 / 64 --> <!-- claimed: 60–80 (the seed) -->"
    assert c.marked(para) == {"2.6", "165", "64", "60", "80"}



def test_a_figure_counts_by_its_labels(tmp_path):
    svg = tmp_path / "f.svg"
    svg.write_text('<svg><!-- 61.4% never written --><path d="M 12.1 0 L 3 4"/></svg>')
    assert "61.4" in c.shown(svg) and "12.1" not in c.shown(svg)


def test_a_benchmark_source_counts_by_its_comments(tmp_path):
    src = tmp_path / "b.h"
    src.write_text("// queued behind a ~100 us spin\nx = 250.0 * y;\n")
    assert "100" in c.shown(src) and "250" not in c.shown(src)
