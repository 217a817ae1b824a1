// Chapter 8: choosing the next token from a row of logits. Host code, no kernels.
//
//   greedy          temperature 0: the largest logit (the lowest token id on a tie)
//   sampling        a seeded random draw from the filtered softmax, for n parallel samples
//                   of one prompt (they share the prompt's blocks and fork after it)
//   beam search     keep the beam_width best continuations by cumulative log-probability
//
// Every draw is a pure function of (seed, sample, position, logits): no generator state
// lives between steps, so a sequence that is preempted and recomputed, or batched with
// different neighbours, draws exactly the same tokens. reference/pa_ref/sampling.py is the
// same specification in NumPy, and agrees draw for draw.
#pragma once

#include <cstdint>
#include <vector>

namespace pa::ch08 {

// ANCHOR: sampling_params
struct SamplingParams {
  int n = 1;                // parallel samples of one prompt (fork after the prompt)
  int beam_width = 0;       // > 0: beam search with this many beams (n must then be 1)
  float temperature = 0.f;  // 0: greedy (argmax, the lowest token id on a tie)
  int top_k = 0;            // keep the k most likely tokens; 0: off
  float top_p = 1.f;        // nucleus: keep the most likely tokens up to this mass; 1: off
  uint64_t seed = 0;        // with (sample index, position) it fixes every draw
};
// ANCHOR_END: sampling_params

// Throws pa::Error naming the bad field ("SamplingParams.top_p must be in (0, 1], got 0"):
// n < 1, beam_width < 0 or > vocab_size, beam search with n > 1 or with any of
// temperature / top_k / top_p set (beam search is deterministic), temperature negative,
// NaN or infinite, top_k < 0 or > vocab_size, top_p NaN or outside (0, 1], vocab_size < 1.
void check_sampling(const SamplingParams& p, int vocab_size);

// ANCHOR: sample_token
// The token of sample `sample` (0 .. n-1) of a request at sequence position `position`.
// The logits may hold -inf (a banned token) but no NaN or +inf. The rules, in order:
//  1. Greedy: temperature 0 returns the argmax; top_k, top_p and the seed play no part.
//  2. Rank: tokens are ranked by logit, largest first, the lower token id first on a tie
//     (the logit's order is the probability's order, without rounding's ties).
//  3. Temperature: weight(t) = exp((logit[t] - max logit) / temperature), in double.
//  4. Top-k: keep the k best-ranked tokens (a tie at the k-th place goes to the lower id).
//  5. Top-p: over the kept tokens' probabilities (weights / their sum), keep the shortest
//     best-ranked prefix whose cumulative sum reaches top_p (>=); at least one token.
//  6. Draw: u in [0, 1) from SplitMix64 keyed by (seed, sample, position); walk the kept
//     tokens in token-id order summing weights; the first whose running sum exceeds
//     u * (sum of kept weights) is the token (inverse CDF).
int sample_token(const float* logits, int vocab_size, const SamplingParams& p, int sample,
                 int position);
// ANCHOR_END: sample_token

// The uniform of rule 6: (key >> 11) * 2^-53 of a key that chains SplitMix64 over seed,
// then sample, then position, so (sample, position) and (position, sample) differ.
double draw_uniform(uint64_t seed, int sample, int position);

// log p(token) = logit - max - log(sum exp(logit - max)), in double; -inf stays -inf.
std::vector<double> log_softmax(const float* logits, int vocab_size);

// ANCHOR: select_beams
// One beam-search candidate: extend live beam `beam` by `token`.
struct BeamCandidate {
  int beam;
  int token;
  double score;  // the parent's cumulative log-prob + log p(token)
};

// The `width` best continuations over all live beams: rows[i] holds beam i's logits and
// scores[i] its cumulative log-prob. Sorted best first: higher score, then lower beam
// index, then lower token id. Scores may be -inf (not NaN or +inf).
std::vector<BeamCandidate> select_beams(const std::vector<const float*>& rows,
                                        const std::vector<double>& scores, int vocab_size,
                                        int width);
// ANCHOR_END: select_beams

}  // namespace pa::ch08
