"""Where the kernels of chapters 10 and 11 put their data, as plain functions.

work_maps.py holds the maps of chapters 4, 5 and 9. This module holds those of the later
kernels, whose maps live only in the C++ (as expressions inside the kernels): chapter 10's
shared ring and its K swizzle, the token order that keeps P in registers, and chapter 11's
thread-block shapes, key halves and fp8 conversion. Each function names the C++ it mirrors;
reference/tests/test_kernel_layouts.py checks the properties the kernels rely on (one pass
over the banks, P straight from the accumulators into the A operand), the constants the C++
states in its comments and static_asserts, and that the C++ still contains the expressions
mirrored here. The book's figures (book/figures/ch10.py, ch11.py) are drawn from these.

Units: a "chunk" or "unit" is 16 bytes. Shared memory has 32 banks of 4 bytes, so a 16-byte
unit at index u covers the four banks of bank group u % 8, and a warp's 16-byte loads
(LDS.128) are served a quarter-warp (8 lanes, 128 bytes) at a time.
"""

WARP_SIZE = 32
BANK_GROUPS = 8  # 32 banks x 4 bytes = 8 groups of 16 bytes

# ---- Chapter 10: the varlen kernel (solutions/10-varlen-attention/varlen_kernel.cuh) -------

CH10_WARPS = 4          # kWarps: a thread block of four warps
CH10_KV_TILE = 64       # kKvTile (include/pa/ch10_varlen.h): tokens of a stage, at most
CH10_RING_BUDGET = 108 * 1024  # stages_for: the ring's bytes, two thread blocks an SM


def ch10_stage_layout(elem_bytes, head_size):
    """StageLayout<C, D>: one pipeline stage of the shared ring, K then V.

    elem_bytes is the cache element's size (2 for fp16/bf16, 1 for e4m3). K is stored as the
    pool stores it, [chunk][tokens] 16-byte units; V as [half][D][16] (16-token halves)."""
    x = 16 // elem_bytes
    tokens = CH10_KV_TILE // 2 if elem_bytes == 2 and head_size > 128 else CH10_KV_TILE
    chunks = head_size // x
    k_bytes = chunks * tokens * 16
    v_bytes = head_size * tokens * elem_bytes
    return {"x": x, "tokens": tokens, "halves": tokens // 16, "chunks": chunks,
            "k_bytes": k_bytes, "v_bytes": v_bytes, "bytes": k_bytes + v_bytes}


def ch10_stages(elem_bytes, head_size):
    """stages_for<C, D>(): as many stages as fit in 108 KB, 2 to 4."""
    n = CH10_RING_BUDGET // ch10_stage_layout(elem_bytes, head_size)["bytes"]
    return min(4, max(2, n))


def ch10_k_slot(chunk, token):
    """The swizzle: token `token` of K chunk `chunk` sits at slot token ^ 2 (chunk % 4) of the
    chunk's row of the stage (the kernel's `tk ^ 2 * (warp % 4)` in issue and `tk ^ 2 * t`
    in the score loop, where chunk % 4 is warp % 4, and t)."""
    return token ^ (2 * (chunk % 4))


def ch10_k_unit(chunk, token, tokens, swizzle=True):
    """The 16-byte unit of the stage's K that holds (chunk, token): chunk * tokens + slot.
    swizzle=False: the layout without the swizzle (slot = token), for comparison."""
    return chunk * tokens + (ch10_k_slot(chunk, token) if swizzle else token)


def bank_group(unit):
    """The bank group (banks 4b .. 4b + 3) of 16-byte unit `unit` of shared memory."""
    return unit % BANK_GROUPS


def ch10_k_copier(chunk, token, head_size=128, elem_bytes=2):
    """Who copies (chunk, token) of a stage in issue(): (warp, lane, i). Warp w copies chunks
    w, w + 4, ...; lane l copies tokens l + 32 i (k_token(i))."""
    tokens = ch10_stage_layout(elem_bytes, head_size)["tokens"]
    if not (0 <= token < tokens and 0 <= chunk < head_size * elem_bytes // 16):
        raise ValueError(f"no chunk {chunk}, token {token} in a stage")
    return chunk % CH10_WARPS, token % WARP_SIZE, token // WARP_SIZE


def ch10_v_copier(d, token, head_size=128, elem_bytes=2):
    """Who copies V row d, tokens token .. token + x - 1 (token a multiple of x), of a stage:
    (thread, k). Thread i copies the x tokens from (i % pieces) * x of rows i / pieces +
    row_step * k, with pieces = tokens / x and row_step = 128 / pieces."""
    lay = ch10_stage_layout(elem_bytes, head_size)
    pieces = lay["tokens"] // lay["x"]
    step = CH10_WARPS * WARP_SIZE // pieces
    if token % lay["x"] or not (0 <= token < lay["tokens"] and 0 <= d < head_size):
        raise ValueError(f"no V piece at row {d}, token {token}")
    return (d % step) * pieces + token // lay["x"], d // step


def ch10_score_token(q, n, h0=0):
    """The stage token that column n of the q-th score product (n-tile q, 8 tokens) stands
    for: 16 (h0 + q / 2) + 2 (q % 2) + 4 (n / 2) + n % 2 (the kernel's `tk`)."""
    return 16 * (h0 + q // 2) + 2 * (q % 2) + 4 * (n // 2) + n % 2


def ch10_score_read(lane, m, q, h0=0):
    """(chunk, token) of K that lane (g, t) loads for k-group m of n-tile q: chunk 4m + t,
    token ch10_score_token(q, g) (B's column g is the lane's token)."""
    g, t = lane // 4, lane % 4
    return 4 * m + t, ch10_score_token(q, g, h0)


def passes(units):
    """Shared-memory passes of one quarter-warp's 16-byte loads of these units: the most
    distinct units that fall in one bank group (the same unit twice is a broadcast)."""
    per_group = {}
    for u in set(units):
        per_group.setdefault(bank_group(u), set()).add(u)
    return max(len(s) for s in per_group.values())


def ch10_pv_token(k):
    """The token of a 16-token half that slot k (0..15) of the P V product's k dimension
    stands for: slot 2t + e is token 4t + e, slot 2t + 8 + e token 4t + 2 + e (the pv
    anchor's comment). Then P's A operand is the score accumulators as they are."""
    t, e = (k % 8) // 2, k % 2
    return 4 * t + e + (2 if k >= 8 else 0)


def ch10_pv_a_from_scores(i):
    """Element a_i (0..7) of the P V product's A fragment comes from score accumulator
    sc[2h + q][c] of the same lane: returns (q, c). The kernel's af = {pack2(sc[2h][0],
    sc[2h][1]), pack2(sc[2h][2], sc[2h][3]), pack2(sc[2h + 1][0], [1]), pack2([2], [3])}."""
    return i // 4, i % 4


def ch10_v_tokens(lane):
    """The tokens of a half whose V lane (g, t) reads for its B fragment: 4t .. 4t + 3 of
    dimension row 8n + g, one 8-byte load (four_to_pairs at v_half + (8n + g) * 16 + 4t)."""
    t = lane % 4
    return [4 * t + e for e in range(4)]


# ---- Chapter 11: the MLA decode kernel (solutions/11-latent-attention/mla_kernel.cuh) -------

CH11_QUARTERS = 4            # kQuarters: warps w % 4, 128 output columns each
CH11_ROW_WIDTH = 576         # kRowWidth: c_kv 512 + k_rope 64
CH11_LATENT = 512
CH11_ROW_CHUNKS = CH11_ROW_WIDTH // 8   # 72 chunks of 16 bytes (16-bit values)
CH11_P_CHUNKS = 8
CH11_STAGES = 2
CH11_QREG_STEPS = 28         # k-steps whose query fragments stay in registers (kQReg)

# MlaBlock (include/pa/ch11_mla.h) -> BlockShape<RG, MT, KH>, as launch_mla picks it.
MLA_BLOCKS = {
    "eight_warps": (2, 2, False),
    "four_warps": (1, 2, False),
    "queries_in_registers": (1, 1, False),
    "eight_warps_queries_in_registers": (2, 1, False),
    "key_halves": (2, 1, True),
}


def ch11_block_shape(rg, mt=2, kh=False, elem_bytes=2):
    """BlockShape<RG, MT, KH>: the thread block's sizes and its shared memory."""
    if mt not in (1, 2) or rg not in (1, 2) or (kh and (rg, mt) != (2, 1)):
        raise ValueError(f"no block shape RG {rg}, MT {mt}, KH {kh}")
    threads = 32 * CH11_QUARTERS * rg
    stage_tokens = 32 * rg
    row_group_keys = stage_tokens // rg if kh else stage_tokens
    keys_per_warp = row_group_keys // CH11_QUARTERS
    q_rows = 32 * rg
    q_bytes = q_rows * CH11_ROW_WIDTH * elem_bytes
    stage_bytes = stage_tokens * CH11_ROW_WIDTH * elem_bytes
    p_bytes = q_rows * CH11_P_CHUNKS * 16
    max_bytes = q_rows * CH11_QUARTERS * 4
    smem = q_bytes + CH11_STAGES * stage_bytes + p_bytes + max_bytes
    return {"rg": rg, "mt": mt, "kh": kh, "threads": threads, "warps": threads // 32,
            "tile_rows": 16 if kh else 16 * mt * rg, "q_rows": q_rows, "stage_tokens": stage_tokens,
            "row_group_keys": row_group_keys, "keys_per_warp": keys_per_warp,
            "n_tiles_of_keys": keys_per_warp // 8, "q_reg_steps": CH11_QREG_STEPS if mt == 1 else 0,
            "smem_bytes": smem, "blocks_per_sm": 3 - rg}


def ch11_warp_work(shape, warp):
    """What warp `warp` of a block computes in each stage: (rows, keys, columns), each a
    half-open range. rows: the tile's rows its scores and O cover (row group rg: 16 MT rg ..,
    or all 16 rows on key halves); keys: the stage's keys it scores (row group keys from
    32 rg on key halves, then kKeysPerWarp a quarter); columns: its 128 of O's 512."""
    rg, quarter = warp // CH11_QUARTERS, warp % CH11_QUARTERS
    if not 0 <= warp < shape["warps"]:
        raise ValueError(f"warp {warp} of a {shape['warps']}-warp block")
    first_row = 0 if shape["kh"] else 16 * shape["mt"] * rg
    first_key = (shape["row_group_keys"] * rg if shape["kh"] else 0) + shape["keys_per_warp"] * quarter
    cols = CH11_LATENT // CH11_QUARTERS
    return ((first_row, first_row + 16 * shape["mt"]), (first_key, first_key + shape["keys_per_warp"]),
            (cols * quarter, cols * (quarter + 1)))


def ch11_block_for(rows, fp8=False):
    """The runner's automatic choice (block_for in mla_decode.cu) for a batch whose largest
    tile has `rows` rows: an MlaBlock name."""
    if rows <= 16:
        return "queries_in_registers" if fp8 else "key_halves"
    return "eight_warps_queries_in_registers" if rows <= 32 else "eight_warps"


def ch11_key_halves(kv_begin, kv_end, stage_tokens=64):
    """On key halves: the keys row group rg attends, stage by stage: a list over stages of
    [(first, end) of row group 0, (first, end) of row group 1], clipped at kv_end (a range
    with first >= end is empty). Row group rg takes keys 32 rg .. 32 rg + 31 of each stage."""
    half = stage_tokens // 2
    out = []
    for s0 in range(kv_begin, kv_end, stage_tokens):
        out.append([(min(s0 + half * rg, kv_end), min(s0 + half * (rg + 1), kv_end)) for rg in range(2)])
    return out


def ch11_chunk_at(r, c, chunks=CH11_ROW_CHUNKS):
    """chunk_at: the 16-byte unit at which chunk c of row r of a swizzled shared array is
    stored: r * chunks + (c ^ (r % 8))."""
    return r * chunks + (c ^ (r & 7))


def ch11_fp8_pieces(my_chunk):
    """convert_raw's share of one fp8 row for thread my_chunk (0..3) of the row's four:
    pieces j = my_chunk + 4 k (k < 10). Returns a list of (raw byte offset, 16-bit chunks of
    the converted row, scale index or None): piece j < 32 is 16 e4m3 bytes at 16 j -> chunks
    2 j, 2 j + 1 with scale j / 8; piece j >= 32 is RoPE chunk c = j - 32, raw byte 528 + 16 c
    -> chunk 64 + c, copied."""
    from .mla import D_C, D_ROPE, FP8_ROPE_AT, FP8_TILE
    out = []
    for k in range((D_C // 16 + D_ROPE // 8) // 4):
        j = my_chunk + 4 * k
        if j < D_C // 16:
            out.append((16 * j, (2 * j, 2 * j + 1), j // (FP8_TILE // 16)))
        else:
            c = j - D_C // 16
            out.append((FP8_ROPE_AT + 16 * c, (D_C // 8 + c,), None))
    return out
