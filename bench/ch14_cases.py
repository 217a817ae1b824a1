"""Chapter 14's benchmark cases, read from bench/ch14_cases.txt (its top says the format).

The one list that the chapter's benchmark and its baselines (FlashMLA's sparse decode,
FlashInfer's top-k, torch.topk) run, and that a comparison lays out in tables. No
third-party imports. The lengths column is chapter 11's ('B x L'), read by its parser.
"""

import os
from typing import NamedTuple

import ch11_cases
from ch11_cases import _int, parse_lengths, parse_sections

CASES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ch14_cases.txt")

STAGES = ("sparse_mla", "indexer", "topk")
RULES = ("uniform", "recent")
MAX_TOPK = 2048      # dsa.INDEX_TOPK
INDEX_HEADS = 64     # dsa.INDEX_HEADS


class Case(NamedTuple):
    name: str
    stage: str     # one of STAGES
    heads: int     # h_q (sparse_mla), index heads (indexer), 0 (topk: '-')
    s_q: int
    lengths: list
    block: int
    topk: int      # 0 where the column is '-' (indexer)
    indices: str   # 'uniform' or 'recent' (sparse_mla), '' elsewhere


def _dash_or_int(text, what):
    return 0 if text == "-" else _int(text, what)


def _case(f):
    name, stage = f[0], f[1]
    if not name:
        raise ValueError("empty name")
    if '"' in name:
        raise ValueError("a name may not hold '\"' (CSV)")
    if stage not in STAGES:
        raise ValueError(f"stage '{stage}' is not one of {', '.join(STAGES)}")
    heads, s_q = _dash_or_int(f[2], "heads"), _int(f[3], "s_q")
    lengths, block = parse_lengths(f[4]), _int(f[5], "block size")
    topk, indices = _dash_or_int(f[6], "top-k"), f[7]
    if block not in (16, 32, 64):
        raise ValueError("block size must be 16, 32 or 64")
    if not 1 <= s_q <= 4:
        raise ValueError("s_q must be in 1..4")
    if min(lengths) < s_q:
        raise ValueError("a length is shorter than s_q")
    if stage == "sparse_mla":
        if not 1 <= heads <= 128:
            raise ValueError("sparse_mla: heads (h_q) must be in 1..128")
        if not 1 <= topk <= MAX_TOPK:
            raise ValueError(f"sparse_mla: top-k must be in 1..{MAX_TOPK}")
        if indices not in RULES:
            raise ValueError(f"sparse_mla: indices must be {' or '.join(RULES)}")
        if min(lengths) - s_q + 1 < topk:
            raise ValueError("sparse_mla: a query row sees fewer than top-k positions")
        if indices == "recent" and topk % 2:
            raise ValueError("sparse_mla: 'recent' splits top-k in halves: make it even")
    else:
        if indices != "-":
            raise ValueError(f"{stage}: indices must be '-'")
    if stage == "indexer" and (heads != INDEX_HEADS or f[6] != "-"):
        raise ValueError(f"indexer: heads must be {INDEX_HEADS} and top-k '-'")
    if stage == "topk" and (f[2] != "-" or s_q != 1 or not 1 <= topk <= MAX_TOPK):
        raise ValueError(f"topk: heads must be '-', s_q 1 and top-k in 1..{MAX_TOPK}")
    return Case(name, stage, heads, s_q, lengths, block, topk, indices if stage == "sparse_mla" else "")


def parse(text):
    """(cases, sections): cases [Case] in file order; sections [(title, [case names])]
    (chapter 11's parse_sections: the same grammar, these fields)."""
    return parse_sections(text, "name | stage | heads | s_q | lengths | block | top-k | indices", _case)


def read(path=CASES_FILE):
    return ch11_cases.read(path, parse)
