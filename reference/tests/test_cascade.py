"""Chapter 8's cascade reference and golden cases: cascade == plain paged decode."""

import re

import numpy as np
import pytest

from pa_ref.cascade import cascade_decode_attention, plan_cascade, prefix_chunk_tokens
from pa_ref.golden import main
from pa_ref.golden_ch08_cascade import CH08_CASCADE, cascade_arrays, cascade_layout
from pa_ref.golden_io import case_seed
from pa_ref.paged_attention import paged_decode_attention

ITEMSIZE = {"fp32": 4, "fp16": 2, "bf16": 2}


@pytest.fixture(scope="module")
def arrays():
    return {case.name: cascade_arrays(case) for case in CH08_CASCADE}


def reference_args(a, case):
    return (a["q"], a["k_pool"], a["v_pool"], a["block_table"], a["context_lens"],
            float(a["scale"]), case.block_size)


@pytest.mark.parametrize("case", CH08_CASCADE, ids=lambda c: c.name)
def test_cascade_equals_plain_decode(case, arrays):
    """Prefix chunks merged with suffix partitions (NumPy merge_partitions) = plain decode,
    for the kernel's chunk size and for others."""
    a = arrays[case.name]
    plain = paged_decode_attention(*reference_args(a, case))
    np.testing.assert_allclose(a["expected"], plain, rtol=0, atol=0)
    assert not np.isnan(plain).any()
    kernel_chunk = prefix_chunk_tokens(case.head_size, case.block_size, ITEMSIZE[case.dtype])
    for chunk in sorted({case.block_size, 2 * case.block_size, kernel_chunk}):
        got = cascade_decode_attention(*reference_args(a, case), chunk_tokens=chunk)
        np.testing.assert_allclose(got, plain, rtol=1e-12, atol=1e-12, err_msg=f"chunk {chunk}")
    # Small suffix partitions too: many partitions per sequence, merged.
    got = cascade_decode_attention(*reference_args(a, case), chunk_tokens=kernel_chunk,
                                   partition_size=case.block_size)
    np.testing.assert_allclose(got, plain, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", CH08_CASCADE, ids=lambda c: c.name)
def test_planner_finds_the_designed_groups(case, arrays):
    a = arrays[case.name]
    _, _, groups, _ = cascade_layout(case, np.random.default_rng(case_seed(case.name)))
    want_prefix = np.zeros(len(a["context_lens"]), dtype=np.int32)
    for grp, members in zip(case.groups, groups):
        if len(members) >= 2 and grp.shared_blocks >= 1:
            # A shared partial block is not part of the prefix.
            want_prefix[members] = grp.shared_blocks * case.block_size
            assert len(set(a["group_of"][members])) == 1 and a["group_of"][members[0]] >= 0
        else:
            assert (a["group_of"][members] == -1).all()
    np.testing.assert_array_equal(a["prefix_lens"], want_prefix)
    assert (a["prefix_lens"] <= a["context_lens"]).all()


def test_planner_rules_on_hand_made_tables():
    t = [[1, 2, 3], [1, 2, 4], [5, 6, 7], [1, 2, 8]]
    groups, pre = plan_cascade(t, [12, 12, 12, 9], 4)
    assert groups == [([0, 1, 3], 8)] and pre.tolist() == [8, 8, 0, 8]
    # A block shared, but not from the start: no group.
    assert plan_cascade([[1, 2], [3, 2]], [8, 8], 4)[0] == []
    # A shared block that is partial in a member is not part of the prefix.
    assert plan_cascade([[1, 2], [1, 2]], [6, 7], 4)[0] == [([0, 1], 4)]
    assert plan_cascade([[1, 2], [1, 2]], [8, 7], 4)[0] == [([0, 1], 4)]
    # The whole context shared.
    assert plan_cascade([[1, 2], [1, 2]], [8, 8], 4)[0] == [([0, 1], 8)]
    # min_shared_blocks decides who joins; the prefix is then all the members share.
    t = [[1, 2, 3], [1, 2, 3], [1, 5, 6]]
    assert plan_cascade(t, [12, 12, 12], 4, 1)[0] == [([0, 1, 2], 4)]
    assert plan_cascade(t, [12, 12, 12], 4, 2)[0] == [([0, 1], 12)]
    t = [[1, 2], [1, 3], [1, 2], [1, 3]]
    assert plan_cascade(t, [8] * 4, 4, 2)[0] == [([0, 2], 8), ([1, 3], 8)]
    # Empty and one-partial-block sequences share nothing.
    assert plan_cascade([[1, 2], [1, 2], [9, 9]], [0, 3, 0], 4)[0] == []


def test_cascade_cases_are_written_beside_prefill(tmp_path):
    assert main(["--out", str(tmp_path), "--chapter", "8"]) == 0
    names = sorted(p.name for p in (tmp_path / "ch08").iterdir() if p.name.startswith("cascade_"))
    assert names == sorted(c.name for c in CH08_CASCADE)
    for case in CH08_CASCADE:
        m = re.fullmatch(r"cascade_(fp16|bf16|fp32)_d(\d+)_bs(\d+)_g(\d+)_\w+", case.name)
        assert m and (m[1], int(m[2]), int(m[3]), int(m[4])) == (
            case.dtype, case.head_size, case.block_size, case.group), case.name


def test_cases_cover_the_edges():
    suffixes = {(c.block_size, s) for c in CH08_CASCADE for g in c.groups if g.shared_blocks
                for s in g.suffix_lens}
    for bs in (8, 16, 32):
        assert any(b == bs for b, _ in suffixes), bs
    assert {0, 1} <= {s for _, s in suffixes}
    assert {(32, 31), (32, 32), (32, 33), (8, 7), (8, 8), (8, 9)} <= suffixes
    assert {c.group for c in CH08_CASCADE} >= {1, 2, 4, 8}
    assert {c.head_size for c in CH08_CASCADE} >= {64, 128}
    assert {c.dtype for c in CH08_CASCADE} == {"fp32", "fp16", "bf16"}
    assert any(g.shared_partial for c in CH08_CASCADE for g in c.groups)
