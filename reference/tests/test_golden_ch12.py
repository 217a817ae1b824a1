"""Chapter 12's golden cases: the blocks a sliding window still needs."""

import numpy as np

from pa_ref import hybrid
from pa_ref.golden import CHAPTERS
from pa_ref.golden_ch12 import chapter_12


def test_chapter_12_is_registered_and_its_cases_agree_with_hybrid(tmp_path):
    assert 12 in CHAPTERS
    chapter_12(tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "first_needed" in names and "gemma3_32k" in names
    held = [n for n in names if n.startswith("held_")]
    assert len(held) >= 8
    for name in held:
        params = dict(line.split(" ", 1) for line in (tmp_path / name / "case.txt").read_text().splitlines())
        w, bs = int(params["window"]), int(params["block_size"])
        chunks = np.load(tmp_path / name / "chunks.npy")
        after_free = np.load(tmp_path / name / "expect_after_free.npy")
        after_append = np.load(tmp_path / name / "expect_after_append.npy")
        lengths = np.cumsum(chunks)
        assert list(after_free) == [hybrid.blocks_held(int(n), w or None, bs) for n in lengths]
        # Right after an append the group holds at least what it holds once freed.
        assert np.all(after_append >= after_free)
        assert after_append.dtype == np.int32
    gemma = (tmp_path / "gemma3_32k" / "case.txt").read_text()
    assert "full_blocks 12288" in gemma and "hybrid_blocks 2368" in gemma
