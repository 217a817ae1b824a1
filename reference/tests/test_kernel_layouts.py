"""The kernel layouts of chapters 10 and 11 (pa_ref/kernel_layouts.py), which the book's
figures draw: the properties the kernels rely on, the sizes the C++ states, and that the
C++ still holds the expressions the module mirrors (the kernels write them inline, so no
test can call them: the text is what can drift)."""

import re
from pathlib import Path

import pytest

from pa_ref import kernel_layouts as kl
from pa_ref import mla
from pa_ref import work_maps as wm

ROOT = Path(__file__).resolve().parents[2]


def source(path):
    return re.sub(r"\s+", " ", (ROOT / path).read_text())


# ---- chapter 10 ---------------------------------------------------------------------------

def test_ch10_cpp_holds_the_mirrored_expressions():
    k = source("solutions/10-varlen-attention/varlen_kernel.cuh")
    assert "uint4* dst = stage_k(st) + (tk ^ 2 * (warp % 4));" in k       # the copies' slot
    assert "ks[j * L::kTokens + (tk ^ 2 * t)]" in k                      # the scores' read
    assert "const int tk = 16 * (h0 + q / 2) + 2 * (q % 2) + 4 * (g / 2) + g % 2;" in k
    assert "static constexpr int kTokens = (sizeof(C) == 2 && D > 128) ? kKvTile / 2 : kKvTile;" in k
    assert "constexpr int n = 108 * 1024 / StageLayout<C, D>::kBytes;" in k
    # P's A operand from the accumulators, and V's four consecutive tokens.
    assert ("const uint32_t af[4] = {pack2<E>(sc[2 * h][0], sc[2 * h][1]), pack2<E>(sc[2 * h][2], sc[2 * h][3]), "
            "pack2<E>(sc[2 * h + 1][0], sc[2 * h + 1][1]), pack2<E>(sc[2 * h + 1][2], sc[2 * h + 1][3])};") in k
    assert "const C* v_half = vs + (h0 + h) * D * 16 + 4 * t;" in k
    assert "const int first = threadIdx.x % kPieces * x, tok = tok0 + first;" in k  # V's copies
    assert "const int d0 = threadIdx.x / kPieces;" in k
    assert "inline constexpr int kKvTile = 64;" in source("include/pa/ch10_varlen.h")


@pytest.mark.parametrize("elem_bytes,D,tokens,stage_bytes,stages", [
    (2, 128, 64, 32768, 3), (2, 256, 32, 32768, 3), (2, 64, 64, 16384, 4), (1, 128, 64, 16384, 4),
    (1, 256, 64, 32768, 3)])
def test_ch10_stage_sizes(elem_bytes, D, tokens, stage_bytes, stages):
    lay = kl.ch10_stage_layout(elem_bytes, D)
    assert (lay["tokens"], lay["bytes"], kl.ch10_stages(elem_bytes, D)) == (tokens, stage_bytes, stages)
    assert lay["chunks"] * lay["x"] == D and lay["halves"] * 16 == tokens


@pytest.mark.parametrize("elem_bytes,D", [(2, 64), (2, 128), (2, 256), (1, 128), (1, 256)])
def test_ch10_swizzle_is_a_permutation_and_copies_stay_contiguous(elem_bytes, D):
    lay = kl.ch10_stage_layout(elem_bytes, D)
    units = {kl.ch10_k_unit(c, t, lay["tokens"]) for c in range(lay["chunks"]) for t in range(lay["tokens"])}
    assert units == set(range(lay["chunks"] * lay["tokens"]))
    for c in range(lay["chunks"]):
        for i in range(lay["tokens"] // 32):  # one copy instruction: 32 lanes, one chunk, 512 bytes
            written = sorted(kl.ch10_k_unit(c, lane + 32 * i, lay["tokens"]) for lane in range(32))
            start = c * lay["tokens"] + 32 * i
            assert written == list(range(start, start + 32))
            assert max(kl.passes(written[q:q + 8]) for q in range(0, 32, 8)) == 1


@pytest.mark.parametrize("elem_bytes,D", [(2, 128), (2, 256), (1, 128)])
def test_ch10_score_reads_take_one_pass_a_quarter_warp_only_with_the_swizzle(elem_bytes, D):
    lay = kl.ch10_stage_layout(elem_bytes, D)
    for swizzle, want in ((True, 1), (False, 4)):
        worst = 0
        for h0 in range(lay["halves"]):
            for q in range(2):
                for m in range(-(-lay["chunks"] // 4)):
                    for quarter in range(4):
                        reads = [kl.ch10_score_read(lane, m, q, h0) for lane in range(8 * quarter, 8 * quarter + 8)]
                        reads = [(c, t) for c, t in reads if c < lay["chunks"]]
                        worst = max(worst, kl.passes([kl.ch10_k_unit(c, t, lay["tokens"], swizzle) for c, t in reads]))
        assert worst == want, swizzle


def test_ch10_score_columns_cover_each_half_once():
    for h0 in range(4):
        toks = sorted(kl.ch10_score_token(q, n, h0) for q in range(2) for n in range(8))
        assert toks == list(range(16 * h0, 16 * h0 + 16))


def test_ch10_p_goes_from_the_accumulators_to_the_a_operand_in_place():
    # Every element a_i of P's A fragment is the accumulator the same lane already holds,
    # for the same row and the same token: no shuffle, no shared memory.
    for lane in range(32):
        for i in range(8):
            q, c = kl.ch10_pv_a_from_scores(i)
            row_c, col_c = wm.mma_c_element(lane, c)
            row_a, k = wm.mma_a_element(lane, i)
            assert row_a == row_c
            assert kl.ch10_pv_token(k) == kl.ch10_score_token(q, col_c)
    assert sorted(kl.ch10_pv_token(k) for k in range(16)) == list(range(16))


def test_ch10_v_fragment_is_four_consecutive_tokens():
    for lane in range(32):
        toks = [kl.ch10_pv_token(wm.mma_b_element(lane, i)[0]) for i in range(4)]
        assert toks == kl.ch10_v_tokens(lane) == list(range(4 * (lane % 4), 4 * (lane % 4) + 4))
    # The natural order (slot k is token k) would give lane t tokens 2t, 2t + 1, 2t + 8, 2t + 9.
    assert [wm.mma_b_element(1, i)[0] for i in range(4)] == [2, 3, 10, 11]


@pytest.mark.parametrize("elem_bytes,D", [(2, 64), (2, 128), (2, 256), (1, 128)])
def test_ch10_copiers_cover_the_stage_once(elem_bytes, D):
    lay = kl.ch10_stage_layout(elem_bytes, D)
    k = {}
    for c in range(lay["chunks"]):
        for t in range(lay["tokens"]):
            k.setdefault(kl.ch10_k_copier(c, t, D, elem_bytes), []).append((c, t))
    assert {w for w, _, _ in k} == set(range(4))
    v = {}
    for d in range(D):
        for t in range(0, lay["tokens"], lay["x"]):
            v.setdefault(kl.ch10_v_copier(d, t, D, elem_bytes), []).append((d, t))
    assert sorted(v) == [(i, j) for i in range(128) for j in range(D // (128 * lay["x"] // lay["tokens"]))]
    assert kl.ch10_k_copier(5, 40) == (1, 8, 1)
    with pytest.raises(ValueError):
        kl.ch10_k_copier(16, 0)


# ---- chapter 11 ---------------------------------------------------------------------------

def test_ch11_cpp_holds_the_mirrored_expressions():
    k = source("solutions/11-latent-attention/mla_kernel.cuh")
    assert "return base + (r * chunks + (c ^ (r & 7))) * 8;" in k
    assert "static constexpr int kTileRows = KH ? 16 : 16 * MT * RG;" in k
    assert "static constexpr int kStageTokens = 32 * RG;" in k
    assert "static constexpr int kRowGroupKeys = KH ? kStageTokens / RG : kStageTokens;" in k
    assert "const int first_row = KH ? 0 : 16 * kMT * rg;" in k
    assert "const int first_key = KH ? B::kRowGroupKeys * rg : 0;" in k
    assert "const int key0 = kKeysPerWarp * quarter;" in k
    assert "static constexpr int kQRegSteps = kQReg ? 28 : 0;" in k
    assert "const int j = my_chunk + 4 * k;" in k and "scales[j / (kFp8Tile / 16)]" in k
    d = source("solutions/11-latent-attention/mla_decode.cu")
    assert ("if (rows <= kQRegTileRows) return s.latent == LatentFormat::fp8_e4m3 ? MlaBlock::queries_in_registers "
            ": MlaBlock::key_halves; return rows <= kSmallTileRows ? MlaBlock::eight_warps_queries_in_registers "
            ": MlaBlock::eight_warps;") in d
    for call in ("MlaBlock::queries_in_registers) launch_on<T, kFp8, 1, 1>",
                 "MlaBlock::eight_warps_queries_in_registers) launch_on<T, kFp8, 2, 1>",
                 "MlaBlock::key_halves) { if constexpr (!kFp8) launch_on<T, false, 2, 1, true>",
                 "MlaBlock::four_warps) launch_on<T, kFp8, 1, 2>(a, grid, stream); else launch_on<T, kFp8, 2, 2>"):
        assert call in d, call  # MLA_BLOCKS: the shape each MlaBlock launches
    h = source("include/pa/ch11_mla.h")
    assert "inline constexpr int kFp8RopeAt = kFp8ScalesAt + 4 * kFp8Scales;" in h


@pytest.mark.parametrize("name,tile_rows,warps,stage,smem", [
    ("eight_warps", 64, 8, 64, 230400), ("four_warps", 32, 4, 32, 115200),
    ("queries_in_registers", 16, 4, 32, 115200), ("eight_warps_queries_in_registers", 32, 8, 64, 230400),
    ("key_halves", 16, 8, 64, 230400)])
def test_ch11_block_shapes_as_the_cpp_states_them(name, tile_rows, warps, stage, smem):
    s = kl.ch11_block_shape(*kl.MLA_BLOCKS[name])
    assert (s["tile_rows"], s["warps"], s["stage_tokens"], s["smem_bytes"]) == (tile_rows, warps, stage, smem)
    assert (3 - s["rg"]) * (s["smem_bytes"] + 1024) <= 228 * 1024  # the C++'s static_assert
    # The warps cover a stage's scores (rows x keys) exactly once and O's columns per row group.
    cells = {}
    for w in range(s["warps"]):
        (r0, r1), (k0, k1), (c0, c1) = kl.ch11_warp_work(s, w)
        assert c1 - c0 == 128 and k1 - k0 == s["keys_per_warp"] and r1 - r0 == 16 * s["mt"]
        for r in range(r0, r1):
            for k in range(k0, k1):
                cells[(r, k)] = cells.get((r, k), 0) + 1
    assert set(cells) == {(r, k) for r in range(s["tile_rows"]) for k in range(s["stage_tokens"])}
    assert set(cells.values()) == {1}


def test_ch11_automatic_choice():
    assert [kl.ch11_block_for(r) for r in (8, 16, 17, 32, 33, 64)] == [
        "key_halves", "key_halves", "eight_warps_queries_in_registers", "eight_warps_queries_in_registers",
        "eight_warps", "eight_warps"]
    assert kl.ch11_block_for(16, fp8=True) == "queries_in_registers"


def test_ch11_key_halves_cover_the_chunk():
    halves = kl.ch11_key_halves(0, 200)
    assert halves[0] == [(0, 32), (32, 64)] and halves[-1] == [(192, 200), (200, 200)]
    keys = [k for st in halves for a, b in st for k in range(a, b)]
    assert keys == list(range(200))


def test_ch11_swizzle_spreads_ldmatrix_rows():
    # An ldmatrix 8 x 8 matrix: 8 consecutive rows' chunk c. Swizzled, 8 bank groups: one pass.
    for r0 in range(0, 64, 8):
        for c in range(kl.CH11_ROW_CHUNKS):
            units = [kl.ch11_chunk_at(r0 + i, c) for i in range(8)]
            assert kl.passes(units) == 1
            assert kl.passes([r * kl.CH11_ROW_CHUNKS + c for r in range(r0, r0 + 8)]) == 8


def test_ch11_fp8_pieces_convert_the_whole_row():
    raw, chunks, scales = [], [], {}
    for my in range(4):
        for at, out, s in kl.ch11_fp8_pieces(my):
            raw.append(at)
            chunks += out
            if s is not None:
                scales[at] = s
    assert sorted(chunks) == list(range(kl.CH11_ROW_CHUNKS))
    # Every 16-byte piece but the scales' own (which every thread reads) is converted once.
    assert sorted(raw) == [16 * j for j in range(mla.FP8_ROW_BYTES // 16) if 16 * j != mla.FP8_SCALES_AT]
    assert all(s == at // mla.FP8_TILE for at, s in scales.items())
