"""Tests of chapter 14's case file (bench/ch14_cases.txt) that need no GPU.

    python -m pytest -q bench/test_bench_ch14.py

- it holds issue 64's targets table: the sparse MLA decode grid (h_q 64 and 128, s_q 1 and 2,
  B 64 and 128, contexts 8K to 128K, top-k 2048, page 64), the 8K-against-128K pairs with both
  index rules, the indexer's decode sweep and the top-k of 2048 over 128K logits, batch 64;
- every case fits an H100 and int32 slots;
- the parser refuses bad lines at their line.
"""

import pathlib
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import ch14_cases  # noqa: E402

K8, K128 = 8192, 131072


def test_the_targets_table_is_covered():
    cases, sections = ch14_cases.read()
    sparse = {(c.heads, c.s_q, len(c.lengths), c.lengths[0], c.indices)
              for c in cases if c.stage == "sparse_mla"}
    assert all(c.block == 64 and c.topk == 2048 for c in cases if c.stage != "indexer")
    for hq in (64, 128):
        for s_q in (1, 2):
            for b in (64, 128):
                for L in (K8, 32768, K128):
                    assert (hq, s_q, b, L, "uniform") in sparse, (hq, s_q, b, L)
        for rule in ("uniform", "recent"):  # the cost is k, not the context
            assert (hq, 1, 64, K8, rule) in sparse and (hq, 1, 64, K128, rule) in sparse
    indexer = {(len(c.lengths), c.lengths[0]) for c in cases if c.stage == "indexer"}
    assert {(64, L) for L in (K8, 16384, 32768, 65536, K128)} <= indexer
    assert all(c.s_q == 1 and c.heads == 64 for c in cases if c.stage == "indexer")
    assert any(c.stage == "topk" and c.lengths == [K128] * 64 for c in cases)
    names = {c.name for c in cases}
    assert len(sections) == 4 and {n for _, ns in sections for n in ns} == names


def test_every_case_fits_the_gpu_and_int32_slots():
    for c in ch14_cases.read()[0]:
        tokens = sum(-(-L // c.block) * c.block for L in c.lengths)
        assert tokens < 2**31, c.name  # slots are int32
        per_token = {"sparse_mla": 656, "indexer": 132, "topk": 4}[c.stage]
        assert tokens * per_token < 20e9, c.name


BAD = [
    ("x | sparse_mla | 64 | 1 | 4 x 4096 | 64 | 2048\n", 1),                   # 7 fields
    ("x | dense | 64 | 1 | 4 x 4096 | 64 | 2048 | uniform\n", 1),              # stage
    ("x | sparse_mla | 64 | 1 | 4 x 4096 | 64 | 2048 | random\n", 1),          # rule
    ("x | sparse_mla | 64 | 1 | 4 x 2000 | 64 | 2048 | uniform\n", 1),         # L < top-k
    ("x | sparse_mla | 64 | 1 | 4 x 4096 | 64 | 4096 | uniform\n", 1),         # top-k > 2048
    ("x | sparse_mla | 64 | 5 | 4 x 4096 | 64 | 2048 | uniform\n", 1),         # s_q 5
    ("# c\nx | sparse_mla | 64 | 1 | 4 x 4096 | 48 | 2048 | uniform\n", 2),    # block 48
    ("x | indexer | 32 | 1 | 4 x 4096 | 64 | - | -\n", 1),                     # 32 index heads
    ("x | indexer | 64 | 1 | 4 x 4096 | 64 | 2048 | -\n", 1),                  # top-k for the indexer
    ("x | topk | - | 2 | 4 x 4096 | 64 | 2048 | -\n", 1),                      # s_q 2
    ("x | topk | - | 1 | 4 x 4096 | 64 | 2048 | -\n\nx | topk | - | 1 | 4 x 4096 | 64 | 16 | -\n", 3),
    ("x | topk | - | 1 | 4 x 4096 | 64 | 2048 | -\n= y\n", 2),                 # '= y' names no case
]


@pytest.mark.parametrize("text,line", BAD)
def test_parser_refuses_bad_lines(text, line):
    with pytest.raises(ValueError, match=rf"^{line}: "):
        ch14_cases.parse(text)
