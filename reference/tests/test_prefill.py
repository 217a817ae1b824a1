"""Chapter 8's prefill reference: it agrees with decode and with itself chunked."""

import numpy as np

from pa_ref.golden import CHAPTERS
from pa_ref.golden_ch08 import CH08_PREFILL, prefill_arrays
from pa_ref.paged_attention import paged_decode_attention
from pa_ref.prefill import paged_prefill_attention


def test_last_new_token_equals_decode():
    """The last new token of each sequence sees its whole context: decode attention."""
    for case in CH08_PREFILL:
        a = prefill_arrays(case)
        qsl, lens = a["query_start_loc"], a["context_lens"]
        has_new = np.array([qsl[b + 1] > qsl[b] for b in range(len(lens))])
        rows = [int(qsl[b + 1]) - 1 for b in range(len(lens)) if has_new[b]]
        dec = paged_decode_attention(a["q"][rows], a["k_pool"], a["v_pool"],
                                     a["block_table"][has_new], lens[has_new], float(a["scale"]),
                                     case.block_size)
        np.testing.assert_allclose(a["expected"][rows], dec, rtol=1e-12, atol=1e-12)


def test_chunks_equal_whole():
    """Prefill in two chunks (the second sees the first through the pool) = one chunk."""
    case = CH08_PREFILL[2]
    a = prefill_arrays(case)
    qsl, lens = a["query_start_loc"], a["context_lens"]
    b = 0
    start, end = int(qsl[b]), int(qsl[b + 1])
    cut = start + (end - start) // 2
    table = a["block_table"][b:b + 1]
    whole = a["expected"][start:end]
    n_second = end - cut
    first = paged_prefill_attention(a["q"][start:cut], a["k_pool"], a["v_pool"], table,
                                    [int(lens[b]) - n_second], [0, cut - start], float(a["scale"]))
    second = paged_prefill_attention(a["q"][cut:end], a["k_pool"], a["v_pool"], table,
                                     [int(lens[b])], [0, n_second], float(a["scale"]))
    np.testing.assert_allclose(np.concatenate([first, second]), whole, rtol=1e-12, atol=1e-12)


def test_registered():
    assert 8 in CHAPTERS
