"""Chapter 10's planner, as a spec: the plan make_plan() must return for a batch.

Written from the planner's contract (include/pa/ch10_varlen.h: Plan, WorkItem,
make_plan, item_cost; the comments of the given code in plan.cpp and the book's
"The plan" section), not from plan.cpp's code. Plain Python on small lists: the
golden plan cases (golden_ch10_plan.py) are a few dozen items each.

The plan of a step:
  tiles    every sequence's n_b * G rows in tiles of 64 (8 for a decode of G <= 8),
           each needing KV [0, kv_needed), kv_needed = seq_len - n_b + (the tile's last
           new token) + 1; a decode tile of at most 128 tokens is a warp item (whole)
           unless chunks are forced.
  cost     item_cost(tokens, rows, by_warp) = tokens * (1 + rows / 32) + start, the start
           192 (48 for a warp item); target = the step's total cost / grid.
  chunks   chunk_for(rows, target): the whole tokens a chunk can hold for target (the
           start paid), at least 256, rounded UP to a multiple of 64. A tile's fair
           shares, kv_needed / chunk_for, become a count of chunks rounded up, or up only
           past a quarter share; tiles of about equal cost (none over 1.25 x their mean)
           that the wave holds get grid // tiles chunks each instead. The chunks are even:
           max(256, round_up(ceil(kv_needed / count), 64)) tokens, the last one shorter.
  items    per tile, per KV head, per chunk, in that order; a tile of several chunks gets
           the next ticket counter and 64 partial rows per chunk.
  dealing  longest item first (equal costs: in the order above), each to the thread block
           with the least cost so far, ties to the LOWER index; block c's items in the
           order it got them, its warp items moved to the front (order kept).
  choice   where the two roundings of the counts differ, both plans are dealt and the one
           whose busiest block costs less is kept (equal: the rounded-up one).
"""

import heapq
import math

TILE_ROWS = 64        # kTileRows
DECODE_ROWS = 8       # kDecodeRows
KV_TILE = 64          # kKvTile
WARP_ITEM_TOKENS = 128  # kWarpItemTokens
MIN_CHUNK = 256       # kMinChunk
ITEM_START = 192.0    # kItemStart

# The columns of a plan's items array, as WorkItem's fields.
ITEM_FIELDS = ("seq", "kv_head", "row0", "kv_begin", "kv_end", "split", "num_splits",
               "partial_base", "counter", "by_warp")


def round_up(n, m):
    return -(-n // m) * m


def is_decode_tile(n_new, group):
    return n_new == 1 and group <= DECODE_ROWS


def tile_size(n_new, group):
    return DECODE_ROWS if is_decode_tile(n_new, group) else TILE_ROWS


def tile_rows(n_new, group, row0):
    return min(n_new * group - row0, tile_size(n_new, group))


def item_cost(kv_tokens, rows, by_warp=False):
    """What a thread block spends on an item, in KV tokens of a decode row tile."""
    return kv_tokens * (1.0 + rows / 32.0) + (ITEM_START / 4 if by_warp else ITEM_START)


def chunk_for(rows, target_cost):
    """The chunk of a tile of `rows` rows: the whole tokens whose cost, start included, fits
    in target_cost; at least MIN_CHUNK; rounded up to a multiple of KV_TILE."""
    per_token = 1.0 + rows / 32.0
    tokens = math.floor(max(0.0, target_cost - ITEM_START) / per_token)
    return round_up(max(MIN_CHUNK, min(tokens, 10**9)), KV_TILE)


def tiles_of(seq_lens, query_start_loc, group, forced):
    """(seq, row0, rows, kv_needed, by_warp) of every row tile, in sequence and row order."""
    tiles = []
    for b, seq_len in enumerate(seq_lens):
        n = query_start_loc[b + 1] - query_start_loc[b]
        for row0 in range(0, n * group, tile_size(n, group)):
            rows = tile_rows(n, group, row0)
            kv_needed = seq_len - n + (row0 + rows - 1) // group + 1
            by_warp = not forced and is_decode_tile(n, group) and kv_needed <= WARP_ITEM_TOKENS
            tiles.append((b, row0, rows, kv_needed, by_warp))
    return tiles


def deal(costs, grid):
    """LPT: the owner block of each item (by index into costs), and each block's items in
    the order dealt. Longest first (a stable order for equal costs), each to the block with
    the least cost so far, ties to the lower block index."""
    order = sorted(range(len(costs)), key=lambda i: -costs[i])  # sorted() is stable
    heap = [(0.0, c) for c in range(grid)]
    owner = [0] * len(costs)
    per_block = [[] for _ in range(grid)]
    for i in order:
        load, c = heapq.heappop(heap)
        owner[i] = c
        per_block[c].append(i)
        heapq.heappush(heap, (load + costs[i], c))
    return owner, per_block


def cut_and_deal(tiles, cuts, num_kv_heads, grid, forced):
    chunk_tokens = round_up(forced, KV_TILE) if forced > 0 else 0
    items, costs = [], []
    num_counters = partial_rows = 0
    for (seq, row0, rows, kv_needed, by_warp), count in zip(tiles, cuts):
        if chunk_tokens:
            chunk = chunk_tokens
        else:
            chunk = max(MIN_CHUNK, round_up(-(-max(kv_needed, 1) // count), KV_TILE))
        splits = -(-kv_needed // chunk)
        for h in range(num_kv_heads):
            counter, base = -1, partial_rows
            if splits > 1:
                counter, num_counters = num_counters, num_counters + 1
                partial_rows += TILE_ROWS * splits
            for p in range(splits):
                begin, end = p * chunk, min(kv_needed, (p + 1) * chunk)
                items.append((seq, h, row0, begin, end, p, splits, base, counter, int(by_warp)))
                costs.append(item_cost(end - begin, rows, by_warp))
    _, per_block = deal(costs, grid)
    blocks = []
    for mine in per_block:  # the block's warp items first, each group in the dealt order
        blocks.append([i for i in mine if items[i][9]] + [i for i in mine if not items[i][9]])
    return {
        "grid": grid, "chunk_tokens": chunk_tokens, "num_counters": num_counters,
        "partial_rows": partial_rows, "blocks": [[items[i] for i in b] for b in blocks],
        "loads": [sum(costs[i] for i in b) for b in blocks],
    }


def make_plan(seq_lens, query_start_loc, num_q_heads, num_kv_heads, grid, chunk_tokens=0):
    """The plan, as a dict: grid, chunk_tokens, target_cost, num_counters, partial_rows,
    items (dealt: block 0's first), cta_start [grid + 1], tiles (with each tile's chunk
    count), and loads (each block's cost)."""
    group = num_q_heads // num_kv_heads
    tiles = tiles_of(seq_lens, query_start_loc, group, chunk_tokens > 0)
    total = 0.0
    for _, _, rows, kv_needed, by_warp in tiles:
        total += item_cost(kv_needed, rows, by_warp) * num_kv_heads
    target = total / grid

    # Tiles of about equal cost, no more than the wave holds: grid // tiles chunks each.
    block_tiles = [t for t in tiles if not t[4]]
    whole_items = len(block_tiles) * num_kv_heads
    block_total, longest = 0.0, 0.0
    for _, _, rows, kv_needed, _ in block_tiles:
        block_total += item_cost(kv_needed, rows) * num_kv_heads
        longest = max(longest, item_cost(kv_needed, rows))
    equal = (chunk_tokens == 0 and 0 < whole_items <= grid
             and longest <= 1.25 * block_total / whole_items)

    cuts_up, cuts_near = [1] * len(tiles), [1] * len(tiles)
    if chunk_tokens == 0:
        for i, (_, _, rows, kv_needed, by_warp) in enumerate(tiles):
            if by_warp:
                continue
            shares = kv_needed / chunk_for(rows, target)
            if equal:
                cuts_up[i] = cuts_near[i] = max(1, int(grid / whole_items))
            else:
                cuts_up[i] = max(1, math.ceil(shares))
                cuts_near[i] = max(1, math.ceil(shares - 0.25))
    plan = cut_and_deal(tiles, cuts_up, num_kv_heads, grid, chunk_tokens)
    cuts = cuts_up
    if cuts_near != cuts_up:
        other = cut_and_deal(tiles, cuts_near, num_kv_heads, grid, chunk_tokens)
        if max(other["loads"]) < max(plan["loads"]):
            plan, cuts = other, cuts_near

    plan["target_cost"] = target
    plan["tiles"] = [t + (c,) for t, c in zip(tiles, cuts)]
    plan["items"] = [w for block in plan["blocks"] for w in block]
    plan["cta_start"] = [0]
    for block in plan["blocks"]:
        plan["cta_start"].append(plan["cta_start"][-1] + len(block))
    return plan
