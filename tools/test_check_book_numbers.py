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


def test_times_is_a_unit_of_ratios():
    assert found("fp8 is 1.80-1.89 times as fast, 1.73 times on MHA") == ["1.80", "1.89", "1.73"]
    assert found("about 20 times slower, 5 to 20 times slower") == ["20", "5", "20"]
    assert found("four times the work, `32 times 8`") == []


def test_from_to_and_lists_are_measured_numbers():
    assert found("that chunk from 102 to 71 µs") == ["102", "71"]
    assert found("fp8 only 1.18, 1.14 and 1.07 times as fast") == ["1.18", "1.14", "1.07"]
    assert found("1, 2, 4 and 8 partitions took 498, 354, 356 and 358 µs") == ["498", "354", "356", "358"]
    assert found("n=4 431 / 433 / 436 us") == ["431", "433", "436"]
    # A shape is not a list, a count before a list is not in it.
    assert found("on 32/8/32/4096 took 181 µs; 16,384 tokens, 7 µs") == ["181", "7"]


NOTES = """# Performance notes

## ch10 v5: short decode tiles (kept)
short 12.2 -> 9.3 us

## ch10 v6: MQA
MQA 57.8 -> 70.9 us
"""


def test_a_source_comment_narrows_notes_to_its_entries():
    para = 'short 9.3 µs <!-- source: NOTES.md "ch10 v5: short" -->'
    body, missing = c.notes_entries(para, NOTES)
    assert c.found_in("9.3", body) and not c.found_in("70.9", body) and missing == []
    # A paragraph whose comments quote no title is checked against the whole notebook.
    assert c.notes_entries("(`NOTES.md`, \"ch10 v6\") 70.9 µs", NOTES) == (None, [])
    # A title no entry has is reported, not silently widened to the notebook.
    assert c.notes_entries('<!-- source: NOTES.md "ch10 v7" -->', NOTES) == ("", ["ch10 v7"])


def test_a_results_file_knows_its_gpu(tmp_path, monkeypatch):
    res = tmp_path / "bench" / "results"
    res.mkdir(parents=True)
    (res / "a.csv").write_text("kernel,us,device\nx,1.0,NVIDIA H200\n")
    (res / "b-h100.md").write_text("| x |\n")
    (res / "c.md").write_text("Measured on NVIDIA H100 80GB HBM3. Ceilings...\n\n| x |\n")
    (res / "d.md").write_text("| x | 1.0 |\n")
    assert c.gpus_of(res / "a.csv") == {"H200"}
    assert c.gpus_of(res / "b-h100.md") == {"H100"}
    assert c.gpus_of(res / "c.md") == {"H100"}
    assert c.gpus_of(res / "d.md") == set()  # not known: no rule applies


def test_a_measured_number_names_the_gpu_of_its_file(monkeypatch):
    monkeypatch.setattr(c, "gpus_of", lambda path: {"H200"} if "h200" in str(path) else {"H100"})
    src = ["bench/results/x-h200.md"]
    bad = c.gpu_problems("p.md", 3, "It takes 59.1 µs (`bench/results/x-h200.md`).", "## Results", "", src, 1)
    assert bad == ["p.md:3: quotes measured numbers from bench/results/x-h200.md, measured on the H200, "
                   "but does not name that GPU"]
    # The other GPU is named, not this one: said so.
    bad = c.gpu_problems("p.md", 3, "On the H100 it took 59.1 µs. <!-- source: bench/results/x-h200.md -->",
                         "", "", src, 1)
    assert bad and bad[0].endswith("(it names the H100)")
    # Named in the prose, in the section's heading, or (a table) in the sentence before it.
    assert c.gpu_problems("p.md", 3, "59.1 µs on the H200 (`bench/results/x-h200.md`)", "", "", src, 1) == []
    assert c.gpu_problems("p.md", 3, "59.1 µs (`bench/results/x-h200.md`)", "## On the H200", "", src, 1) == []
    assert c.gpu_problems("p.md", 3, "| a | 59.1 µs |\n<!-- source: bench/results/x-h200.md -->", "",
                          "The H200's times:", src, 1) == []
    # A comment is not a label, and a paragraph with no measured number needs none.
    assert c.gpu_problems("p.md", 3, "59.1 µs <!-- H200 --> <!-- source: bench/results/x-h200.md -->",
                          "", "", src, 1) != []
    assert c.gpu_problems("p.md", 3, "See `bench/results/x-h200.md`.", "", "", src, 0) == []


def test_a_table_of_two_gpus_files_fails(monkeypatch):
    monkeypatch.setattr(c, "gpus_of", lambda path: {"H200"} if "h200" in str(path) else
                        {"H100"} if "h100" in str(path) else set())
    table = ("<!-- source: bench/results/x-h100.md, bench/results/y-h200.md -->\n"
             "| case | ours (us) |\n|---|---:|\n| a | 59.1 |\n| b | 40.2 |")
    src = ["bench/results/x-h100.md", "bench/results/y-h200.md"]
    bad = c.gpu_problems("p.md", 7, table, "", "On the H100 and the H200:", src, 0)
    assert bad == ["p.md:7: a table of numbers from bench/results/x-h100.md (H100), "
                   "bench/results/y-h200.md (H200) mixes the H100 and the H200: make one table "
                   "per GPU, each beside a sentence that names its GPU and its file"]
    # Two tables, one file each, each introduced by its GPU: no problem.
    for s, gpu in (("bench/results/x-h100.md", "H100"), ("bench/results/y-h200.md", "H200")):
        one = f"<!-- source: {s} -->\n| case | ours |\n|---|---:|\n| a | 1.04x |"
        assert c.gpu_problems("p.md", 7, one, "", f"On the {gpu}:", [s], 1) == []
    # Prose may set the two GPUs side by side; only a table may not mix them.
    prose = "59.1 µs on the H100 and 40.2 µs on the H200 (`bench/results/x-h100.md`, `bench/results/y-h200.md`)"
    assert c.gpu_problems("p.md", 7, prose, "", "", src, 2) == []
    # A file of unknown GPU (NOTES.md) beside one GPU's file is not a mix.
    assert c.gpu_problems("p.md", 7, table.replace("x-h100", "notes"), "", "On the H200:",
                          ["NOTES.md", "bench/results/y-h200.md"], 0) == []
