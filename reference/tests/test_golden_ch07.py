"""Chapter 7's golden cases: copy-on-write scripts, scenarios and the block copy."""

import numpy as np
import pytest

from pa_ref import SharedBlockManager, copy_blocks, pack_x, round_to
from pa_ref.golden import CHAPTERS, main
from pa_ref.golden_ch03 import OP_ADD, OP_APPEND, OP_RELEASE
from pa_ref.golden_ch07 import (
    CH07_COPIES,
    CH07_SCENARIOS,
    CH07_SCRIPTS,
    OP_FORK,
    apply_op,
    replay,
)
from pa_ref.paged import blocks_for

SCRIPT_ARRAYS = {
    "op_kind": np.int32, "op_seq": np.int32, "op_n": np.int32, "op_parent": np.int32,
    "expect_error": np.int32, "expect_slots": np.int64, "expect_copies": np.int32,
    "expect_copy_counts": np.int32, "expect_num_free": np.int32, "expect_high_water": np.int32,
    "final_seq_ids": np.int32, "final_lengths": np.int32, "final_block_lists": np.int32,
    "final_refcounts": np.int32,
}
SCENARIO_ARRAYS = dict(SCRIPT_ARRAYS, shared_blocks_used=np.int32, unshared_blocks_used=np.int32,
                       saved_fraction=np.float64)
COPY_ARRAYS = {"k_pools": np.float32, "v_pools": np.float32, "pairs": np.int32,
               "expected_k_pools": np.float32, "expected_v_pools": np.float32}


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    root = tmp_path_factory.mktemp("golden")
    assert main(["--out", str(root), "--chapter", "7"]) == 0
    return root


def read_case(case_dir):
    arrays = {p.stem: np.load(p) for p in case_dir.glob("*.npy")}
    params = dict(line.split(" ", 1) for line in (case_dir / "case.txt").read_text().splitlines())
    return arrays, params


def cases(golden, specs):
    return [(spec, *read_case(golden / "ch07" / spec.name)) for spec in specs]


def ops_of(a):
    return list(zip(*(a[k].tolist() for k in ("op_kind", "op_seq", "op_n", "op_parent"))))


def test_writes_every_case_and_a_stamp(golden):
    assert 7 in CHAPTERS
    names = sorted(p.name for p in (golden / "ch07").iterdir())
    assert names == sorted(c.name for c in CH07_SCRIPTS + CH07_SCENARIOS + CH07_COPIES)
    assert (golden / "golden.stamp").read_text() == "ch07\n"


def test_rerun_gives_identical_bytes(golden, tmp_path):
    main(["--out", str(tmp_path), "--chapter", "7"])
    for old in (golden / "ch07").rglob("*.*"):
        assert (tmp_path / old.relative_to(golden)).read_bytes() == old.read_bytes(), old


def test_output_is_small(golden):
    total = sum(p.stat().st_size for p in (golden / "ch07").rglob("*") if p.is_file())
    assert total < 3e6, total


# ---------------------------------------------------------------- scripts and scenarios


def check_script_case(spec, a, params, names):
    assert set(a) == set(names), spec.name
    for key, dtype in names.items():
        assert a[key].dtype == dtype, (spec.name, key)
    n = len(a["op_kind"])
    for key in ("op_seq", "op_n", "op_parent", "expect_error", "expect_copy_counts", "expect_num_free"):
        assert a[key].shape == (n,), key
    assert a["expect_copies"].shape == (a["expect_copy_counts"].sum(), 2)
    assert set(a["expect_copy_counts"].tolist()) <= {0, 1}  # one op asks for at most one copy
    assert ((a["op_parent"] >= 0) == (a["op_kind"] == OP_FORK)).all()
    assert params["num_blocks"] == str(spec.num_blocks) and params["block_size"] == str(spec.block_size)
    assert spec.block_size in (8, 16, 32)  # the block sizes the C++ manager supports
    # Replaying the stored ops on the reference reproduces every expectation.
    manager = SharedBlockManager(spec.num_blocks, spec.block_size)
    again, _, _ = replay(manager, ops_of(a))
    for key, value in again.items():
        np.testing.assert_array_equal(value, a[key], err_msg=f"{spec.name} {key}")
    seqs = manager.sequences()
    assert a["final_seq_ids"].tolist() == seqs
    assert a["final_lengths"].tolist() == [manager.length(s) for s in seqs]
    for row, s in zip(a["final_block_lists"], seqs):
        blocks = manager.block_list(s)
        assert row[:len(blocks)].tolist() == blocks and (row[len(blocks):] == -1).all()
    assert a["final_refcounts"].shape == (spec.num_blocks,)
    owners = np.bincount(a["final_block_lists"][a["final_block_lists"] >= 0],
                         minlength=spec.num_blocks)
    np.testing.assert_array_equal(a["final_refcounts"], owners)
    assert a["expect_num_free"][-1] == (owners == 0).sum()
    # Successful appends return exactly their n slots.
    ok_appends = (a["op_kind"] == OP_APPEND) & (a["expect_error"] == 0)
    assert a["op_n"][ok_appends].sum() == len(a["expect_slots"])
    assert not a["expect_error"][a["op_kind"] != OP_APPEND].any()


def test_script_cases(golden):
    for spec, a, params in cases(golden, CH07_SCRIPTS):
        check_script_case(spec, a, params, SCRIPT_ARRAYS)
        assert params["kind"] == "cow_script" and len(a["op_kind"]) == spec.num_ops


def events(spec, a):
    """Replay a script and classify its appends."""
    m = SharedBlockManager(spec.num_blocks, spec.block_size)
    seen = {"copy_only_oob": 0, "full_shared_tail": 0, "zero_append": 0, "shared_release": 0}
    for op in ops_of(a):
        kind, seq, n, _ = op
        if kind == OP_APPEND:
            copy, new = m.needs_copy(seq, n), m.new_blocks_needed(seq, n)
            if copy and new <= m.num_free < new + 1:
                seen["copy_only_oob"] += 1  # only the copy does not fit
            blocks = m.block_list(seq)
            if n > 0 and blocks and m.length(seq) % spec.block_size == 0 and m.refcount(blocks[-1]) > 1:
                seen["full_shared_tail"] += 1
            seen["zero_append"] += n == 0
        if kind == OP_RELEASE and any(m.refcount(b) > 1 for b in m.block_list(seq)):
            seen["shared_release"] += 1
        apply_op(m, *op)
        m.take_copies()
    return seen


def test_scripts_cover_the_interesting_events(golden):
    total = {}
    for spec, a, _ in cases(golden, CH07_SCRIPTS):
        kinds = np.bincount(a["op_kind"], minlength=4)
        assert (kinds[[OP_ADD, OP_APPEND, OP_RELEASE, OP_FORK]] > 5).all(), spec.name
        assert a["expect_error"].sum() >= 10 and len(a["expect_copies"]) >= 10, spec.name
        assert a["final_refcounts"].max() >= 2, spec.name  # something is still shared at the end
        for key, count in events(spec, a).items():
            total[key] = total.get(key, 0) + count
    assert all(count >= 3 for count in total.values()), total


def test_scenario_cases(golden):
    results = {}
    for spec, a, params in cases(golden, CH07_SCENARIOS):
        check_script_case(spec, a, params, SCENARIO_ARRAYS)
        assert not a["expect_error"].any()
        shared, unshared = int(a["shared_blocks_used"]), int(a["unshared_blocks_used"])
        assert shared == int(a["expect_high_water"]) and 0 < shared < unshared
        assert a["saved_fraction"] == 1 - shared / unshared
        # The unshared peak, recomputed: sum of ceil(len / bs) over live sequences.
        lengths, peak = {}, 0
        for kind, seq, n, parent in ops_of(a):
            if kind == OP_ADD:
                lengths[seq] = 0
            elif kind == OP_FORK:
                lengths[seq] = lengths[parent]
            elif kind == OP_RELEASE:
                del lengths[seq]
            else:
                lengths[seq] += n
            peak = max(peak, sum(blocks_for(v, spec.block_size) for v in lengths.values()))
        assert peak == unshared, spec.name
        results[spec.name] = (shared, unshared, len(a["expect_copies"]))
    # 37 tokens in blocks of 16: two shared full blocks and a shared 5-token tail; 3 of
    # the 4 samples copy the tail (the last owns it alone); each ends with 57 tokens in 4 blocks.
    assert results["scenario_parallel_sampling"] == (2 + 4 * 2, 4 * 4, 3)
    # 100 tokens = 6 full blocks + 4: each of the 6 requests copies the tail.
    assert results["scenario_prefix_sharing"][2] == 6
    assert results["scenario_beam_search"][2] > 0


# ---------------------------------------------------------------- the copy kernel


def test_copy_cases(golden):
    for spec, a, params in cases(golden, CH07_COPIES):
        assert set(a) == set(COPY_ARRAYS), spec.name
        for key, dtype in COPY_ARRAYS.items():
            assert a[key].dtype == dtype, (spec.name, key)
        x, nb = pack_x(spec.dtype), spec.num_blocks
        hkv, d, bs, layers = spec.num_kv_heads, spec.head_size, spec.block_size, spec.num_layers
        assert a["k_pools"].shape == a["expected_k_pools"].shape == (layers, nb, hkv, d // x, bs, x)
        assert a["v_pools"].shape == a["expected_v_pools"].shape == (layers, nb, hkv, d, bs)
        assert params["x"] == str(x) and params["num_layers"] == str(layers)
        np.testing.assert_array_equal(round_to(a["k_pools"], spec.dtype), a["k_pools"])
        pairs = a["pairs"]
        srcs, dsts = pairs[:, 0].tolist(), pairs[:, 1].tolist()
        assert pairs.shape == (spec.num_pairs, 2)
        assert len(set(dsts)) == len(dsts) and not set(dsts) & set(srcs)
        assert len(set(srcs)) < len(srcs)  # one src copied twice
        k, v = copy_blocks(a["k_pools"].copy(), a["v_pools"].copy(), pairs)
        np.testing.assert_array_equal(k, a["expected_k_pools"])
        np.testing.assert_array_equal(v, a["expected_v_pools"])
        # Every dst changes (no two blocks hold the same values); nothing else does.
        for pool, expected in (("k_pools", "expected_k_pools"), ("v_pools", "expected_v_pools")):
            changed = [b for b in range(nb) if not np.array_equal(a[pool][:, b], a[expected][:, b])]
            assert changed == sorted(dsts), spec.name
