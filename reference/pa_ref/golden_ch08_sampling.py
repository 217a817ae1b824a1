"""Chapter 8's golden cases for sampling and beam search (written beside the prefill cases).

sampling_<tag>/ holds
  logits          float32 [V]
  probs           float64 [V]      filtered_probs: what a draw must follow, 0 off the kept set
  draw_samples    int32   [S]      sample indices ...
  draw_positions  int32   [P]      ... and positions of the exact draws below
  draws           int32   [S, P]   sample_token at each (sample, position): bit-for-bit twins
case.txt: temperature, top_k, top_p (float32 values, printed exactly), seed, n.

beams_<tag>/ holds
  logits          float32 [B, V]   row i: live beam i
  scores          float64 [B]      cumulative log-probs (-inf: a dead beam)
  logprobs        float64 [B, V]   log_softmax of each row
  expected_beam, expected_token  int32 [W],  expected_score float64 [W]: select_beams
case.txt: width.
"""

from dataclasses import dataclass

import numpy as np

from .golden_io import case_seed, write_case
from .sampling import filtered_probs, log_softmax, sample_token, select_beams

DRAW_SAMPLES = (0, 1, 2, 3)
DRAW_POSITIONS = (0, 1, 2, 3, 17, 1000, 65535, 2**31 - 1)


def f32(x):
    """x as the float32 the C++ SamplingParams holds, as a Python float."""
    return float(np.float32(x))


def normal_logits(scale):
    return lambda rng, vocab: scale * rng.standard_normal(vocab)


def tied_at_k(rng, vocab):
    """Token 1 leads; tokens 2, 3 and 4 tie for second place: top_k 3 keeps 1, 2 and 3."""
    z = rng.standard_normal(vocab) - 3.0
    z[1], z[2:5] = 3.0, 2.0
    return z


def four_equal(rng, vocab):
    """Tokens 12, 5, 9, 2 tie at 4; the rest are -inf: each has probability exactly 1/4."""
    z = np.full(vocab, -np.inf)
    z[[12, 5, 9, 2]] = 4.0
    return z


def one_peak(rng, vocab):
    """Token 37 has about 95% of the mass: top_p 0.3 keeps it alone."""
    z = rng.standard_normal(vocab)
    z[37] = 8.0
    return z


@dataclass(frozen=True)
class SamplingCase:
    name: str
    vocab: int
    logits: object  # (rng, vocab) -> float64 array
    temperature: float
    top_k: int
    top_p: float
    note: str
    exact_top_p: bool = False  # the top-p sum meets top_p exactly (dyadic probabilities)


S = SamplingCase
CH08_SAMPLING = [
    S("sampling_v128_t1_plain", 128, normal_logits(2.0), 1.0, 0, 1.0,
      "temperature 1, no filter: the plain softmax"),
    S("sampling_v128_t07_topk10", 128, normal_logits(2.0), 0.7, 10, 1.0,
      "top-k 10 at temperature 0.7"),
    S("sampling_v128_t08_topp09", 128, normal_logits(2.0), 0.8, 0, 0.9,
      "nucleus 0.9 at temperature 0.8"),
    S("sampling_v256_t12_topk40_topp08", 256, normal_logits(2.0), 1.2, 40, 0.8,
      "top-k 40 then nucleus 0.8 over the top-k set's renormalized probabilities"),
    S("sampling_v32_topk3_ties", 32, tied_at_k, 1.0, 3, 1.0,
      "three tokens tie at the top-k boundary: the lower ids (2, 3) are kept, 4 is not"),
    S("sampling_v16_topp05_exact", 16, four_equal, 1.0, 0, 0.5,
      "four tokens of probability 1/4 (the rest -inf): top_p 0.5 keeps the two lowest ids",
      exact_top_p=True),
    S("sampling_v64_topp03_one_peak", 64, one_peak, 1.0, 0, 0.3,
      "the best token alone holds more than top_p: only it is kept"),
    S("sampling_v128_topk1", 128, normal_logits(2.0), 1.5, 1, 1.0,
      "top-k 1 is greedy whatever the temperature and seed"),
    S("sampling_v128_greedy", 128, normal_logits(2.0), 0.0, 5, 0.5,
      "temperature 0: argmax; top_k, top_p and seed play no part"),
    S("sampling_v1000_t2_topp095", 1000, normal_logits(3.0), 2.0, 0, 0.95,
      "a hot temperature and a wide nucleus over 1000 tokens"),
    S("sampling_v32000_topk50_topp08", 32000, normal_logits(3.0), 1.0, 50, 0.8,
      "a Llama-sized vocabulary: top-k 50, then nucleus 0.8"),
]


def sampling_arrays(case):
    rng = np.random.default_rng(case_seed(case.name))
    logits = case.logits(rng, case.vocab).astype(np.float32)
    t, p, seed = f32(case.temperature), f32(case.top_p), case_seed(case.name)
    draws = [[sample_token(logits, t, case.top_k, p, seed, s, pos) for pos in DRAW_POSITIONS]
             for s in DRAW_SAMPLES]
    return {
        "logits": logits,
        "probs": filtered_probs(logits, t, case.top_k, p),
        "draw_samples": np.array(DRAW_SAMPLES, dtype=np.int32),
        "draw_positions": np.array(DRAW_POSITIONS, dtype=np.int32),
        "draws": np.array(draws, dtype=np.int32),
    }


def sampling_params(case):
    return {
        "kind": "sampling",
        "vocab_size": case.vocab,
        "n": len(DRAW_SAMPLES),
        "temperature": repr(f32(case.temperature)),
        "top_k": case.top_k,
        "top_p": repr(f32(case.top_p)),
        "seed": case_seed(case.name),
        "note": case.note,
    }


# ---------------------------------------------------------------- beams


def random_beams(scores, scale=2.0):
    """Rows N(0, scale^2), one per score."""
    return lambda rng, vocab: (scale * rng.standard_normal((len(scores), vocab)), scores)


def tied_beams(rng, vocab):
    """Beams 0 and 2 are identical (row and score); beam 1's best three logits tie."""
    rows = rng.standard_normal((3, vocab))
    rows[2] = rows[0]
    rows[1, [40, 7, 23]] = rows[1].max() + 1.0
    return rows, [-1.0, -1.5, -1.0]


def masked_beams(rng, vocab):
    """Two finite tokens per row, beam 3 dead (-inf): width 8 reaches -inf candidates."""
    rows = np.full((4, vocab), -np.inf)
    for b in range(4):
        rows[b, rng.choice(vocab, 2, replace=False)] = rng.standard_normal(2)
    return rows, [-0.5, -0.7, -2.0, -np.inf]


@dataclass(frozen=True)
class BeamCase:
    name: str
    vocab: int
    width: int
    beams: object  # (rng, vocab) -> (rows float64 [B, V], scores [B])
    note: str


B = BeamCase
CH08_BEAMS = [
    B("beams_v128_b1_w4_first_step", 128, 4, random_beams([0.0]),
      "the first step after the prompt: one live beam"),
    B("beams_v128_b4_w4", 128, 4, random_beams([-1.3, -2.0, -2.2, -4.1]),
      "four beams with their own scores"),
    B("beams_v64_b3_w6_ties", 64, 6, tied_beams,
      "exact ties: the lower beam first (0 before 2), then the lower token (7, 23, 40)"),
    B("beams_v32_b4_w8_masked", 32, 8, masked_beams,
      "-inf logits and a dead beam: 6 finite candidates, then -inf ones by beam and token"),
    B("beams_v256_b4_w4_one_beam_wins", 256, 4, random_beams([-9.0, -8.5, -0.1, -7.0]),
      "one beam's score is far ahead: every survivor extends it"),
    B("beams_v1000_b5_w5", 1000, 5, random_beams([-3.1, -3.0, -3.4, -2.9, -3.3], 3.0),
      "1000 tokens, close scores: survivors come from several beams"),
]


def beam_arrays(case):
    rng = np.random.default_rng(case_seed(case.name))
    rows, scores = case.beams(rng, case.vocab)
    rows = np.asarray(rows).astype(np.float32)
    scores = np.asarray(scores, dtype=np.float64)
    chosen = select_beams(rows, scores, case.width)
    return {
        "logits": rows,
        "scores": scores,
        "logprobs": np.stack([log_softmax(r) for r in rows]),
        "expected_beam": np.array([c[0] for c in chosen], dtype=np.int32),
        "expected_token": np.array([c[1] for c in chosen], dtype=np.int32),
        "expected_score": np.array([c[2] for c in chosen], dtype=np.float64),
    }


def beam_params(case):
    return {"kind": "beams", "vocab_size": case.vocab, "width": case.width, "note": case.note}


def chapter_08_sampling(out_dir):
    """Sampling and beam-selection cases, into chapter 8's directory."""
    for case in CH08_SAMPLING:
        write_case(out_dir / case.name, sampling_arrays(case), sampling_params(case))
    for case in CH08_BEAMS:
        write_case(out_dir / case.name, beam_arrays(case), beam_params(case))
