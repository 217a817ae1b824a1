"""DeepSeek Sparse Attention (DSA) over a paged cache: chapter 14's reference.

DeepSeek-V3.2 keeps MLA (chapter 11) but lets each query token attend only INDEX_TOPK = 2,048
of its sequence's cached tokens. Per layer and step, three stages:

  1. the indexer: a small "lightning indexer" scores every cached token s for every new
     token t,
         I(t, s) = sum_h w(t, h) * ReLU(q(t, h) . k(s))
     with INDEX_HEADS = 64 query heads of INDEX_HEAD_DIM = 128 and ONE 128-wide key per
     token, kept in fp8 in a second paged cache (the indexer pool) under the same block
     table as the latent pool;
  2. top-k: the k best-scoring positions of each query row, turned into slots of the pool;
  3. sparse MLA: chapter 11's absorbed attention over exactly those slots of the fp8 latent
     pool (656-byte rows, mla.quantize_latent_fp8), not over the block table.

The model rotates q and k by a Hadamard transform before quantizing them (it spreads an
outlier over all 128 values, so one scale per row loses less). That happens outside these
kernels: here q and k are the rotated vectors, as the kernels receive them.

Varlen batches are chapter 10's (prefill.py): new tokens of all sequences stacked as rows,
query_start_loc [B + 1] (cu_seqlens_q) says sequence b's rows are query_start_loc[b] ..
query_start_loc[b + 1] - 1, and context_lens [B] counts its cached tokens, the new ones
included (their keys are written first). New token i of n_b sits at position
p = context_lens[b] - n_b + i and sees positions 0 .. p. A decode is n_b = 1; a prefill
chunk is several rows at increasing positions over a cached prefix.

---- The indexer pool --------------------------------------------------------------------

Per token: 128 e4m3 bytes of key and one float32 scale, INDEX_BYTES_PER_TOKEN = 132 bytes.
Within a block of block_size tokens the keys come first, then the scales:

    block b:  [ key 0 | key 1 | ... | key bs-1 | scale 0 | scale 1 | ... | scale bs-1 ]
              |<-------- bs * 128 bytes ------>|<----------- bs * 4 bytes ----------->|

    pool: uint8 [num_blocks, block_size * 132]
    key of (block, offset)    at byte block * bs * 132 + offset * 128
    scale of (block, offset)  at byte block * bs * 132 + bs * 128 + offset * 4 (float32, LE)

With block_size a multiple of 4 every block, every key row and the block's scale array start
on a 16-byte boundary, as bulk copies, TMA and 16-byte vector loads need. (Interleaving
[key | scale] per token would put token o's key at o * 132 bytes: misaligned for o % 4 != 0.)
Block sizes that are not a multiple of 4 are refused.

A key row is quantized with one scale, scale = float32(max |k|) / 448 (fp8.amax_scales; 1 for
an all-zero row), each value by chapter 6's quantize_e4m3, so its largest value becomes +-448
and the bytes are bit-exact with __nv_cvt_float_to_fp8. The queries are quantized the same
way, one scale per (token, head).
"""

from typing import NamedTuple

import numpy as np

from . import mla
from .attention import softmax
from .fp8 import amax_scales, dequantize_e4m3, quantize_e4m3
from .paged import blocks_for, check_slot_mapping, token_slot

INDEX_HEADS = 64          # DeepSeek-V3.2's index heads
INDEX_HEAD_DIM = 128      # width of an index query head and of the index key
INDEX_SCALE_BYTES = 4     # one float32 per token
INDEX_BYTES_PER_TOKEN = INDEX_HEAD_DIM + INDEX_SCALE_BYTES  # 132
INDEX_TOPK = 2048         # tokens each query attends; also the largest k top-k takes
INT32_SLOTS = 2**31       # slots 0 .. 2^31 - 1 fit the int32 that FlashMLA's indices are


def index_softmax_scale(head_dim=INDEX_HEAD_DIM):
    """The indexer's softmax scale, 1 / sqrt(head_dim), folded into the weights."""
    return 1.0 / np.sqrt(head_dim)


# ---- The indexer pool --------------------------------------------------------------------

def _check_block_size(block_size):
    if block_size <= 0 or block_size % 4:
        raise ValueError(f"the indexer pool needs a block size that is a multiple of 4 (so every "
                         f"row stays 16-byte aligned), got {block_size}")
    return int(block_size)


def indexer_bytes_per_token():
    """132: a 128-wide e4m3 key and its float32 scale."""
    return INDEX_BYTES_PER_TOKEN


def indexer_block_bytes(block_size):
    """Bytes of one block of the indexer pool: block_size keys, then block_size scales."""
    return _check_block_size(block_size) * INDEX_BYTES_PER_TOKEN


def indexer_key_offset(block, offset, block_size):
    """Byte offset, in the flat pool, of the key of the token at `offset` of `block`.
    Python integers: no overflow however large the pool (a kernel computes it in 64 bits)."""
    return int(block) * indexer_block_bytes(block_size) + int(offset) * INDEX_HEAD_DIM


def indexer_scale_offset(block, offset, block_size):
    """Byte offset, in the flat pool, of the float32 scale of the token at `offset` of `block`:
    after the block's block_size keys."""
    return (int(block) * indexer_block_bytes(block_size) + block_size * INDEX_HEAD_DIM
            + int(offset) * INDEX_SCALE_BYTES)


def new_indexer_pool(num_blocks, block_size, fill=0xFF):
    """An indexer pool, every byte `fill`. The default 0xFF poisons it: a key byte reads as
    e4m3 NaN and a scale as a float32 NaN, so a read of an unwritten slot shows."""
    return np.full((num_blocks, indexer_block_bytes(block_size)), fill, dtype=np.uint8)


def indexer_pool_dims(pool):
    """(num_blocks, block_size) of an indexer pool, uint8 [num_blocks, block_size * 132]."""
    if pool.dtype != np.uint8 or pool.ndim != 2 or pool.shape[1] % INDEX_BYTES_PER_TOKEN:
        raise ValueError(f"an indexer pool is uint8 [num_blocks, block_size * {INDEX_BYTES_PER_TOKEN}], "
                         f"got {pool.dtype} {pool.shape}")
    block_size = pool.shape[1] // INDEX_BYTES_PER_TOKEN
    _check_block_size(block_size)
    return pool.shape[0], block_size


def indexer_block_keys(pool):
    """The pool's keys as uint8 [num_blocks, block_size, 128] (a view)."""
    num_blocks, block_size = indexer_pool_dims(pool)
    return pool[:, :block_size * INDEX_HEAD_DIM].reshape(num_blocks, block_size, INDEX_HEAD_DIM)


def indexer_block_scales(pool):
    """The pool's scales as float32 [num_blocks, block_size] (a copy)."""
    _, block_size = indexer_pool_dims(pool)
    return np.ascontiguousarray(pool[:, block_size * INDEX_HEAD_DIM:]).view("<f4").astype(np.float32)


def _quantize_rows(x, scales):
    """e4m3 bytes of each row of x [..., D] with its own scale (scales [...]), by quantize_e4m3."""
    out = np.zeros(x.shape, dtype=np.uint8)
    for i in np.ndindex(*x.shape[:-1]):
        out[i] = quantize_e4m3(x[i], scales[i])
    return out


def quantize_index_keys(k):
    """Index keys [n, 128] (float values; float32 is what the kernel sees) ->
    (bytes uint8 [n, 128], scales float32 [n]), scale = float32(max |k|) / 448."""
    k = np.asarray(k, dtype=np.float32)
    if k.ndim != 2 or k.shape[1] != INDEX_HEAD_DIM:
        raise ValueError(f"index keys are [n, {INDEX_HEAD_DIM}], got {k.shape}")
    scales = amax_scales(k, axis=1)
    return _quantize_rows(k, scales), scales


def dequantize_index_keys(data, scales):
    """float64 [n, 128]: e4m3 value x its row's scale, exactly. NaN bytes give NaN."""
    data, scales = np.asarray(data, dtype=np.uint8), np.asarray(scales, dtype=np.float32)
    return dequantize_e4m3(data, 1.0) * scales.astype(np.float64)[..., None]


def reshape_and_cache_indexer(k, pool, slot_mapping):
    """Quantize token i's index key k[i] (quantize_index_keys) and write its bytes and scale to
    slot slot_mapping[i] of the indexer pool (uint8 [num_blocks, block_size * 132]); slots < 0
    are padding, skipped. A slot past the pool, or two tokens on one slot, is a ValueError.
    The pool is modified in place and returned."""
    num_blocks, block_size = indexer_pool_dims(pool)
    data, scales = quantize_index_keys(k)
    slot_mapping = check_slot_mapping(slot_mapping, len(data), num_blocks * block_size)
    flat = pool.reshape(-1)
    scale_bytes = scales.astype("<f4").view(np.uint8).reshape(len(data), INDEX_SCALE_BYTES)
    for i, slot in enumerate(slot_mapping):
        if slot < 0:
            continue
        block, offset = divmod(int(slot), block_size)
        at = indexer_key_offset(block, offset, block_size)
        flat[at:at + INDEX_HEAD_DIM] = data[i]
        at = indexer_scale_offset(block, offset, block_size)
        flat[at:at + INDEX_SCALE_BYTES] = scale_bytes[i]
    return pool


def read_index_keys(pool, slots):
    """The dequantized keys of the given slots, float64 [n, 128]; a slot of -1 gives a NaN row
    (nothing is stored for padding). A slot < -1 or past the pool is a ValueError."""
    num_blocks, block_size = indexer_pool_dims(pool)
    slots = np.asarray(slots, dtype=np.int64).reshape(-1)
    if np.any(slots < -1) or np.any(slots >= num_blocks * block_size):
        raise ValueError(f"a slot is outside [-1, {num_blocks * block_size}) of the indexer pool")
    keys, scales = indexer_block_keys(pool), indexer_block_scales(pool)
    out = np.full((len(slots), INDEX_HEAD_DIM), np.nan)
    for i, slot in enumerate(slots):
        if slot >= 0:
            block, offset = divmod(int(slot), block_size)
            out[i] = dequantize_index_keys(keys[block, offset][None], scales[block, offset][None])[0]
    return out


def gather_index_keys(pool, block_table_row, length):
    """A sequence's first `length` dequantized keys, in position order: float64 [length, 128]."""
    _, block_size = indexer_pool_dims(pool)
    return read_index_keys(pool, [token_slot(block_table_row, p, block_size) for p in range(length)])


# ---- Indexer logits ----------------------------------------------------------------------

def quantize_index_queries(q):
    """Index queries [T, H, 128] -> (bytes uint8 [T, H, 128], q_scale float32 [T, H]): one
    scale per (token, head), float32(max |q(t, h)|) / 448, as the keys'."""
    q = np.asarray(q, dtype=np.float32)
    if q.ndim != 3 or q.shape[2] != INDEX_HEAD_DIM:
        raise ValueError(f"index queries are [T, H, {INDEX_HEAD_DIM}], got {q.shape}")
    scales = amax_scales(q, axis=2)
    return _quantize_rows(q, scales), scales


def fold_index_weights(w, q_scale, softmax_scale=None):
    """The weights the logits kernel takes, float64 [T, H]:

        w_eff(t, h) = w(t, h) * q_scale(t, h) * softmax_scale

    w [T, H] is the model's per-token head weight (its weights projection, with whatever
    constant the model multiplies in, as given); q_scale [T, H] the queries' fp8 scales;
    softmax_scale defaults to 1 / sqrt(128). Folding is exact because q_scale and
    softmax_scale are > 0, and ReLU(c x) = c ReLU(x) for c > 0: the kernel then dots the
    raw e4m3 query values with the keys and never touches q_scale."""
    if softmax_scale is None:
        softmax_scale = index_softmax_scale()
    w, q_scale = np.asarray(w, dtype=np.float64), np.asarray(q_scale, dtype=np.float64)
    if w.shape != q_scale.shape or w.ndim != 2:
        raise ValueError(f"w and q_scale are both [T, H], got {w.shape} and {q_scale.shape}")
    if not (np.all(q_scale > 0) and softmax_scale > 0):
        raise ValueError("q_scale and softmax_scale must be > 0 to fold through the ReLU")
    return w * q_scale * float(softmax_scale)


def index_scores(q, w, keys):
    """Dense indexer scores, no mask: q [S, H, D], w [S, H], keys [L, D] -> float64 [S, L],

        I(t, s) = sum_h w(t, h) * ReLU(q(t, h) . keys(s)).

    With the raw e4m3 query values and w_eff this is the kernel's sum; with dequantized (or
    unquantized) queries and w * softmax_scale it is the model's."""
    q, w, keys = (np.asarray(a, dtype=np.float64) for a in (q, w, keys))
    dots = np.einsum("shd,ld->shl", q, keys)
    return np.einsum("sh,shl->sl", w, np.maximum(dots, 0.0))


def query_positions(context_lens, query_start_loc):
    """(seq, pos), int64 [T] each: query row t belongs to sequence seq[t] and sits at position
    pos[t] = context_lens[b] - n_b + i (chapter 10's varlen rule). Sequences with no new
    token own no row."""
    context_lens = np.asarray(context_lens, dtype=np.int64)
    qsl = np.asarray(query_start_loc, dtype=np.int64)
    if (qsl.shape != (len(context_lens) + 1,) or qsl[0] != 0 or np.any(np.diff(qsl) < 0)):
        raise ValueError(f"query_start_loc {qsl.tolist()} is not [B + 1] = [{len(context_lens) + 1}] "
                         f"non-decreasing from 0")
    seq, pos = [], []
    for b, length in enumerate(context_lens):
        n = int(qsl[b + 1] - qsl[b])
        if n == 0:
            continue
        limits = mla.causal_limits(n, int(length))  # a ValueError if n > length
        seq += [b] * n
        pos += [limit - 1 for limit in limits]
    return np.array(seq, dtype=np.int64), np.array(pos, dtype=np.int64)


def indexer_logits(q_fp8, w_eff, pool, block_table, context_lens, query_start_loc, num_cols=None):
    """The logits kernel's contract, float64 [T, num_cols]:

        logits[t, s] = sum_h w_eff(t, h) * ReLU(e4m3(q_fp8[t, h]) . k(s))   for s <= pos(t)
                     = -inf                                              for s > pos(t)

    q_fp8 uint8 [T, H, 128] (quantize_index_queries' bytes); w_eff [T, H] (fold_index_weights:
    the queries' scales and the softmax scale already in it); k(s) the dequantized key of
    position s of the row's sequence, read through block_table [B, M] from the indexer pool;
    context_lens, query_start_loc chapter 10's (query_positions). Column s is token position
    s; num_cols defaults to the longest context and must cover every row's position.
    A kernel may apply the key's scale after the ReLU (it is > 0): the same number."""
    q_fp8 = np.asarray(q_fp8, dtype=np.uint8)
    w_eff = np.asarray(w_eff, dtype=np.float64)
    num_blocks, block_size = indexer_pool_dims(pool)
    block_table = np.asarray(block_table)
    seq, pos = query_positions(context_lens, query_start_loc)
    if q_fp8.ndim != 3 or q_fp8.shape[0] != len(pos) or q_fp8.shape[2] != INDEX_HEAD_DIM:
        raise ValueError(f"q_fp8 must be [{len(pos)}, H, {INDEX_HEAD_DIM}], got {q_fp8.shape}")
    if w_eff.shape != q_fp8.shape[:2]:
        raise ValueError(f"w_eff must be {q_fp8.shape[:2]}, got {w_eff.shape}")
    context_lens = np.asarray(context_lens, dtype=np.int64)
    if block_table.ndim != 2 or block_table.shape[0] != len(context_lens):
        raise ValueError(f"block_table must be [{len(context_lens)}, M], got {block_table.shape}")
    if num_cols is None:
        num_cols = int(context_lens.max(initial=0))
    if len(pos) and pos.max() >= num_cols:
        raise ValueError(f"num_cols {num_cols} does not reach position {pos.max()}")
    q_vals = dequantize_e4m3(q_fp8, 1.0)
    out = np.full((len(pos), num_cols), -np.inf)
    for b in np.unique(seq):
        length = int(context_lens[b])
        used = block_table[b, :blocks_for(length, block_size)]
        if used.size < blocks_for(length, block_size) or np.any(used < 0) or np.any(used >= num_blocks):
            raise ValueError(f"sequence {b}: its block_table row does not hold {length} tokens' blocks "
                             f"in [0, {num_blocks})")
        keys = gather_index_keys(pool, block_table[b], length)
        rows = np.flatnonzero(seq == b)
        scores = index_scores(q_vals[rows], w_eff[rows], keys)  # [rows, length]
        for r, t in enumerate(rows):
            out[t, :pos[t] + 1] = scores[r, :pos[t] + 1]
    return out


# ---- Top-k -------------------------------------------------------------------------------
#
# The tie rule: logits are compared as float32 values (the logits buffer's type; -0 equals
# +0), larger first, and among EQUAL values the SMALLER token position wins. -inf (a
# masked or future position) is never selected. A row with fewer than k finite logits
# selects all of them and pads with -1. The selection is a set: the reference lists it in
# ascending position order, -1s last; a kernel may write it in any order (compare sorted).
# NaN logits are refused.

def _float32_rows(logits):
    x = np.asarray(logits, dtype=np.float32)
    if x.ndim != 2:
        raise ValueError(f"logits are [rows, positions], got shape {x.shape}")
    if np.isnan(x).any():
        raise ValueError("NaN logits: the top-k has no order for them")
    return x  # NumPy's comparisons, sorts included, already hold -0 == +0


def _check_k(k):
    if not 1 <= k <= INDEX_TOPK:
        raise ValueError(f"top-k takes 1 <= k <= {INDEX_TOPK}, got {k}")


def topk_positions(logits, k):
    """Positions form: logits [T, L] -> int32 [T, k], each row's k best positions under the
    tie rule above, ascending, padded with -1."""
    _check_k(k)
    x = _float32_rows(logits)
    out = np.full((x.shape[0], k), -1, dtype=np.int32)
    for t, row in enumerate(x):
        live = np.flatnonzero(row > -np.inf)
        best = live[np.lexsort((live, -row[live].astype(np.float64)))[:k]]  # value desc, position asc
        out[t, :len(best)] = np.sort(best)
    return out


def check_int32_slots(num_blocks, block_size):
    """Refuse a pool whose slots (block_id * block_size + offset) do not all fit int32."""
    if int(num_blocks) * int(block_size) > INT32_SLOTS:
        raise ValueError(f"a pool of {num_blocks} blocks x {block_size} tokens has slots up to "
                         f"{int(num_blocks) * int(block_size) - 1}, beyond int32's {INT32_SLOTS - 1}: "
                         f"slot indices are int32")


def positions_to_slots(positions, block_table, query_start_loc, block_size, num_blocks):
    """Slots form: positions int [T, k] of each query row's own sequence (-1: padding) ->
    int32 [T, k], slot = block_table[b, p // block_size] * block_size + p % block_size for row
    t of sequence b (query_start_loc), -1 kept. A pool of num_blocks x block_size whose slots
    do not fit int32 is refused (ValueError), and so is a block id outside [0, num_blocks)."""
    check_int32_slots(num_blocks, block_size)
    positions = np.asarray(positions, dtype=np.int64)
    block_table = np.asarray(block_table, dtype=np.int64)
    qsl = np.asarray(query_start_loc, dtype=np.int64)
    if positions.ndim != 2 or qsl.shape != (block_table.shape[0] + 1,) or qsl[-1] != len(positions):
        raise ValueError(f"positions {positions.shape}, query_start_loc {qsl.tolist()} and "
                         f"block_table {block_table.shape} disagree")
    out = np.full(positions.shape, -1, dtype=np.int32)
    for b in range(block_table.shape[0]):
        for t in range(int(qsl[b]), int(qsl[b + 1])):
            for j, p in enumerate(positions[t]):
                if p < 0:
                    continue
                if p // block_size >= block_table.shape[1]:
                    raise ValueError(f"row {t}: position {p} is past sequence {b}'s block_table row")
                block = int(block_table[b, p // block_size])
                if not 0 <= block < num_blocks:
                    raise ValueError(f"row {t}: position {p} is in block {block}, outside [0, {num_blocks})")
                out[t, j] = token_slot(block_table[b], int(p), block_size)
    return out


def topk_slots(logits, k, block_table, query_start_loc, block_size, num_blocks):
    """The top-k stage's output: topk_positions, then positions_to_slots. int32 [T, k]."""
    check_int32_slots(num_blocks, block_size)
    return positions_to_slots(topk_positions(logits, k), block_table, query_start_loc,
                              block_size, num_blocks)


# ---- The radix select, pass by pass -------------------------------------------------------
#
# A GPU selects without sorting. Each float32 logit gets an order-preserving uint32 key
# (order_key: larger float, larger key). The select then looks at the key a digit at a time,
# most significant first, `bits` bits a pass (11: digits of 11, 11 and 10 bits; 8: four of 8):
#   - a histogram counts the candidates still in play by their digit;
#   - scanning the buckets from the largest digit down, the THRESHOLD bucket is the one where
#     the running count first reaches `need` (the picks still to make); every candidate in a
#     bucket above it is selected, `need` drops by their number, and only the threshold
#     bucket's candidates stay in play;
#   - it stops when the threshold bucket holds exactly `need` candidates (all are selected),
#     or after the last digit: the candidates left then have one key, i.e. equal logits, and
#     the tie rule takes the `need` of them with the smallest positions. (Only there does the
#     rule act; a GPU applies it deterministically with an exclusive prefix count, in position
#     order, of the threshold key's occurrences: an occurrence is kept while its count < need.)
# -inf is never a candidate; a row with at most k finite logits selects them all, no pass.

class RadixPass(NamedTuple):
    shift: int             # the digit is (key >> shift) & (2**width - 1)
    width: int
    histogram: np.ndarray  # int64 [2**width]: candidates in play per digit
    bucket: int            # the threshold digit
    above: int             # candidates in buckets above it: selected by this pass
    need: int              # picks still to make when the pass starts


def order_key(values):
    """uint32 keys of float32 values with the same order: a positive float's bits with the sign
    bit set, a negative float's bits inverted. -0 is keyed as +0 (they are equal). NaN is not
    ordered (the callers refuse it)."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32)
    sign = np.uint32(0x80000000)
    bits = np.where(bits == sign, np.uint32(0), bits)
    return np.where(bits & sign, ~bits, bits | sign).astype(np.uint32)


def radix_digits(bits):
    """(shift, width) of each pass, most significant digit first: 11 -> (21, 11), (10, 11), (0, 10)."""
    if not 1 <= bits <= 16:
        raise ValueError(f"a radix pass takes 1 to 16 bits, got {bits}")
    out, top = [], 32
    while top > 0:
        width = min(bits, top)
        top -= width
        out.append((top, width))
    return out


def radix_select(row, k, bits=11):
    """One row's top-k by radix select: (positions int32 ascending, passes [RadixPass]).
    The positions equal topk_positions' (without its -1 padding) for every NaN-free row."""
    _check_k(k)
    x = _float32_rows(np.asarray(row)[None])[0]
    keys = order_key(x)
    live = np.flatnonzero(x > -np.inf)  # candidates in play, ascending positions
    if len(live) <= k:
        return live.astype(np.int32), []
    chosen, passes, need = [], [], k
    for shift, width in radix_digits(bits):
        digits = ((keys[live] >> np.uint32(shift)) & np.uint32((1 << width) - 1)).astype(np.int64)
        histogram = np.bincount(digits, minlength=1 << width)
        above, bucket = 0, (1 << width) - 1
        while above + histogram[bucket] < need:
            above += int(histogram[bucket])
            bucket -= 1
        passes.append(RadixPass(shift, width, histogram, bucket, above, need))
        chosen.append(live[digits > bucket])
        live, need = live[digits == bucket], need - above
        if len(live) == need:
            break
    chosen.append(live[:need])  # all of the last bucket, or the smallest positions of a tie
    return np.sort(np.concatenate(chosen)).astype(np.int32), passes


# ---- Token-sparse MLA decode --------------------------------------------------------------

def sparse_mla_decode(q, latent_pool, indices, scale, dtype_name):
    """Absorbed MLA over exactly the listed slots of the fp8 latent pool.

    q            [B, s_q, H, 576] absorbed queries (mla.absorb_query), float
    latent_pool  uint8 [num_blocks, block_size, 656] (mla.reshape_and_cache_latent_fp8)
    indices      int [B, s_q, topk]: query (b, i)'s slots, block_id * block_size + offset;
                 -1 entries are ignored, wherever they stand; the others must be distinct and
                 inside the pool (ValueError otherwise)
    scale        the softmax scale (mla.mla_scale of the decompressed head)
    dtype_name   the 16-bit type of the rows' RoPE part, 'fp16' or 'bf16'

    Returns (out float64 [B, s_q, H, 512], lse float64 [B, s_q, H]):
        rows = mla.dequantize_latent_fp8 of the listed slots  [n, 576]
        p    = softmax(scale * q(b, i, h) . rows)
        out  = p @ rows[:, :512]     lse = ln sum_j exp(scale * q(b, i, h) . rows[j])
    (natural log). A query with no slot gets out = 0 and lse = -inf, which weighs nothing
    when partial results are merged by their lse. No causal mask: the slots ARE the mask;
    only the listed rows are read, so poisoned unlisted slots never matter."""
    q = np.asarray(q, dtype=np.float64)
    indices = np.asarray(indices, dtype=np.int64)
    if latent_pool.dtype != np.uint8 or latent_pool.ndim != 3 or latent_pool.shape[2] != mla.FP8_ROW_BYTES:
        raise ValueError(f"the fp8 latent pool is uint8 [num_blocks, block_size, {mla.FP8_ROW_BYTES}], "
                         f"got {latent_pool.dtype} {latent_pool.shape}")
    num_blocks, block_size, _ = latent_pool.shape
    check_int32_slots(num_blocks, block_size)
    width = mla.D_C + mla.D_ROPE
    if q.ndim != 4 or q.shape[3] != width:
        raise ValueError(f"q must be [B, s_q, H, {width}], got {q.shape}")
    if indices.ndim != 3 or indices.shape[:2] != q.shape[:2]:
        raise ValueError(f"indices must be [B, s_q, topk] = [{q.shape[0]}, {q.shape[1]}, topk], "
                         f"got {indices.shape}")
    num_slots = num_blocks * block_size
    flat = latent_pool.reshape(num_slots, mla.FP8_ROW_BYTES)
    batch, s_q, heads, _ = q.shape
    out = np.zeros((batch, s_q, heads, mla.D_C))
    lse = np.full((batch, s_q, heads), -np.inf)
    for b, i in np.ndindex(batch, s_q):
        slots = indices[b, i][indices[b, i] != -1]
        if np.any(slots < 0) or np.any(slots >= num_slots):
            raise ValueError(f"query ({b}, {i}): a slot is outside [0, {num_slots}) (-1 is the only padding)")
        if np.unique(slots).size != slots.size:
            raise ValueError(f"query ({b}, {i}): a slot is listed twice")
        if slots.size == 0:
            continue
        rows = mla.dequantize_latent_fp8(flat[slots], dtype_name)      # [n, 576]
        scores = scale * q[b, i] @ rows.T                              # [H, n]
        out[b, i] = softmax(scores) @ rows[:, :mla.D_C]
        m = scores.max(axis=1)
        lse[b, i] = m + np.log(np.exp(scores - m[:, None]).sum(axis=1))
    return out, lse
