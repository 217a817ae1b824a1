"""The sampling reference: the filtered distribution, the seeded draw, beam selection."""

import math

import numpy as np
import pytest

from pa_ref.attention import softmax
from pa_ref.sampling import (
    draw_uniform,
    filtered_probs,
    log_softmax,
    rank,
    sample_token,
    select_beams,
)


def normal(vocab, seed, scale=2.0):
    return (scale * np.random.default_rng(seed).standard_normal(vocab)).astype(np.float32)


def bernstein_tol(p, n, vocab, delta=1e-6):
    """|frequency - p| beyond this for any of `vocab` tokens has probability < delta."""
    L = math.log(2 * vocab / delta)
    return np.sqrt(2 * p * (1 - p) * L / n) + 2 * L / (3 * n)


def test_draw_uniform_is_in_zero_one_and_depends_on_every_argument():
    u = [draw_uniform(5, s, p) for s in range(8) for p in range(500)]
    assert all(0 <= x < 1 for x in u)
    assert abs(np.mean(u) - 0.5) < 0.02
    assert len(set(u)) == len(u)
    assert draw_uniform(5, 1, 2) == draw_uniform(5, 1, 2)
    assert draw_uniform(5, 1, 2) != draw_uniform(5, 2, 1)  # not symmetric in (sample, position)
    assert draw_uniform(5, 1, 2) != draw_uniform(6, 1, 2)


def test_rank_breaks_ties_by_lower_token_id():
    assert rank(np.array([1.0, 3.0, 3.0, -np.inf, 2.0, 3.0])).tolist() == [1, 2, 5, 4, 0, 3]


def test_no_filter_is_the_softmax_of_logits_over_temperature():
    z = normal(64, 1)
    for t in (0.5, 1.0, 2.0):
        np.testing.assert_allclose(filtered_probs(z, t), softmax(z.astype(np.float64) / t), rtol=1e-12)


def test_greedy_and_top_k_1_are_one_hot_at_the_first_argmax():
    z = np.array([0.5, 2.0, -1.0, 2.0], dtype=np.float32)
    for probs in (filtered_probs(z, 0.0, 3, 0.2), filtered_probs(z, 1.3, 1)):
        assert probs.tolist() == [0.0, 1.0, 0.0, 0.0]
    assert sample_token(z, 0.0, 0, 1.0, 123, 0, 0) == 1


def test_top_k_keeps_the_k_best_with_ties_to_the_lower_id():
    z = np.array([0.0, 3.0, 2.0, 2.0, 2.0, 1.0], dtype=np.float32)
    kept = np.flatnonzero(filtered_probs(z, 1.0, 3)).tolist()
    assert kept == [1, 2, 3]
    probs = filtered_probs(z, 1.0, 3)
    np.testing.assert_allclose(probs[kept], softmax(np.array([3.0, 2.0, 2.0])), rtol=1e-12)


def test_top_p_keeps_the_shortest_prefix_reaching_top_p():
    z = np.log(np.array([0.1, 0.4, 0.2, 0.3]))
    assert np.flatnonzero(filtered_probs(z, 1.0, 0, 0.65)).tolist() == [1, 3]  # 0.4 + 0.3 >= 0.65
    assert np.flatnonzero(filtered_probs(z, 1.0, 0, 0.75)).tolist() == [1, 2, 3]
    assert np.flatnonzero(filtered_probs(z, 1.0, 0, 1e-6)).tolist() == [1]  # at least one token
    # Exactly reaching counts (dyadic probabilities: every sum is exact).
    four = np.array([0.0, 0.0, 0.0, 0.0])
    assert np.flatnonzero(filtered_probs(four, 1.0, 0, 0.5)).tolist() == [0, 1]


def test_top_p_applies_to_the_top_k_sets_renormalized_probabilities():
    z = np.log(np.array([0.30, 0.25, 0.25, 0.20]))
    # Over all four, 0.30 + 0.25 = 0.55 < 0.6; over the top 2 renormalized, 0.30/0.55 >= 0.5.
    assert np.flatnonzero(filtered_probs(z, 1.0, 2, 0.5)).tolist() == [0]
    assert np.flatnonzero(filtered_probs(z, 1.0, 0, 0.6)).tolist() == [0, 1, 2]


def test_minus_inf_logits_are_never_drawn():
    z = np.array([-np.inf, 1.0, -np.inf, 0.0])
    assert filtered_probs(z, 1.0)[[0, 2]].tolist() == [0.0, 0.0]
    draws = {sample_token(z, 1.0, 0, 1.0, 9, 0, p) for p in range(200)}
    assert draws == {1, 3}


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, 0, 1.0), (0.7, 10, 1.0), (1.2, 0, 0.8)])
def test_draws_follow_the_filtered_probabilities(temperature, top_k, top_p):
    z, n = normal(32, 7), 4000
    probs = filtered_probs(z, temperature, top_k, top_p)
    counts = np.bincount([sample_token(z, temperature, top_k, top_p, 11, i % 3, i // 3)
                          for i in range(n)], minlength=32)
    assert (counts[probs == 0] == 0).all()
    assert (np.abs(counts / n - probs) <= bernstein_tol(probs, n, 32)).all()


def test_log_softmax():
    z = normal(50, 3)
    lp = log_softmax(z)
    assert math.isclose(np.exp(lp).sum(), 1.0, rel_tol=1e-12)
    np.testing.assert_allclose(lp, np.log(softmax(z.astype(np.float64))), atol=1e-12)
    np.testing.assert_allclose(log_softmax(z.astype(np.float64) + 100.0), lp, atol=1e-12)
    assert log_softmax(np.array([-np.inf, 0.0]))[0] == -np.inf


def brute_force_beams(rows, scores, width):
    cands = [(s + lp, b, t) for b, (row, s) in enumerate(zip(rows, scores))
             for t, lp in enumerate(log_softmax(row))]
    cands.sort(key=lambda c: (-c[0], c[1], c[2]))
    return [(b, t, s) for s, b, t in cands[:width]]


def test_select_beams_equals_a_plain_sort_and_breaks_ties_by_beam_then_token():
    rng = np.random.default_rng(4)
    for trial in range(20):
        rows = np.round(rng.standard_normal((3, 7)) * (1 + trial % 2))  # rounding makes ties
        scores = [-1.0, -1.0, -0.5] if trial % 2 else [-0.2, -1.3, -0.7]
        for width in (1, 3, 7, 8, 21):
            assert select_beams(rows, scores, width) == brute_force_beams(rows, scores, width)
    same = np.zeros((2, 4))
    assert [c[:2] for c in select_beams(same, [0.0, 0.0], 5)] == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0)]


def test_select_beams_scores_are_cumulative_log_probs():
    rows, scores = np.array([[0.0, 1.0], [2.0, 0.0]]), [-1.0, -3.0]
    best = select_beams(rows, scores, 1)[0]
    assert best[:2] == (0, 1) and math.isclose(best[2], -1.0 + math.log(math.e / (1 + math.e)))
