"""Chapter 13's figures (ch13.py) and the layouts they draw (reference/pa_ref/hopper_layouts.py)
against the C++: the C++ still holds the expressions the module mirrors; TMA's writes land
where wgmma's descriptors read, for every block and head size; P's accumulators are A's
fragment; the pipeline's waits pass on the phases the kernel means (and the planted wrong
parities deadlock or read early); and the drawn cells are those.

    .venv/bin/python -m pytest -q book/figures
"""

import re
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

import figures  # noqa: E402,F401  (puts reference/ on the path)
from pa_ref import hopper_layouts as hl  # noqa: E402
from pa_ref.paged import k_pool_index, v_pool_index  # noqa: E402

NAMES = ("hopper-pipeline", "hopper-stage-layout", "wgmma-fragments")


@pytest.fixture(scope="module")
def drawn(all_drawn):
    return {name: all_drawn[name] for name in NAMES}


def source(path):
    return re.sub(r"\s+", " ", (ROOT / path).read_text())


def fields(p):
    return p.get_label().split(":")


# ---- the C++ holds what hopper_layouts.py mirrors ------------------------------------------

def test_cpp_holds_the_mirrored_expressions():
    sw = source("include/pa/hopper/swizzle.h")
    assert ("const uint32_t bits = swizzle_bytes == 128 ? 7u : swizzle_bytes == 64 ? 3u : "
            "swizzle_bytes == 32 ? 1u : 0u;") in sw
    assert "return address ^ (((address >> 7) & bits) << 4);" in sw
    wg = source("include/pa/hopper/wgmma.h")
    assert "return 16 * (t / 32) + (t % 32) / 4 + 8 * ((i / 2) % 2);" in wg
    assert "return 8 * (i / 4) + 2 * (t % 4) + i % 2; }" in wg
    assert "a[0] = A[16 w + g][2q, 2q+1] a[1] = A[16 w + g + 8][2q, 2q+1]" in wg
    assert "a[2] = A[16 w + g][2q+8, 2q+9] a[3] = A[16 w + g + 8][2q+8, 2q+9]" in wg
    assert "swizzled: start + (r % 8) * W + (r / 8) * SBO + k * size (LBO unused)" in wg
    assert "no swizzle: start + (r % 8) * 16 + (r / 8) * SBO + (k / T) * LBO + (k % T) * size" in wg
    lay = source("solutions/13-hopper-async/stage_layout.cuh")
    assert "static constexpr int kTokens = D > 128 ? 64 : 128;" in lay
    assert "static constexpr int kStages = D == 64 ? 4 : D == 128 ? 3 : 2;" in lay
    assert "static constexpr int kQBytes = kCtaRows * D * 2;" in lay
    assert "return base + S::kQBytes + stage * S::kStageBytes; }" in lay
    assert "kSlabs" not in lay
    assert "return k(stage) + c * (S::kTokens * 16) + p * (bs * 16);" in lay
    assert "return v(stage) + p * (bs * D * 2); }" in lay
    assert "const uint64_t dims[5] = {8, bs, d / 8, hkv, uint64_t(s.num_blocks)};" in lay
    assert "const uint64_t strides[4] = {16, bs * 16, d * bs * 2, hkv * d * bs * 2};" in lay
    assert "const uint32_t box[5] = {8, uint32_t(bs), 1, 1, 1};" in lay
    assert "m.swizzle = TmaSwizzle::None; m.allocation_bytes = size_t(s.num_blocks) * hkv * d * bs * 2;" in lay
    assert "const uint64_t dims[4] = {bs, d, hkv, uint64_t(s.num_blocks)};" in lay
    assert "const uint32_t box[4] = {uint32_t(bs), uint32_t(d), 1, 1};" in lay
    assert "m.swizzle = bs == 8 ? TmaSwizzle::None : static_cast<TmaSwizzle>(bs * 2);" in lay
    assert ("return wgmma_descriptor(q_s + (ks / 4) * (64 * 128) + (ks % 4) * 32, 16, 1024, "
            "WgmmaSwizzle::B128);") in lay
    assert "constexpr uint32_t chunk_bytes = TileShape<D>::kTokens * 16;" in lay
    assert ("return wgmma_descriptor(sm.k(stage) + 2 * ks * chunk_bytes, chunk_bytes, 128, "
            "WgmmaSwizzle::None);") in lay
    assert ("return wgmma_descriptor(sm.v_box(stage, ks * 16 / bs, bs) + (ks * 16 % bs) * 2, 16, 8 * bs * 2, "
            "static_cast<WgmmaSwizzle>(bs * 2));") in lay
    assert "return wgmma_descriptor(sm.v_box(stage, 2 * ks, bs), uint32_t(bs * D * 2), 128, WgmmaSwizzle::None);" in lay
    pipe = source("solutions/13-hopper-async/stage_pipeline.cuh")
    assert "for (int c = lane; c < D / 8; c += 32) tma_load_5d(sm.k_box(stage, p, c, bs), k_map, 0, 0, c, kv_head, block," in pipe
    assert "mbarrier_wait_parity(sm.empty(stage), ((n / S::kStages) & 1) ^ 1);" in pipe
    sched = source("solutions/13-hopper-async/wgmma_schedule.cuh")
    assert "const unsigned phase = (n / S::kStages) & 1;" in sched
    assert "if (t == 0) mbarrier_arrive(sm.empty(stage));" in sched
    kern = source("solutions/13-hopper-async/prefill_kernel.cuh")
    assert "mbarrier_init(sm.empty(s), 2); // one arrival per consumer warpgroup" in kern
    math = source("solutions/13-hopper-async/tile_math.cuh")
    assert "swizzle_address(base + q_chunk_offset(r, c), 128);" in math
    assert "return uint32_t((c / 8) * 64 * 128 + r * 128 + (c % 8) * 16);" in lay
    assert "p[i / 8][(i % 8) / 2] = pack_pair<T>(e0, e1);" in math
    assert "inline constexpr int kCtaRows = 128;" in source("include/pa/ch13_hopper.h")
    tma = source("include/pa/hopper/tma.h")
    assert "if (span && s.box[0] * elem != span)" in tma  # the rule tma_box asserts


def test_swizzle_moves_chunks_within_their_row_and_is_its_own_inverse():
    for mode in (0, 32, 64, 128):
        for a in range(0, 4096, 2):
            s = hl.swizzle_address(a, mode)
            assert hl.swizzle_address(s, mode) == a
            assert s // 128 == a // 128 and s % 16 == a % 16


# ---- TMA writes what wgmma reads --------------------------------------------------------------

@pytest.mark.parametrize("bs", [8, 16, 32])
@pytest.mark.parametrize("D", [64, 128, 256])
def test_tma_writes_what_wgmma_reads(bs, D):
    hkv, num_blocks, head, block, stage = 2, 5, 1, 3, 1
    shape = hl.tile_shape(D)
    pages = shape["tokens"] // bs
    k_spec, v_spec = hl.k_map_spec(bs, D, hkv, num_blocks), hl.v_map_spec(bs, D, hkv, num_blocks)
    for p in (0, pages - 1):
        k_at = {}
        for c in range(D // 8):  # load_k_page: one box per 16-byte chunk of the page
            k_at.update(hl.tma_box(k_spec, (0, 0, c, head, block), hl.k_box(stage, p, c, bs, D)))
        assert len(k_at) == bs * D  # the page's boxes write bs x D elements, none twice
        assert len(set(k_at.values())) == bs * D
        v_at = dict(hl.tma_box(v_spec, (0, 0, head, block), hl.v_box(stage, p, bs, D)))
        for tok in range(bs):
            n = p * bs + tok  # the token's row of the stage
            for d in range(D):
                # S = Q K^T: B is K-major, n = token, k = dim (k-step d // 16)
                start, lbo, sbo, swz = hl.k_desc(stage, d // 16, D)
                want = hl.k_major(start, n, d % 16, sbo, swz, lbo)
                assert k_at[2 * k_pool_index(block, head, d, tok, hkv, D, bs, 8)] == want, (p, tok, d)
                # O += P V: B is K-major, n = dim, k = token (k-step n // 16)
                start, lbo, sbo, swz = hl.v_desc(stage, n // 16, bs, D)
                want = hl.k_major(start, d, n % 16, sbo, swz, lbo)
                assert v_at[2 * v_pool_index(block, head, d, tok, hkv, D, bs)] == want, (p, tok, d)


@pytest.mark.parametrize("D", [64, 128, 256])
def test_load_q_writes_what_q_desc_reads(D):
    q_s = 64 * D * 2  # warpgroup 1's half of Q (Smem::q(1))
    at = {}
    for r in range(64):
        for c in range(D // 8):
            for e in range(8):
                a = hl.q_address(q_s, r, c) + 2 * e
                assert a not in at
                at[a] = (r, 8 * c + e)
                # A of S = Q K^T is K-major: m = the query row, k = the dim (k-step d // 16).
                start, lbo, sbo, swz = hl.q_desc(q_s, (8 * c + e) // 16)
                assert hl.k_major(start, r, (8 * c + e) % 16, sbo, swz, lbo) == a
    assert sorted(at) == list(range(q_s, q_s + 64 * D * 2, 2))


def test_a_swizzled_box_fills_the_span():
    # The H100 pads a swizzled box's shorter inner rows to the span
    # (bench/results/ch13-tma-inner-row-padding-h100.md): the dense model refuses that box.
    token_major = {"dims": (8, 16, 16, 2, 4), "strides": (256, 16, 4096, 8192), "box": (8, 8, 16, 1, 1),
                   "swizzle": 128}
    with pytest.raises(AssertionError, match="inner extent .16 bytes. is not the swizzle's 128 bytes"):
        list(hl.tma_box(token_major, (0, 0, 0, 0, 0), 0))
    for bs in (8, 16, 32):
        for D in (64, 128, 256):
            for spec in (hl.k_map_spec(bs, D, 2, 4), hl.v_map_spec(bs, D, 2, 4)):
                assert not spec["swizzle"] or spec["box"][0] * hl.ELEM == spec["swizzle"]


def test_swizzled_tiles_start_on_their_atoms():
    for D in (64, 128, 256):
        assert hl.tile_shape(D)["q_bytes"] // 2 % 1024 == 0  # each warpgroup's Q (128-byte swizzle)
        assert hl.k_map_spec(16, D, 2, 4)["swizzle"] == 0  # K: no swizzle, no atom to start on
        for stage in (0, 1):
            assert hl.smem_k(stage, D) % 1024 == 0 and hl.smem_v(stage, D) % 1024 == 0
            for bs in (16, 32):  # V's swizzle spans the row: its atom is 8 rows
                for p in range(hl.tile_shape(D)["tokens"] // bs):
                    assert hl.v_box(stage, p, bs, D) % (8 * bs * 2) == 0


# ---- P's accumulators are A's fragment ---------------------------------------------------------

def test_p_accumulators_are_the_a_fragment():
    for t in range(128):
        for ks in range(8):
            for r in range(4):
                lo, hi = hl.p_register_sources(ks, r)
                row, col = hl.a_fragment(r, t)
                assert (hl.acc_row(lo, t), hl.acc_col(lo, t) - 16 * ks) == (row, col)
                assert (hl.acc_row(hi, t), hl.acc_col(hi, t) - 16 * ks) == (row, col + 1)


def test_accumulators_cover_the_tile_once():
    for N in (64, 128):
        seen = {(hl.acc_row(i, t), hl.acc_col(i, t)) for t in range(128) for i in range(N // 2)}
        assert seen == {(r, c) for r in range(64) for c in range(N)}


# ---- the pipeline -------------------------------------------------------------------------------

def test_pipeline_waits_pass_on_the_phases_the_kernel_means(drawn):
    _, info = drawn["hopper-pipeline"]
    run = info["run"]
    assert run["events"]["consumer 1"] == run["events"]["consumer 2"]
    done = {bar: dict((phase, t) for t, phase in c) for bar, c in run["bars"].items()}
    for who, n, bar, parity, start, stop in info["waits"]:
        if who == "consumers":
            assert parity == hl.consumer_full_parity(n)
            assert stop == max(start, done[bar][n // 2])  # passes when tile n's bytes have landed
        elif n >= 2:
            assert parity == hl.producer_empty_parity(n)
            assert stop == max(start, done[bar][n // 2 - 1])  # both consumers released tile n - 2
        else:
            assert (start, stop, parity) == (0, 0, 1)  # a fresh barrier: "phase -1" is complete
    assert info["table"] == [(n, n % 2, hl.producer_empty_parity(n), hl.consumer_full_parity(n)) for n in range(4)]
    # The stages' bars: read only after landing, refilled only after the release.
    bars = info["stage_bars"]
    for n, s, issue, k_land, v_land, read0, release in bars:
        assert read0 >= k_land
        later = [b for b in bars if b[0] == n + 2]
        if later:
            assert later[0][2] >= release


def test_the_wrong_parities_deadlock_or_read_early():
    # tests/exercise_mutants/13-pipe-producer-parity: the producer on the consumers' parity.
    with pytest.raises(RuntimeError, match=r"producer waits on empty\[0\] with parity 0"):
        hl.pipeline(producer_parity=hl.consumer_full_parity)
    # 13-sched-phase-by-tile: the consumers on the tile's parity (n & 1). Tile 1's wait on
    # k_full[1] asks for parity 1: before the copy lands it passes at once (phase -1, a read of
    # bytes still in flight: how the emulator, which lands copies as late as it may, sees it);
    # after, it waits for a phase no copy will complete. Here the copy lands first: a hang.
    run = hl.pipeline(consumer_parity=lambda n, stages: n & 1, raise_on_deadlock=False)
    assert "consumer 1 waits on k_full[1] with parity 1" in run["deadlock"]
    assert not any(e[4] == 1 and e[3] == "S = Q K^T" for e in run["events"]["consumer 1"])


# ---- the drawn cells -----------------------------------------------------------------------------

def test_stage_layout_figure(drawn):
    _, info = drawn["hopper-stage-layout"]
    ax, bs, D, page = info["ax"], info["bs"], info["D"], info["page"]
    tokens = hl.tile_shape(D)["tokens"]
    cells = figures.tagged(ax, "stage")
    assert len(cells) == bs * D // 8
    x1 = min(p.get_x() for p in cells) - page * bs * cells[0].get_width()  # the stage's token 0
    y0 = min(p.get_y() for p in cells)
    w, h = cells[0].get_width(), cells[0].get_height()
    for p in cells:
        r, c = (int(v) for v in fields(p))
        col, row = round((p.get_x() - x1) / w), round((p.get_y() - y0) / h)
        n = page * bs + r  # the token's place in the stage
        assert (row, col) == (c, n) == info["where"][(r, c)]  # chunk-major: [chunk][token]
        # TMA's box for chunk c put it there, and wgmma reads dims 8c .. 8c + 7 of token n there.
        addr = hl.smem_k(0, D) + c * tokens * 16 + n * 16
        assert hl.k_box(0, page, c, bs, D) + 16 * r == addr
        start, lbo, sbo, swz = hl.k_desc(0, (8 * c) // 16, D)
        assert hl.k_major(start, n, (8 * c) % 16, sbo, swz, lbo) == addr
    assert len(figures.tagged(ax, "pool")) == bs * D // 8
    q_cells = figures.tagged(ax, "q")
    assert len(q_cells) == 8 * 8
    xq, yq = min(p.get_x() for p in q_cells), min(p.get_y() for p in q_cells)
    w, h = q_cells[0].get_width(), q_cells[0].get_height()
    for p in q_cells:
        r, c = (int(v) for v in fields(p))
        slot, row = round((p.get_x() - xq) / w), round((p.get_y() - yq) / h)
        assert (row, slot) == (r, c ^ (r % 8)) == info["q_where"][(r, c)]
        start, lbo, sbo, swz = hl.q_desc(0, (8 * c) // 16)
        assert hl.k_major(start, r, (8 * c) % 16, sbo, swz, lbo) == row * 128 + slot * 16


def test_fragment_figure(drawn):
    _, info = drawn["wgmma-fragments"]
    cells = figures.tagged(info["ax"], "acc")
    assert len(cells) == 16 * 16
    for p in cells:
        r, c, t, i = (int(v) for v in fields(p))
        assert (hl.acc_row(i, t), hl.acc_col(i, t)) == (r, c)
        reg = info["cells"][(r, c)][2]
        assert hl.a_fragment(reg, t) == (r, c - c % 2)
        assert i in hl.p_register_sources(0, reg)
