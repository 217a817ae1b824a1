"""A synthetic request trace that Python and C++ generate bit for bit alike.

The generator is splitmix64: a 64-bit counter passed through a mixing
function. It is tiny, has no hidden state beyond one integer, and is easy to
write identically in any language, which is all we need here.
"""

import numpy as np

DEFAULT_SEED = 2026
DEFAULT_NUM_REQUESTS = 256

# Prompt and output lengths are drawn uniformly from these inclusive ranges.
PROMPT_RANGE = (32, 1024)
OUTPUT_RANGE = (16, 512)

_MASK64 = 0xFFFFFFFFFFFFFFFF  # Python ints never overflow; this emulates uint64 wrap-around.


class SplitMix64:
    """splitmix64 pseudo-random generator on a uint64 state."""

    def __init__(self, seed):
        self.state = seed & _MASK64

    def next(self):
        """Advance the state and return the next uint64."""
        self.state = (self.state + 0x9E3779B97F4A7C15) & _MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        return z ^ (z >> 31)


def uniform_int(rng, lo, hi):
    """An integer in [lo, hi], both inclusive: lo + next() % (hi - lo + 1).

    The modulo is very slightly biased; that does not matter for a trace and
    keeps the C++ twin a one-liner.
    """
    return lo + rng.next() % (hi - lo + 1)


def synthetic_trace(seed=DEFAULT_SEED, num_requests=DEFAULT_NUM_REQUESTS):
    """Return (prompt_lens, output_lens), two int64 arrays of num_requests entries.

    For each request in order: prompt = uniform_int(32, 1024), then
    output = uniform_int(16, 512), both from one SplitMix64(seed) stream.
    """
    rng = SplitMix64(seed)
    prompt_lens = np.zeros(num_requests, dtype=np.int64)
    output_lens = np.zeros(num_requests, dtype=np.int64)
    for i in range(num_requests):
        prompt_lens[i] = uniform_int(rng, *PROMPT_RANGE)
        output_lens[i] = uniform_int(rng, *OUTPUT_RANGE)
    return prompt_lens, output_lens
