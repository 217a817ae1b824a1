"""Choosing the next token: greedy, seeded top-k / top-p sampling, and beam selection.

The specification of include/pa/ch08_sampling.h, in float64. The rules, in order:

1. Greedy: temperature 0 gives the argmax (the lowest token id on a tie).
2. Rank: by logit, largest first, the lower token id first on a tie.
3. Temperature: weight = exp((logit - max logit) / temperature).
4. Top-k: keep the k best-ranked tokens (0: off).
5. Top-p: keep the shortest best-ranked prefix whose cumulative probability (weights
   over the top-k set's sum) reaches top_p (1: off); at least one token.
6. Draw: u = draw_uniform(seed, sample, position) in [0, 1); walking the kept tokens in
   token-id order, the first whose running weight sum exceeds u * (their total).

temperature and top_p are float32 in C++: pass values that float32 holds exactly
(float(np.float32(x))), or the two sides keep different sets.
"""

import numpy as np

from .trace import SplitMix64

_MASK32 = 0xFFFFFFFF


def draw_uniform(seed, sample, position):
    """Rule 6's uniform: SplitMix64 chained over seed, then sample, then position."""
    key = SplitMix64(seed).next()
    key = SplitMix64(key ^ (sample & _MASK32)).next()
    key = SplitMix64(key ^ (position & _MASK32)).next()
    return (key >> 11) * 2.0**-53


def rank(logits):
    """Token ids best first (rule 2)."""
    logits = np.asarray(logits, dtype=np.float64)
    return np.lexsort((np.arange(len(logits)), -logits))


def kept_weights(logits, temperature, top_k=0, top_p=1.0):
    """Rules 2-5: the weight of every token, 0 for a token that is not kept."""
    z = np.asarray(logits, dtype=np.float64)
    assert temperature > 0 and not np.isnan(z).any() and not (z == np.inf).any()
    order = rank(z)
    if top_k:
        order = order[:top_k]
    weight = np.exp((z[order] - z.max()) / temperature)
    if top_p < 1:
        cumulative = np.cumsum(weight / weight.sum())
        reached = np.flatnonzero(cumulative >= top_p)
        n = reached[0] + 1 if len(reached) else len(order)
        order, weight = order[:n], weight[:n]
    out = np.zeros(len(z))
    out[order] = weight
    return out


def filtered_probs(logits, temperature, top_k=0, top_p=1.0):
    """The probability of drawing each token: rules 1-5, normalized."""
    if temperature == 0:
        probs = np.zeros(len(logits))
        probs[int(np.argmax(logits))] = 1.0
        return probs
    weight = kept_weights(logits, temperature, top_k, top_p)
    return weight / weight.sum()


def sample_token(logits, temperature, top_k, top_p, seed, sample, position):
    """One draw (rule 6), the twin of C++'s sample_token."""
    if temperature == 0:
        return int(np.argmax(logits))
    weight = kept_weights(logits, temperature, top_k, top_p)
    kept = np.flatnonzero(weight > 0)  # token-id order; a zero weight is never drawn
    running = np.cumsum(weight[kept])  # sequential, as the C++ loop adds
    target = draw_uniform(seed, sample, position) * running[-1]
    return int(kept[min(np.searchsorted(running, target, side="right"), len(kept) - 1)])


def log_softmax(logits):
    """log p(token) in float64; -inf logits stay -inf."""
    z = np.asarray(logits, dtype=np.float64)
    m = z.max()
    return z - (m + np.log(np.exp(z - m).sum()))


def select_beams(rows, scores, width):
    """The `width` best (beam, token, score) over every live beam, best first.

    score = scores[beam] + log_softmax(rows[beam])[token]; ties go to the lower beam, then
    the lower token. Sorting every candidate is the plain statement of it.
    """
    rows = np.asarray(rows, dtype=np.float64)
    num_beams, vocab = rows.shape
    total = np.asarray(scores, dtype=np.float64)[:, None] + np.stack([log_softmax(r) for r in rows])
    beam, token = np.divmod(np.arange(num_beams * vocab), vocab)
    order = np.lexsort((token, beam, -total.ravel()))[:width]
    return [(int(beam[i]), int(token[i]), float(total.ravel()[i])) for i in order]
