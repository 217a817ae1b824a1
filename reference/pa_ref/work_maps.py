"""Who touches what: the work maps of the course's kernels, as plain functions.

The other modules say what a kernel computes; this one says how the kernels of
chapters 1, 4, 5 and 9 divide that work among warps and lanes, and where the data
each one reads sits. The book's figures are drawn from these functions
(book/figures/), and the tests in tests/test_work_maps.py check them against the
pool layouts of paged.py and the PTX ISA's fragment layout, so a figure cannot show
a mapping that the kernels do not use.
"""

from .paged import blocks_for, k_pool_index

WARP_SIZE = 32

# Chapter 1: the dense cache, [num_seqs, max_seq_len, num_kv_heads, head_size] row-major,
# and its decode kernel (solutions/01-dense-kv/decode_attention.cu): one thread block of
# four warps per (query head, sequence).
DENSE_WARPS = 4


def dense_offset(seq, t, g, d, max_seq_len, num_kv_heads, head_size):
    """Flat index of element (seq, slot t, KV head g, dim d) of k_cache or v_cache:
    ((seq * L + t) * Hkv + g) * D + d. Slots t and t + 1 are Hkv * D apart (the token
    stride), sequences L * Hkv * D apart."""
    return ((seq * max_seq_len + t) * num_kv_heads + g) * head_size + d


def dense_kv_head(h, num_q_heads, num_kv_heads):
    """The KV head that query head h reads: h / (Hq / Hkv) (GQA; not h % Hkv)."""
    return h // (num_q_heads // num_kv_heads)


def dense_warp_tokens(warp, context_len, num_warps=DENSE_WARPS):
    """The slots a warp of the chapter 1 kernel attends: warp, warp + 4, ... < context_len
    (none when context_len <= warp)."""
    return list(range(warp, context_len, num_warps))


def dense_per_lane(head_size):
    """kPerLane = ceil(D / 32): the elements of q, k, v and acc each lane holds."""
    return -(-head_size // WARP_SIZE)


def dense_lane_dims(lane, head_size):
    """The dims of the head vector that lane holds: lane + 32 i for i < kPerLane, those
    below D only (D = 80: lanes 16..31 have two, the others three)."""
    return [d for d in (lane + WARP_SIZE * i for i in range(dense_per_lane(head_size)))
            if d < head_size]


# Chapter 4: a thread block of four warps per (query head, sequence).
V1_WARPS = 4


def v1_warp_of_block(logical_block, num_warps=V1_WARPS):
    """The warp that attends over a logical block: warp w takes blocks w, w + 4, w + 8, ..."""
    return logical_block % num_warps


def v1_valid_tokens(logical_block, context_len, block_size):
    """How many of the block's tokens belong to the sequence (1..block_size; 0 past the end)."""
    return max(0, min(block_size, context_len - logical_block * block_size))


def v1_lane_token(lane, block_size):
    """For the scores, lane -> (token o of the block, lane g within its group of 32 / bs)."""
    group = WARP_SIZE // block_size
    return divmod(lane, group)


def v1_lane_chunks(lane, block_size, head_size, x):
    """The 16-byte K chunks of token o that lane (o, g) loads: g, g + G, g + 2G, ..."""
    group = WARP_SIZE // block_size
    _, g = v1_lane_token(lane, block_size)
    return list(range(g, head_size // x, group))


def v1_chunk_offset(chunk, token, block_size, x):
    """Element offset of chunk `chunk` of token `token` from the start of a block's K for
    one head: the kernel's (c * BS + o) * x, which is k_pool_index at block 0, head 0."""
    return (chunk * block_size + token) * x


def v1_k_element(block, head, chunk, token, num_kv_heads, head_size, block_size, x):
    """The pool index of the first element of a lane's chunk (via paged.k_pool_index)."""
    return k_pool_index(block, head, chunk * x, token, num_kv_heads, head_size, block_size, x)


def v1_lane_rows(lane, head_size):
    """For V, the output rows d that lane owns: lane, lane + 32, ... (< head_size)."""
    return list(range(lane, head_size, WARP_SIZE))


# Chapter 5: partitions of 512 tokens (paged_attention.PARTITION_SIZE).

def partition_blocks(p, context_len, block_size, partition_size):
    """The logical blocks of partition p: p * (partition_size / bs) up to the sequence's end."""
    per = partition_size // block_size
    return list(range(p * per, min((p + 1) * per, blocks_for(context_len, block_size))))


def partition_tokens(p, context_len, partition_size):
    """Tokens [start, end) of partition p of a sequence of context_len tokens."""
    return p * partition_size, min((p + 1) * partition_size, context_len)


# Chapter 9: a warp's ring of `stages` shared-memory slots, filled by cp.async.

def ring_slot(i, stages):
    """The slot block i of the warp goes to (and is read from)."""
    return i % stages


def ring_schedule(count, stages):
    """The order of a warp's pipeline over `count` blocks, as the kernel runs it.

    Returns a list of steps, one per action: ("issue", i, slot) starts block i's copies
    into its slot (i >= count issues an empty group: nothing is copied), and
    ("attend", i, slot) waits for block i and computes on it. The prologue issues blocks
    0 .. stages - 2; then for each block i: issue i + stages - 1, wait, attend i.
    """
    steps = [("issue", i, ring_slot(i, stages)) for i in range(stages - 1)]
    for i in range(count):
        steps.append(("issue", i + stages - 1, ring_slot(i + stages - 1, stages)))
        steps.append(("attend", i, ring_slot(i, stages)))
    return steps


# Chapter 9: one mma.sync.m16n8k16 with 16-bit inputs and an fp32 accumulator. The PTX
# ISA numbers a lane's elements a0..a7 (A, two per 32-bit register), b0..b3 (B) and
# c0..c3 (C), with groupID = lane >> 2 and threadID_in_group = lane % 4
# ("Matrix Fragments for mma.m16n8k16 with floating point type").

def mma_a_element(lane, i):
    """(row, col) of A (16 x 16) that lane's element a_i (i = 0..7) holds."""
    g, t = lane >> 2, lane % 4
    row = g if i in (0, 1, 4, 5) else g + 8
    col = t * 2 + (i & 1) + (8 if i >= 4 else 0)
    return row, col


def mma_b_element(lane, i):
    """(row, col) of B (16 x 8) that lane's element b_i (i = 0..3) holds."""
    g, t = lane >> 2, lane % 4
    return t * 2 + (i & 1) + (8 if i >= 2 else 0), g


def mma_c_element(lane, i):
    """(row, col) of C (16 x 8, fp32) that lane's element c_i (i = 0..3) holds."""
    g, t = lane >> 2, lane % 4
    return (g if i < 2 else g + 8), t * 2 + (i & 1)
