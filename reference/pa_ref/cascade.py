"""Cascade (shared-prefix) decode attention: the spec of chapter 8's cascade kernels.

Sequences whose block tables start with the same physical blocks share those tokens'
K and V. plan_cascade finds the groups (the rules of the C++ planner); then
cascade_decode_attention computes, per group, the partial softmax state of each chunk of
the shared prefix for all of the group's query rows at once, per sequence that of each
partition of its own suffix, and merges them with chapter 5's merge_partitions. Softmax
over a union of key sets is the merge of the softmaxes over each set, so the result is
paged_decode_attention's.
"""

import numpy as np

from .paged import paged_gather
from .paged_attention import PARTITION_SIZE, merge_partitions


def plan_cascade(block_table, context_lens, block_size, min_shared_blocks=1):
    """Group the sequences that share a prefix of full blocks.

    In batch order, the first sequence not yet in a group leads a new one, and each later
    sequence whose first min_shared_blocks blocks (full in both) are the leader's joins.
    The group's prefix is the longest run of blocks from logical block 0 that all members
    hold at the same place, full in every member. Groups of one are dropped.
    Returns (groups, prefix_lens): groups a list of (members, prefix_len), prefix_lens [B]
    int32 (0 for a sequence in no group).
    """
    table = np.asarray(block_table)
    full = np.asarray(context_lens) // block_size
    candidates = []
    for b in range(len(full)):
        if full[b] < min_shared_blocks:
            continue
        for members in candidates:
            if np.array_equal(table[members[0], :min_shared_blocks], table[b, :min_shared_blocks]):
                members.append(b)
                break
        else:
            candidates.append([b])
    groups, prefix_lens = [], np.zeros(len(full), dtype=np.int32)
    for members in candidates:
        if len(members) < 2:
            continue
        n, shared = min(full[m] for m in members), 0
        while shared < n and all(table[m, shared] == table[members[0], shared] for m in members):
            shared += 1
        groups.append((members, shared * block_size))
        prefix_lens[members] = shared * block_size
    return groups, prefix_lens


def prefix_chunk_tokens(head_size, block_size, elem_bytes):
    """Tokens per prefix chunk, as the C++ kernel picks them: the largest power-of-two
    multiple of block_size, at most PARTITION_SIZE, whose K and V for one KV head fit in
    32 KB (but at least one block)."""
    c = block_size
    while 2 * c <= PARTITION_SIZE and 4 * c * head_size * elem_bytes <= 32 * 1024:
        c *= 2
    return c


def _attend(q, keys, values, scale):
    """Partial state of query rows q [R, Hq, D] over keys, values [n, Hkv, D] (n >= 1):
    max logits [R, Hq], exp-sums [R, Hq], normalized outputs [R, Hq, D]."""
    group = q.shape[1] // keys.shape[1]
    k, v = np.repeat(keys, group, axis=1), np.repeat(values, group, axis=1)
    scores = scale * np.einsum("rhd,nhd->rhn", q, k)
    m = scores.max(axis=-1)
    e = np.exp(scores - m[..., None])
    l = e.sum(axis=-1)
    return m, l, np.einsum("rhn,nhd->rhd", e, v) / l[..., None]


def cascade_decode_attention(q, k_pool, v_pool, block_table, context_lens, scale, block_size,
                             chunk_tokens, min_shared_blocks=1, partition_size=PARTITION_SIZE):
    """Decode attention [B, Hq, D] float64, computed as the cascade kernels do."""
    q = np.asarray(q, dtype=np.float64)
    lens = np.asarray(context_lens)
    table = np.asarray(block_table)
    k, v = paged_gather(k_pool, v_pool, table, lens, table.shape[1] * block_size)
    groups, prefix_lens = plan_cascade(table, lens, block_size, min_shared_blocks)
    parts = [[] for _ in lens]  # per sequence: (m [Hq], l [Hq], o [Hq, D]) per partition

    # Prefix chunks: once per group, for all its rows, from the first member's blocks.
    for members, prefix in groups:
        for start in range(0, prefix, chunk_tokens):
            end = min(prefix, start + chunk_tokens)
            m, l, o = _attend(q[members], k[members[0], start:end], v[members[0], start:end], scale)
            for r, b in enumerate(members):
                parts[b].append((m[r], l[r], o[r]))
    # Suffix partitions: per sequence, its own tokens after the prefix.
    for b, n in enumerate(lens):
        for start in range(int(prefix_lens[b]), int(n), partition_size):
            end = min(int(n), start + partition_size)
            m, l, o = _attend(q[b:b + 1], k[b, start:end], v[b, start:end], scale)
            parts[b].append((m[0], l[0], o[0]))

    out = np.zeros(q.shape)
    for b, p in enumerate(parts):
        if not p:
            continue  # context_len 0: zeros
        m = np.stack([x[0] for x in p], axis=-1)  # [Hq, P]
        l = np.stack([x[1] for x in p], axis=-1)
        o = np.stack([x[2] for x in p], axis=1)  # [Hq, P, D]
        out[b] = merge_partitions(m[None], l[None], o[None])[0]
    return out
