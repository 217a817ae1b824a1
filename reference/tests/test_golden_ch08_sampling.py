"""Chapter 8's sampling_ and beams_ golden cases: complete, reproducible, and robust.

Robust: C++ computes the same float64 formulas, but exp() and sums may differ in the last
bit. So no case may sit within 1e-9 of a decision (a top-p cumulative sum near top_p, two
beam candidates near a tie) unless the tie is exact on both sides by construction.
"""

import numpy as np
import pytest

from pa_ref.golden import CHAPTERS, main
from pa_ref.golden_ch08_sampling import (
    CH08_BEAMS,
    CH08_SAMPLING,
    DRAW_POSITIONS,
    DRAW_SAMPLES,
    f32,
    sampling_arrays,
)
from pa_ref.sampling import filtered_probs, log_softmax, rank, sample_token, select_beams

SAMPLING_ARRAYS = {"logits": np.float32, "probs": np.float64, "draw_samples": np.int32,
                   "draw_positions": np.int32, "draws": np.int32}
BEAM_ARRAYS = {"logits": np.float32, "scores": np.float64, "logprobs": np.float64,
               "expected_beam": np.int32, "expected_token": np.int32, "expected_score": np.float64}
MARGIN = 1e-9


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    root = tmp_path_factory.mktemp("golden")
    assert main(["--out", str(root), "--chapter", "8"]) == 0
    return root


def read_case(case_dir):
    arrays = {p.stem: np.load(p) for p in case_dir.glob("*.npy")}
    params = dict(line.split(" ", 1) for line in (case_dir / "case.txt").read_text().splitlines())
    return arrays, params


def test_writes_every_case(golden):
    assert 8 in CHAPTERS
    names = {p.name for p in (golden / "ch08").iterdir()}
    expected = {c.name for c in CH08_SAMPLING + CH08_BEAMS}
    assert expected <= names
    assert {n for n in names if n.startswith(("sampling_", "beams_"))} == expected


def test_rerun_gives_identical_bytes(golden, tmp_path):
    main(["--out", str(tmp_path), "--chapter", "8"])
    for case in CH08_SAMPLING + CH08_BEAMS:
        for old in (golden / "ch08" / case.name).iterdir():
            assert (tmp_path / old.relative_to(golden)).read_bytes() == old.read_bytes(), old


def test_output_is_small(golden):
    dirs = [golden / "ch08" / c.name for c in CH08_SAMPLING + CH08_BEAMS]
    total = sum(p.stat().st_size for d in dirs for p in d.iterdir())
    assert total < 1e6, total


def test_sampling_cases(golden):
    for case in CH08_SAMPLING:
        a, params = read_case(golden / "ch08" / case.name)
        assert {k: v.dtype for k, v in a.items()} == SAMPLING_ARRAYS, case.name
        t, p = float(params["temperature"]), float(params["top_p"])
        assert t == f32(t) and p == f32(p), "C++ reads them into float32: they must be exact"
        assert int(params["n"]) == len(DRAW_SAMPLES) and int(params["top_k"]) == case.top_k
        z, probs = a["logits"], a["probs"]
        assert z.shape == probs.shape == (case.vocab,)
        assert np.isclose(probs.sum(), 1.0, rtol=1e-12) and (probs >= 0).all()
        np.testing.assert_array_equal(probs, filtered_probs(z, t, case.top_k, p))
        assert a["draws"].shape == (len(DRAW_SAMPLES), len(DRAW_POSITIONS))
        assert (probs[a["draws"]] > 0).all(), case.name  # every draw is a kept token
        again = [[sample_token(z, t, case.top_k, p, int(params["seed"]), s, pos)
                  for pos in DRAW_POSITIONS] for s in DRAW_SAMPLES]
        np.testing.assert_array_equal(a["draws"], again)


def test_sampling_cases_are_away_from_top_p_boundaries():
    for case in CH08_SAMPLING:
        if case.temperature == 0 or case.top_p == 1:
            continue
        z = sampling_arrays(case)["logits"].astype(np.float64)
        order = rank(z)[: case.top_k or None]
        w = np.exp((z[order] - z.max()) / f32(case.temperature))
        gap = np.abs(np.cumsum(w / w.sum()) - f32(case.top_p)).min()
        assert gap > MARGIN or (case.exact_top_p and gap == 0), (case.name, gap)


def test_sampling_cases_cover_the_rules():
    kept = {c.name: int((sampling_arrays(c)["probs"] > 0).sum()) for c in CH08_SAMPLING}
    assert kept["sampling_v32_topk3_ties"] == 3
    assert kept["sampling_v16_topp05_exact"] == 2
    assert kept["sampling_v64_topp03_one_peak"] == 1
    assert kept["sampling_v128_t1_plain"] == 128
    assert kept["sampling_v1000_t2_topp095"] > 128  # the nucleus outgrows the first sorted chunk (64)
    assert max(c.vocab for c in CH08_SAMPLING) == 32000


def test_beam_cases(golden):
    for case in CH08_BEAMS:
        a, params = read_case(golden / "ch08" / case.name)
        assert {k: v.dtype for k, v in a.items()} == BEAM_ARRAYS, case.name
        rows, scores = a["logits"], a["scores"]
        assert rows.shape == a["logprobs"].shape == (len(scores), case.vocab)
        assert int(params["width"]) == case.width == len(a["expected_beam"])
        np.testing.assert_array_equal(a["logprobs"], np.stack([log_softmax(r) for r in rows]))
        chosen = select_beams(rows, scores, case.width)
        assert [c[0] for c in chosen] == a["expected_beam"].tolist()
        assert [c[1] for c in chosen] == a["expected_token"].tolist()
        np.testing.assert_array_equal([c[2] for c in chosen], a["expected_score"])
        # Robust: neighbours among the best width + 1 are exact ties or clearly apart.
        total = (scores[:, None] + a["logprobs"]).ravel()
        top = np.sort(total)[::-1][: case.width + 1]
        gaps = [x - y for x, y in zip(top[:-1], top[1:]) if np.isfinite(y)]
        assert all(g == 0 or g > MARGIN for g in gaps), (case.name, gaps)


def test_beam_cases_cover_ties_and_minus_inf(golden):
    a, _ = read_case(golden / "ch08" / "beams_v64_b3_w6_ties")
    assert a["expected_beam"].tolist()[:5] == [1, 1, 1, 0, 2]  # lower token, then lower beam
    assert a["expected_token"].tolist()[:5] == [7, 23, 40, 62, 62]
    a, _ = read_case(golden / "ch08" / "beams_v32_b4_w8_masked")
    assert np.isinf(a["expected_score"][-2:]).all() and np.isfinite(a["expected_score"][:-2]).all()
    a, _ = read_case(golden / "ch08" / "beams_v256_b4_w4_one_beam_wins")
    assert set(a["expected_beam"].tolist()) == {2}
    a, _ = read_case(golden / "ch08" / "beams_v1000_b5_w5")
    assert len(set(a["expected_beam"].tolist())) >= 3
