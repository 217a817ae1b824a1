"""Chapter 10's golden plans: the exact plan make_plan() must return for small batches.

plan_<tag>/ holds
  seq_lens          int32   [B]
  query_start_loc   int32   [B + 1]
  items             int32   [N, 10]    the dealt items, block 0's first; columns as
                                       WorkItem: seq, kv_head, row0, kv_begin, kv_end,
                                       split, num_splits, partial_base, counter, by_warp
  cta_start         int32   [grid + 1]
  tiles             int32   [T, 5]     seq, row0, rows, kv_needed, chunks: each row tile
                                       and the chunks it is cut into (for the messages)
  target_cost       float64 0-d        the step's cost / grid
and case.txt: num_q_heads, num_kv_heads, grid, chunk_tokens (0: the planner's; else
forced), plan_chunk_tokens (Plan::chunk_tokens), num_counters, partial_rows, note.

The spec is planner.py (from the contract in include/pa/ch10_varlen.h). The batches are
chosen so that the classic wrong answers of the chapter's two planner exercises each give
another plan (reference/tests/test_golden_ch10_plan.py checks it): chunk_for without the
start cost, without the 256-token minimum, rounded down; the dealing without the
longest-first sort, with ties to the higher index, by item count.
"""

from dataclasses import dataclass

import numpy as np

from . import planner
from .golden_io import write_case


@dataclass(frozen=True)
class PlanCase:
    name: str
    num_q_heads: int
    num_kv_heads: int
    prefix_new: tuple  # (cached tokens, new tokens) per sequence
    grid: int
    note: str
    chunk_tokens: int = 0

    @property
    def seq_lens(self):
        return [p + n for p, n in self.prefix_new]

    @property
    def query_start_loc(self):
        qsl = [0]
        for _, n in self.prefix_new:
            qsl.append(qsl[-1] + n)
        return qsl

    def plan(self):
        return planner.make_plan(self.seq_lens, self.query_start_loc, self.num_q_heads,
                                 self.num_kv_heads, self.grid, self.chunk_tokens)


P = PlanCase

CH10_PLANS = [
    P("plan_deal_five_decodes", 1, 1, ((99, 1), (299, 1), (199, 1), (299, 1), (49, 1)), 2,
      "forced chunks, one item per decode: the dealing alone; the two 300s tie, and so do the "
      "two blocks after them", chunk_tokens=4096),
    P("plan_deal_heads_and_ties", 8, 2, ((63, 1), (63, 1), (191, 1), (127, 2), (300, 4)), 3,
      "equal items (one per KV head) and equal loads: ties to the lower index, equal items in "
      "the order generated", chunk_tokens=1024),
    P("plan_deal_mha", 4, 4, ((150, 1), (689, 5), (380, 5)), 4,
      "four KV heads: twelve items, longest first"),
    P("plan_decode_beside_prefill", 4, 1, ((1595, 1), (554, 17)), 3,
      "a long decode beside a 68-row prefill (two tiles): the chunk from the start cost and "
      "each tile's own rows, rounded up"),
    P("plan_two_long_decodes", 8, 1, ((1103, 1), (2139, 1)), 2,
      "two long decodes on two blocks: the longer one split in two"),
    P("plan_round_down_differs", 4, 1, ((393, 1), (257, 19)), 2,
      "fair shares between multiples of 64: rounded up, not down"),
    P("plan_min_chunk_ragged", 4, 1, ((134, 1), (272, 6), (275, 2), (517, 2), (155, 1), (53, 1)), 6,
      "a fair share under 256 tokens: chunks of at least 256"),
    P("plan_min_chunk_two_decodes", 4, 1, ((681, 1), (1548, 1)), 8,
      "two decodes on eight blocks: a fair share under 256 tokens, chunks of 256"),
    P("plan_min_chunk_exact", 8, 1, ((221, 1), (299, 5)), 24,
      "a tiny fair share on a large grid: chunks of exactly 256, not the next multiple of 64"),
    P("plan_min_chunk_verify", 8, 1, ((569, 5), (129, 1)), 12,
      "a verification of 40 rows on 12 blocks: chunks of exactly 256"),
    P("plan_one_long_decode", 8, 2, ((3000, 1), (40, 1), (90, 1), (150, 1)), 6,
      "one long decode tile split to fill the grid beside short warp items"),
    P("plan_long_and_prefill", 4, 1, ((2100, 1), (0, 40), (500, 12)), 5,
      "a long decode, a prefill of 160 rows (three tiles) and a verification"),
    P("plan_equal_tiles", 8, 2, ((1023, 1), (1023, 1), (1023, 1)), 24,
      "six equal tiles on 24 blocks: each cut into grid / tiles = 4 even chunks"),
    P("plan_round_near", 8, 2, ((2100, 1), (1000, 1), (150, 1), (250, 1)), 5,
      "fair shares rounded up or up past a quarter share: the less busy plan is kept"),
    P("plan_forced_64", 4, 2, ((100, 1), (0, 20), (300, 5)), 4,
      "forced chunks of 64 tokens: no warp items, every tile split at multiples of 64",
      chunk_tokens=64),
]


def plan_arrays(case):
    plan = case.plan()
    items = np.array(plan["items"], dtype=np.int32).reshape(-1, len(planner.ITEM_FIELDS))
    tiles = np.array([(s, r0, rows, kv, c) for s, r0, rows, kv, _, c in plan["tiles"]],
                     dtype=np.int32).reshape(-1, 5)
    return {
        "seq_lens": np.array(case.seq_lens, dtype=np.int32),
        "query_start_loc": np.array(case.query_start_loc, dtype=np.int32),
        "items": items,
        "cta_start": np.array(plan["cta_start"], dtype=np.int32),
        "tiles": tiles,
        "target_cost": np.array(plan["target_cost"], dtype=np.float64),
    }


def plan_params(case):
    plan = case.plan()
    return {
        "num_q_heads": case.num_q_heads,
        "num_kv_heads": case.num_kv_heads,
        "grid": case.grid,
        "chunk_tokens": case.chunk_tokens,
        "plan_chunk_tokens": plan["chunk_tokens"],
        "num_counters": plan["num_counters"],
        "partial_rows": plan["partial_rows"],
        "note": case.note.replace("\n", " "),
    }


def write_plan_cases(out_dir):
    for case in CH10_PLANS:
        write_case(out_dir / case.name, plan_arrays(case), plan_params(case))
