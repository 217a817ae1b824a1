"""The work maps (pa_ref/work_maps.py) and paged.token_slot, which the book's figures draw."""

import numpy as np
import pytest

from pa_ref import BlockManager, k_pool_index, v_pool_index
from pa_ref import work_maps as wm
from pa_ref.paged import token_slot


def test_token_slot_is_the_managers_slot():
    # The chapter 2 page's example: blocks [7, 2, 11], position 35, bs 16 -> slot 179.
    assert token_slot([7, 2, 11], 35, 16) == 179
    m = BlockManager(num_blocks=12, block_size=4)
    for seq, n in [(0, 5), (1, 9), (0, 6), (2, 3), (1, 2)]:
        if seq not in m.sequences():
            m.add_sequence(seq)
        m.append_slots(seq, n)
    for seq in m.sequences():
        for p in range(m.length(seq)):
            assert token_slot(m.block_list(seq), p, 4) == m.slot(seq, p)


def test_v1_warps_take_blocks_round_robin():
    # The chapter 4 page: 100 tokens at bs 16 are 7 blocks for warps 0 1 2 3 0 1 2; the
    # last holds 4 tokens.
    assert [wm.v1_warp_of_block(b) for b in range(7)] == [0, 1, 2, 3, 0, 1, 2]
    assert [wm.v1_valid_tokens(b, 100, 16) for b in range(8)] == [16] * 6 + [4, 0]


@pytest.mark.parametrize("bs", [8, 16, 32])
@pytest.mark.parametrize("dtype_x", [4, 8])
@pytest.mark.parametrize("head_size", [64, 80, 128])
def test_v1_score_loads_cover_the_block_and_coalesce(bs, dtype_x, head_size):
    x, group = dtype_x, 32 // bs
    chunks = head_size // x
    seen = {}
    for lane in range(32):
        o, g = wm.v1_lane_token(lane, bs)
        assert 0 <= o < bs and 0 <= g < group
        for r, c in enumerate(wm.v1_lane_chunks(lane, bs, head_size, x)):
            assert (c, o) not in seen
            seen[(c, o)] = (lane, r)
            # The kernel's offset is the pool layout's, inside one (block, head).
            assert wm.v1_chunk_offset(c, o, bs, x) == k_pool_index(0, 0, c * x, o, 1, head_size, bs, x)
            assert (wm.v1_k_element(3, 1, c, o, 2, head_size, bs, x)
                    == k_pool_index(3, 1, c * x, o, 2, head_size, bs, x))
    assert len(seen) == chunks * bs  # every chunk of every token, once
    # One load instruction (round r, every lane) reads 32 x 16 contiguous bytes.
    for r in range(-(-chunks // group)):
        offsets = sorted(wm.v1_chunk_offset(c, o, bs, x) for (c, o), (_, rr) in seen.items() if rr == r)
        if len(offsets) == 32:
            assert offsets == list(range(offsets[0], offsets[0] + 32 * x, x))


def test_v1_v_rows():
    assert wm.v1_lane_rows(5, 80) == [5, 37, 69]
    assert wm.v1_lane_rows(20, 80) == [20, 52]
    rows = sorted(d for lane in range(32) for d in wm.v1_lane_rows(lane, 128))
    assert rows == list(range(128))
    # Row d of a block's V is bs contiguous elements.
    assert v_pool_index(2, 1, 9, 5, 2, 64, 16) - v_pool_index(2, 1, 9, 0, 2, 64, 16) == 5


def test_partitions():
    assert wm.partition_tokens(2, 1300, 512) == (1024, 1300)
    assert wm.partition_blocks(0, 1300, 16, 512) == list(range(32))
    assert wm.partition_blocks(2, 1300, 16, 512) == list(range(64, 82))


def test_ring_schedule():
    steps = wm.ring_schedule(count=5, stages=3)
    assert steps[:2] == [("issue", 0, 0), ("issue", 1, 1)]
    # Every block is issued before it is attended, into the slot it is read from, and no
    # slot is overwritten while its block has not been attended yet.
    in_slot = {}
    for action, i, slot in steps:
        if action == "issue":
            if slot in in_slot:
                assert in_slot[slot] is None, f"slot {slot} overwritten before it was read"
            in_slot[slot] = i
        else:
            assert in_slot[slot] == i
            in_slot[slot] = None
    # stages - 1 blocks are in flight while one is attended.
    attends = [k for k, s in enumerate(steps) if s[0] == "attend"]
    for k in attends:
        issued = max(i for a, i, _ in steps[:k] if a == "issue")
        assert issued == steps[k][1] + 2


def emulator_a_lane(row, k):
    """Where include/pa/mma.h's CPU emulator finds A[row][k]: (lane, register, half)."""
    return (row % 8) * 4 + (k % 8) // 2, row // 8 + 2 * (k // 8), k % 2


def emulator_b_lane(k, col):
    return col * 4 + (k % 8) // 2, k // 8, k % 2


def test_mma_fragments_are_the_ptx_layout():
    a = {wm.mma_a_element(lane, i): (lane, i) for lane in range(32) for i in range(8)}
    b = {wm.mma_b_element(lane, i): (lane, i) for lane in range(32) for i in range(4)}
    c = {wm.mma_c_element(lane, i): (lane, i) for lane in range(32) for i in range(4)}
    assert sorted(a) == [(r, k) for r in range(16) for k in range(16)]
    assert sorted(b) == [(k, n) for k in range(16) for n in range(8)]
    assert sorted(c) == [(r, n) for r in range(16) for n in range(8)]
    # Registers hold pairs: a_{2r}, a_{2r+1} are register r (the emulator's view).
    for (row, k), (lane, i) in a.items():
        assert emulator_a_lane(row, k) == (lane, i // 2, i % 2)
    for (k, n), (lane, i) in b.items():
        assert emulator_b_lane(k, n) == (lane, i // 2, i % 2)
    # The header's table (include/pa/mma.h), for lane 6: g = 1, t = 2.
    assert [wm.mma_a_element(6, i) for i in range(8)] == [
        (1, 4), (1, 5), (9, 4), (9, 5), (1, 12), (1, 13), (9, 12), (9, 13)]
    assert [wm.mma_c_element(6, i) for i in range(4)] == [(1, 4), (1, 5), (9, 4), (9, 5)]
    assert [wm.mma_b_element(6, i) for i in range(4)] == [(4, 1), (5, 1), (12, 1), (13, 1)]
    # Fragments filled by the PTX map and multiplied the emulator's way give A @ B.
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((16, 16)), rng.standard_normal((16, 8))
    frag_a = [[A[wm.mma_a_element(lane, i)] for i in range(8)] for lane in range(32)]
    frag_b = [[B[wm.mma_b_element(lane, i)] for i in range(4)] for lane in range(32)]
    C = np.full((16, 8), np.nan)
    for lane in range(32):
        for i in range(4):
            row, col = wm.mma_c_element(lane, i)
            total = 0.0
            for k in range(16):
                la, ra, ha = emulator_a_lane(row, k)
                lb, rb, hb = emulator_b_lane(k, col)
                total += frag_a[la][2 * ra + ha] * frag_b[lb][2 * rb + hb]
            C[row, col] = total
    np.testing.assert_allclose(C, A @ B)


# Chapter 1: the dense cache's layout and its decode kernel's warps and lanes.

def test_dense_offset_is_the_row_major_index():
    B, L, Hkv, D = 3, 5, 2, 8
    want = np.arange(B * L * Hkv * D).reshape(B, L, Hkv, D)
    for b, t, g, d in np.ndindex(B, L, Hkv, D):
        assert wm.dense_offset(b, t, g, d, L, Hkv, D) == want[b, t, g, d]
    # The two strides both kernels use.
    assert wm.dense_offset(0, 1, 0, 0, L, Hkv, D) == Hkv * D
    assert wm.dense_offset(1, 0, 0, 0, L, Hkv, D) == L * Hkv * D
    # The 64-bit example of the chapter: sequence 1 of 4096 slots x 8 heads x 128 starts at 2^22,
    # sequence 1024 at 2^32, beyond an int.
    assert wm.dense_offset(1024, 0, 0, 0, 4096, 8, 128) == 2 ** 32


def test_dense_kv_head_groups_consecutive_query_heads():
    assert [wm.dense_kv_head(h, 32, 8) for h in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [wm.dense_kv_head(h, 4, 4) for h in range(4)] == [0, 1, 2, 3]
    assert [wm.dense_kv_head(h, 4, 1) for h in range(4)] == [0, 0, 0, 0]


@pytest.mark.parametrize("context_len", [0, 1, 3, 4, 11, 64])
def test_dense_warps_share_the_tokens(context_len):
    tokens = [t for w in range(wm.DENSE_WARPS) for t in wm.dense_warp_tokens(w, context_len)]
    assert sorted(tokens) == list(range(context_len))  # each token once, none past the end
    for w in range(wm.DENSE_WARPS):
        assert all(t % wm.DENSE_WARPS == w for t in wm.dense_warp_tokens(w, context_len))


@pytest.mark.parametrize("head_size", [64, 80, 96, 112, 128, 256])
def test_dense_lanes_cover_the_head_once(head_size):
    per_lane = wm.dense_per_lane(head_size)
    dims = sorted(d for lane in range(32) for d in wm.dense_lane_dims(lane, head_size))
    assert dims == list(range(head_size))
    for lane in range(32):
        assert wm.dense_lane_dims(lane, head_size) == [lane + 32 * i for i in range(per_lane)
                                                       if lane + 32 * i < head_size]
    if head_size == 80:  # the chapter's example: kPerLane 3, the last 16 lanes hold two
        assert per_lane == 3
        assert [len(wm.dense_lane_dims(lane, 80)) for lane in range(32)] == [3] * 16 + [2] * 16
