"""The figures show what the reference defines: each highlighted cell, read back from the
drawn figure, is checked against pa_ref's own offsets, slots, counts and plans.

    .venv/bin/python -m pytest -q book/figures      (make book runs it before drawing)
"""

import sys
import time
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import figures  # noqa: E402
import style  # noqa: E402
import pa_ref  # noqa: E402  (figures put reference/ on the path)
from pa_ref import planner, work_maps as wm  # noqa: E402
from pa_ref.paged import blocks_for, token_slot  # noqa: E402


@pytest.fixture(scope="module")
def drawn(all_drawn):
    """Every figure (drawn once per session: conftest.py)."""
    return all_drawn


def test_every_figure_is_legible_and_wide_enough(drawn):
    for name, (fig, _) in drawn.items():
        style.check_legible(fig)  # raises below 12 px at the column's width
        style.check_placement(fig)  # raises on text cut off at the edge, or on two texts that collide
        assert 7.5 <= fig.get_figwidth() <= 8.0, name


def test_the_placement_check_sees_cut_off_and_colliding_text():
    fig = style.figure(2.0)
    fig.text(0.5, 0.5, "alone")
    style.check_placement(fig)
    fig.text(0.93, 0.2, "runs past the right edge")
    with pytest.raises(ValueError, match="cut off"):
        style.check_placement(fig)
    style.plt.close(fig)
    fig = style.figure(2.0)
    ax = fig.add_axes([0.1, 0.2, 0.8, 0.6])
    ax.set_xlim(0, 10)
    ax.set_xticks([-5, 0, 10, 15])  # the ticks outside the view are not drawn: no false alarm
    style.check_placement(fig)
    fig.text(0.5, 0.5, "one label")
    fig.text(0.52, 0.5, "another label")
    with pytest.raises(ValueError, match="overlap"):
        style.check_placement(fig)
    style.plt.close(fig)
    fig = style.figure(2.0)
    label = fig.text(0.1, 0.5, "10: t5 h0")
    fig.canvas.draw()
    right = label.get_window_extent(fig.canvas.get_renderer()).x1 / fig.bbox.width
    fig.text(right, 0.5, "43")  # starts where the label ends: reads "10: t5 h043"
    with pytest.raises(ValueError, match="run into each other"):
        style.check_placement(fig)
    style.plt.close(fig)


def test_all_figures_draw_in_a_few_seconds(tmp_path):
    start = time.process_time()  # CPU time: the machine may be busy
    figures.main(["figures.py", str(tmp_path)])
    assert time.process_time() - start < 15
    assert sorted(p.stem for p in tmp_path.glob("*.svg")) == sorted(figures.FIGURES)


def test_dense_vs_paged(drawn):
    _, info = drawn["dense-vs-paged"]
    prompts, outputs = pa_ref.synthetic_trace()
    for i, row in enumerate(info["rows"]):
        assert row["used"] == prompts[i] + outputs[i]
        assert row["paged_reserved"] == blocks_for(row["used"], 16) * 16
    dense_ax, paged_ax = info["axes"]
    # The drawn bars end where the reservations end.
    for ax, key in ((dense_ax, "dense_reserved"), (paged_ax, "paged_reserved")):
        ends = sorted(p.get_x() + p.get_width() for p in ax.patches if p.get_gid() == "waste")
        assert ends == sorted(float(r[key]) for r in info["rows"])
    assert info["dense"] == pa_ref.dense_memory_report(prompts, outputs)


def test_slot_lookup(drawn):
    _, info = drawn["slot-lookup"]
    (x, y), = info["slot_cell"]
    bs = info["block_size"]
    block = [b for b, (x0, y0) in info["pos"].items() if x0 <= x < x0 + bs and round(y0) == y]
    assert len(block) == 1
    offset = x - info["pos"][block[0]][0]
    assert block[0] * bs + offset == token_slot(info["block_list"], info["position"], bs) == 179


@pytest.mark.parametrize("pool", ["K", "V"])
def test_kv_layout_highlights_the_reference_offset(drawn, pool):
    _, info = drawn["kv-layout"]
    cols, start = info["cols"], info["start"]
    index = pa_ref.k_pool_index if pool == "K" else pa_ref.v_pool_index
    args = (2, 64, 16, 8) if pool == "K" else (2, 64, 16)
    (c, r), = info[pool]["element"]
    assert start + r * cols + c == index(3, 1, 9, 5, *args) == {"K": 7337, "V": 7317}[pool]
    token = {start + r * cols + c for c, r in info[pool]["token"]}
    assert token == {index(3, h, d, 5, *args) for h in range(2) for d in range(64)}


def test_reshape_slots(drawn):
    _, info = drawn["reshape-slots"]
    want = {i: divmod(s, info["block_size"]) for i, s in enumerate(info["slot_mapping"]) if s >= 0}
    assert info["cells"] == want


def test_block_table(drawn):
    _, info = drawn["block-table"]
    m, batch, bs = info["manager"], info["batch"], info["block_size"]
    assert sorted(b * bs + o for b, o in info["new_cells"]) == sorted(batch["slot_mapping"].tolist())
    assert batch["slot_mapping"].tolist() == [81, 97, 66]  # the chapter 3 page's last step
    for row, seq in zip(batch["block_table"], [100, 101, 102]):
        assert [b for b in row if b >= 0] == m.block_list(seq)


def test_v1_lanes(drawn):
    _, info = drawn["v1-lanes"]
    bs, D, x = info["block_size"], info["head_size"], info["x"]
    assert info["walk"] == [(j, j % 4) for j in range(blocks_for(100, bs))]
    seen = set()
    for lane, token, chunk in info["kchunks"]:
        o, g = wm.v1_lane_token(lane, bs)
        assert o == token and chunk in wm.v1_lane_chunks(lane, bs, D, x)
        seen.add((chunk, token))
    assert len(seen) == (D // x) * bs
    # A row pair of the drawing (one load of the warp) is 512 contiguous bytes of the pool.
    G = 32 // bs
    for r in range(D // x // G):
        offs = sorted(pa_ref.k_pool_index(0, 0, c * x, o, 1, D, bs, x) for c, o in seen if c // G == r)
        assert offs == list(range(r * 32 * x, (r + 1) * 32 * x, x))
    for lane, d in info["vrows"]:
        assert d in wm.v1_lane_rows(lane, D)


def test_v2_partitions(drawn):
    _, info = drawn["v2-partitions"]
    q, k_pool, v_pool, table, lens, scale, bs = info["inputs"]
    assert info["spans"] == [(0, 512), (512, 1024), (1024, 1300)]
    for (a, b), m in zip(info["spans"], info["m"]):
        assert np.isclose(info["scores"][a:b].max(), m)  # the drawn maximum is max_logits
    np.testing.assert_allclose(info["out"], pa_ref.paged_decode_attention(q, k_pool, v_pool, table, lens,
                                                                          scale, bs), atol=1e-12)
    merged = np.sum(info["w"][:, None] * pa_ref.decode_partitions(q, k_pool, v_pool, table, lens, scale,
                                                                  bs)[2][0, 0], axis=0) / info["w"].sum()
    np.testing.assert_allclose(merged, info["out"][0, 0], atol=1e-12)


def test_e4m3(drawn):
    _, info = drawn["e4m3"]
    assert info["byte"] == int(pa_ref.quantize_e4m3(np.array([0.3]), 1.0)[0]) == 0x2A
    assert info["bits"] == [(0x2A >> (7 - i)) & 1 for i in range(8)]
    assert info["value"] == 0.3125
    assert len(info["grid"]) == 126 and info["grid"].max() == pa_ref.E4M3_MAX


def test_cow(drawn):
    _, info = drawn["cow"]
    stages = info["stages"]
    assert info["copy_expected"]
    assert [s["copies"] for s in stages] == [[], [], [(2, 3)], [], []]
    assert stages[1]["refcounts"] == [2, 2, 2, 0, 0]
    assert stages[2]["refcounts"] == [2, 2, 1, 1, 0]
    assert stages[4]["refcounts"] == [1, 1, 0, 1, 0]
    # Replay with the reference: the drawn counts are the manager's.
    m = pa_ref.SharedBlockManager(5, 4)
    m.add_sequence(0)
    m.append_slots(0, 10)
    m.fork(0, 1)
    m.append_slots(1, 1)
    m.append_slots(0, 1)
    assert stages[3]["refcounts"] == [m.refcount(b) for b in range(5)]


def test_serving_timeline(drawn):
    _, info = drawn["serving-timeline"]
    for rec, total in zip(info["log"], info["totals"]):
        assert total == rec["num_used"]  # the stacked blocks are the manager's count
        assert total <= 10
    assert info["generated"] == {r[0]: r[3] for r in figures.SERVE_REQUESTS}
    events = {n: [e for _, e in v] for n, v in info["drawn"].items()}
    assert "preempt" in events["C"] and events["C"].count("prefill") == 2
    hits = [rec["ev"]["D"] for rec in info["log"] if isinstance(rec["ev"].get("D"), tuple)]
    assert hits == [("prefill", 2, 8)]


def test_ring(drawn):
    _, info = drawn["ring"]
    count, stages = info["count"], info["stages"]
    for col, slot, block, status in info["drawn"]:
        assert slot == wm.ring_slot(block, stages)
        if status == "attend":
            assert col == block + 1  # column 0 is the prologue
        if status == "empty":
            assert block >= count
    attended = sorted(b for _, _, b, s in info["drawn"] if s == "attend")
    assert attended == list(range(count))


@pytest.mark.parametrize("name,fn", [("A", wm.mma_a_element), ("B", wm.mma_b_element),
                                     ("C", wm.mma_c_element)])
def test_mma_fragment(drawn, name, fn):
    fig, info = drawn["mma-fragment"]
    ax = info["ax"]
    x0 = {"A": 0, "B": 18, "C": 27.5}[name]
    cells = [p for p in ax.patches if p.get_gid() == name]
    assert len(cells) == {"A": 256, "B": 128, "C": 128}[name]
    for p in cells:
        lane, i = (int(v) for v in p.get_label().split(":"))
        assert fn(lane, i) == (int(round(p.get_y())), int(round(p.get_x() - x0)))
    outlined = sorted((int(round(p.get_y())), int(round(p.get_x() - x0)))
                      for p in ax.patches if p.get_gid() == f"{name}-lane")
    per_lane = {"A": 8, "B": 4, "C": 4}[name]
    assert outlined == sorted(fn(info["lane"], i) for i in range(per_lane))


def test_varlen_tiles(drawn):
    _, info = drawn["varlen-tiles"]
    plan = planner.make_plan(*info["args"])
    G = info["args"][2] // info["args"][3]
    tiles = plan["tiles"]
    for i, h, k in info["rows"]:
        seq, row0, rows = tiles[k][:3]
        assert row0 <= i * G + h < row0 + rows
    assert sorted(info["items"]) == sorted(
        ([t[1] for t in tiles].index(it[2]), it[1], it[3], it[4]) for it in plan["items"])


def test_varlen_plan(drawn):
    _, info = drawn["varlen-plan"]
    lens, qsl, hq, hkv, grid = info["args"]
    after = planner.make_plan(lens, qsl, hq, hkv, grid)
    tiles = planner.tiles_of(lens, qsl, hq // hkv, False)
    before = planner.cut_and_deal(tiles, [1] * len(tiles), hkv, grid, 0)
    for key, plan in (("before", before), ("after", after)):
        bars = info[key]["bars"]
        want = [(c, it[0], it[3], it[4]) for c, block in enumerate(plan["blocks"]) for it in block]
        assert [b[:4] for b in bars] == want
        for c in range(grid):
            assert np.isclose(sum(b[4] for b in bars if b[0] == c), plan["loads"][c])
    assert max(after["loads"]) < 0.7 * max(before["loads"])


def test_hybrid_window(drawn):
    from pa_ref import hybrid

    fig, info = drawn["hybrid-window"]
    w, bs = info["window"], info["block_size"]
    ax = fig.axes[0]
    for r, row in enumerate(info["rows"]):
        L = row["length"]
        # The null cells drawn are exactly the blocks before the next query's first needed one.
        want = list(range(min(hybrid.first_needed_block(L, w, bs), -(-L // bs))))
        assert row["null_sliding"] == want, (L, row)
        assert row["null_full"] == [] and 0 not in row["full"]
        assert len(figures.tagged(ax, f"null-sliding-{r}")) == len(want)
        assert len(figures.tagged(ax, f"null-full-{r}")) == 0
        assert row["window"] == hybrid.visible_range(L, w)
        held = len(row["full"]) + sum(b != 0 for b in row["sliding"])
        assert held == hybrid.hybrid_kv_blocks(L, bs, [None, w]), (L, held)
        # Live entries are distinct real blocks, owned by one group only.
        live = row["full"] + [b for b in row["sliding"] if b != 0]
        assert len(set(live)) == len(live)
    pool = info["pool"]
    assert pool[0] == "null" and len(figures.tagged(ax, "pool-null")) == 1
    last = info["rows"][-1]
    assert pool.count("full") == len(last["full"])
    assert pool.count("sliding") == sum(b != 0 for b in last["sliding"])
    assert pool.count("free") == info["free"] == info["num_blocks"] - 1 - pool.count("full") - pool.count("sliding")
    assert info["reused"] is not None  # the figure's text names a block both groups held in turn


def test_mla_cache(drawn):
    from pa_ref import mla

    fig, info = drawn["mla-cache"]
    ax = fig.axes[0]
    # To scale: a cell is 128 bytes, and the counts are the reference's byte counts.
    assert info["mla"]["bytes"] == mla.mla_bytes_per_token() == 1152
    assert info["gqa"]["bytes"] == mla.kv_bytes_per_token(8, 128) == 4096
    assert info["mha"]["bytes"] == mla.kv_bytes_per_token(128, 128) == 65536
    for key in ("mla", "gqa", "mha"):
        assert len(figures.tagged(ax, f"cell-{key}")) == info[key]["bytes"] // 128, key


def test_mla_absorbed(drawn):
    from pa_ref import mla

    fig, info = drawn["mla-absorbed"]
    ax = fig.axes[0]
    assert info["gap"] < 1e-12  # the caption's claim: naive == absorbed
    assert info["latent_units"] * 64 == mla.D_C and info["rope_units"] * 64 == mla.D_ROPE
    assert len(figures.tagged(ax, "row-latent")) == 4 * info["latent_units"]
    assert len(figures.tagged(ax, "row-rope")) == 4 * info["rope_units"]
