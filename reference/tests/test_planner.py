"""Chapter 10's NumPy planner (pa_ref/planner.py): hand-worked plans, the properties every
plan has, and that the golden plan cases tell the classic wrong planners from the right one
(each wrong planner below makes another plan on at least one case)."""

import heapq
import math

import pytest

from pa_ref import planner
from pa_ref.golden_ch10_plan import CH10_PLANS


def test_item_cost_and_chunk_for_by_hand():
    assert planner.item_cost(1000, 4) == 1000 * 1.125 + 192
    assert planner.item_cost(100, 8, by_warp=True) == 125 + 48
    assert planner.chunk_for(4, 192 + 1.125 * 1000) == 1024   # 1000 tokens, rounded up
    assert planner.chunk_for(4, 192 + 1.125 * 1024) == 1024   # already a multiple of 64
    assert planner.chunk_for(64, 192 + 3 * 700) == 704
    assert planner.chunk_for(4, 192 + 1.125 * 96) == 256      # the minimum
    assert planner.chunk_for(4, 100) == 256                   # below the start cost


def test_dealing_by_hand():
    # 300 -> 0, 300 -> 1, 200 -> 0 (equal loads: the lower), 100 -> 1, 50 -> 1.
    owner, per_block = planner.deal([100, 300, 200, 300, 50], 2)
    assert per_block == [[1, 2], [3, 0, 4]]
    assert owner == [1, 0, 0, 1, 1]
    assert planner.deal([5, 5, 5, 5], 3)[1] == [[0, 3], [1], [2]]


def test_five_decodes_plan_by_hand():
    case = next(c for c in CH10_PLANS if c.name == "plan_deal_five_decodes")
    plan = case.plan()
    assert [[w[0] for w in b] for b in plan["blocks"]] == [[1, 2], [3, 0, 4]]
    assert plan["cta_start"] == [0, 2, 5]
    assert plan["num_counters"] == 0 and plan["partial_rows"] == 0


@pytest.mark.parametrize("case", CH10_PLANS, ids=lambda c: c.name)
def test_every_plan_covers_each_tile_once_in_contiguous_chunks(case):
    plan = case.plan()
    group = case.num_q_heads // case.num_kv_heads
    assert plan["cta_start"][0] == 0 and plan["cta_start"][-1] == len(plan["items"])
    assert len(plan["cta_start"]) == case.grid + 1
    by_tile = {}
    for w in plan["items"]:
        by_tile.setdefault((w[0], w[1], w[2]), []).append(w)
    want_tiles = 0
    for b, seq_len in enumerate(case.seq_lens):
        n = case.query_start_loc[b + 1] - case.query_start_loc[b]
        for row0 in range(0, n * group, planner.tile_size(n, group)):
            rows = planner.tile_rows(n, group, row0)
            kv_needed = seq_len - n + (row0 + rows - 1) // group + 1
            for h in range(case.num_kv_heads):
                want_tiles += 1
                chunks = sorted(by_tile[(b, h, row0)], key=lambda w: w[5])
                assert [w[5] for w in chunks] == list(range(len(chunks)))
                assert chunks[0][3] == 0 and chunks[-1][4] == kv_needed
                for a, c in zip(chunks, chunks[1:]):
                    assert a[4] == c[3] and c[3] % planner.KV_TILE == 0
    assert len(by_tile) == want_tiles
    for block in plan["blocks"]:  # warp items first
        flags = [w[9] for w in block]
        assert flags == sorted(flags, reverse=True)


# ---- the wrong planners the golden cases must tell apart --------------------------------

def _chunk(start=True, minimum=True, rounding="up", per_token_rows=True):
    def chunk_for(rows, target):
        per_token = 1.0 + (rows if per_token_rows else 1) / 32.0
        tokens = math.floor(max(0.0, target - (planner.ITEM_START if start else 0)) / per_token)
        tokens = max(planner.MIN_CHUNK if minimum else 1, tokens)
        if rounding == "up":
            return planner.round_up(tokens, planner.KV_TILE)
        if rounding == "next":  # the off-by-one: a multiple moves to the next one
            return (tokens // planner.KV_TILE + 1) * planner.KV_TILE
        return max(planner.KV_TILE, tokens // planner.KV_TILE * planner.KV_TILE)
    return chunk_for


def _deal(order="longest", ties="lower", load="sum"):
    def deal(costs, grid):
        idx = list(range(len(costs)))
        if order == "longest":
            idx.sort(key=lambda i: -costs[i])
        elif order == "shortest":
            idx.sort(key=lambda i: costs[i])
        sign = 1 if ties == "lower" else -1
        heap = [(0.0, sign * c) for c in range(grid)]
        heapq.heapify(heap)
        owner, per_block = [0] * len(costs), [[] for _ in range(grid)]
        for i in idx:
            total, key = heapq.heappop(heap)
            c = sign * key
            owner[i] = c
            per_block[c].append(i)
            new = {"sum": total + costs[i], "count": total + 1, "last": costs[i]}[load]
            heapq.heappush(heap, (new, key))
        return owner, per_block
    return deal


WRONG = {
    "chunk_for without the start cost": ("chunk_for", _chunk(start=False)),
    "chunk_for without the 256-token minimum": ("chunk_for", _chunk(minimum=False)),
    "chunk_for rounding down": ("chunk_for", _chunk(rounding="down")),
    "chunk_for rounding a multiple up to the next": ("chunk_for", _chunk(rounding="next")),
    "chunk_for ignoring the tile's rows": ("chunk_for", _chunk(per_token_rows=False)),
    "dealing without the sort": ("deal", _deal(order="made")),
    "dealing shortest first": ("deal", _deal(order="shortest")),
    "dealing with ties to the higher index": ("deal", _deal(ties="higher")),
    "dealing by item count": ("deal", _deal(load="count")),
    "dealing by the last item's cost": ("deal", _deal(load="last")),
}


@pytest.mark.parametrize("name", sorted(WRONG))
def test_the_golden_plans_tell_a_wrong_planner_apart(name, monkeypatch):
    right = {c.name: (c.plan()["items"], c.plan()["cta_start"]) for c in CH10_PLANS}
    attr, wrong = WRONG[name]
    monkeypatch.setattr(planner, attr, wrong)
    differ = [c.name for c in CH10_PLANS if (c.plan()["items"], c.plan()["cta_start"]) != right[c.name]]
    assert differ, f"no golden plan case tells {name} from the planner: add a case that does"
