// Chapter 8: greedy, seeded top-k / top-p sampling and beam selection (given code; the
// rules are in include/pa/ch08_sampling.h, the NumPy twin in reference/pa_ref/sampling.py).
#include "pa/ch08_sampling.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "pa/check.h"
#include "pa/trace.h"

namespace pa::ch08 {

namespace {

// Checks the logits (no NaN, no +inf, not all -inf) and returns the first largest one's id.
int checked_argmax(const float* logits, int vocab_size, const std::string& fn) {
  PA_REQUIRE(logits != nullptr, fn << ": logits is null");
  PA_REQUIRE(vocab_size >= 1, fn << ": vocab_size must be positive, got " << vocab_size);
  int best = 0;
  for (int t = 0; t < vocab_size; ++t) {
    PA_REQUIRE(!std::isnan(logits[t]) && logits[t] != INFINITY,
               fn << ": logits[" << t << "] is " << logits[t] << " (NaN and +inf are refused)");
    if (logits[t] > logits[best]) best = t;
  }
  PA_REQUIRE(logits[best] != -INFINITY, fn << ": every logit is -inf");
  return best;
}

// A candidate token; its weight is filled once it survives top-k.
struct Token {
  int id;
  float logit;
  double weight;
};

// Rule 2: larger logit first, the lower token id on a tie.
bool ranked_before(const Token& a, const Token& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// Rule 4 in one pass: a heap of the k best tokens so far, the worst of them on top, so
// that most tokens cost one comparison.
std::vector<Token> top_k_tokens(const float* logits, int vocab_size, int k) {
  std::vector<Token> heap;
  heap.reserve(size_t(k));
  for (int t = 0; t < vocab_size; ++t) {
    const Token token{t, logits[t], 0.0};
    if (int(heap.size()) < k) {
      heap.push_back(token);
      std::push_heap(heap.begin(), heap.end(), ranked_before);
    } else if (ranked_before(token, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), ranked_before);
      heap.back() = token;
      std::push_heap(heap.begin(), heap.end(), ranked_before);
    }
  }
  return heap;
}

// Rule 5: sorts `kept` best first only as far as the nucleus needs (the sorted prefix
// doubles each round), then cuts it after the token whose cumulative probability
// reaches top_p.
void keep_top_p(std::vector<Token>& kept, double top_p) {
  double total = 0;
  for (const Token& t : kept) total += t.weight;
  const size_t n = kept.size();
  size_t sorted = 0, end = std::min<size_t>(64, n);
  double cumulative = 0;
  while (true) {
    // The next (end - sorted) best tokens move to [sorted, end), then get sorted.
    const auto first = kept.begin() + long(sorted), last = kept.begin() + long(end);
    std::nth_element(first, last - 1, kept.end(), ranked_before);
    std::sort(first, last, ranked_before);
    for (; sorted < end; ++sorted) {
      cumulative += kept[sorted].weight / total;
      if (cumulative >= top_p) {
        kept.resize(sorted + 1);
        return;
      }
    }
    if (end == n) return;  // rounding kept the sum under top_p: keep every token
    end = std::min(2 * end, n);
  }
}

}  // namespace

void check_sampling(const SamplingParams& p, int vocab_size) {
  PA_REQUIRE(vocab_size >= 1, "vocab_size must be positive, got " << vocab_size);
  PA_REQUIRE(p.n >= 1, "SamplingParams.n must be at least 1, got " << p.n);
  PA_REQUIRE(p.beam_width >= 0, "SamplingParams.beam_width must be >= 0 (0: no beam search), got "
                                    << p.beam_width);
  PA_REQUIRE(p.beam_width <= vocab_size, "SamplingParams.beam_width " << p.beam_width
                                             << " exceeds vocab_size " << vocab_size);
  PA_REQUIRE(std::isfinite(p.temperature) && p.temperature >= 0.f,
             "SamplingParams.temperature must be finite and >= 0 (0: greedy), got " << p.temperature);
  PA_REQUIRE(p.top_k >= 0, "SamplingParams.top_k must be >= 0 (0: off), got " << p.top_k);
  PA_REQUIRE(p.top_k <= vocab_size,
             "SamplingParams.top_k " << p.top_k << " exceeds vocab_size " << vocab_size);
  PA_REQUIRE(p.top_p > 0.f && p.top_p <= 1.f,  // false for NaN too
             "SamplingParams.top_p must be in (0, 1] (1: off), got " << p.top_p);
  if (p.beam_width > 0) {
    PA_REQUIRE(p.n == 1, "SamplingParams.n must be 1 with beam search (beam_width "
                             << p.beam_width << "), got " << p.n);
    PA_REQUIRE(p.temperature == 0.f && p.top_k == 0 && p.top_p == 1.f,
               "SamplingParams.temperature, top_k and top_p must stay off (0, 0, 1) with beam "
               "search, got temperature "
                   << p.temperature << ", top_k " << p.top_k << ", top_p " << p.top_p);
  }
}

double draw_uniform(uint64_t seed, int sample, int position) {
  uint64_t key = SplitMix64(seed).next();
  key = SplitMix64(key ^ uint64_t(uint32_t(sample))).next();
  key = SplitMix64(key ^ uint64_t(uint32_t(position))).next();
  return double(key >> 11) * 0x1.0p-53;  // 53 random bits: exactly representable, < 1
}

int sample_token(const float* logits, int vocab_size, const SamplingParams& p, int sample,
                 int position) {
  check_sampling(p, vocab_size);
  PA_REQUIRE(sample >= 0 && sample < p.n,
             "sample_token: sample " << sample << " is not in [0, n = " << p.n << ")");
  PA_REQUIRE(position >= 0, "sample_token: position must be >= 0, got " << position);
  const int best = checked_argmax(logits, vocab_size, "sample_token");
  if (p.temperature == 0.f) return best;  // rule 1

  std::vector<Token> kept;
  if (p.top_k > 0 && p.top_k < vocab_size) {
    kept = top_k_tokens(logits, vocab_size, p.top_k);
  } else {
    kept.resize(size_t(vocab_size));
    for (int t = 0; t < vocab_size; ++t) kept[size_t(t)] = {t, logits[t], 0.0};
  }
  // Rule 3, for the kept tokens only (the best token's weight is exactly 1).
  const double max_logit = logits[best], temperature = p.temperature;
  for (Token& t : kept) t.weight = std::exp((double(t.logit) - max_logit) / temperature);

  if (p.top_p < 1.f) keep_top_p(kept, p.top_p);

  // Rule 6: inverse CDF over the kept tokens in token-id order.
  const auto by_id = [](const Token& a, const Token& b) { return a.id < b.id; };
  if (!std::is_sorted(kept.begin(), kept.end(), by_id)) std::sort(kept.begin(), kept.end(), by_id);
  double total = 0;
  for (const Token& t : kept) total += t.weight;
  const double target = draw_uniform(p.seed, sample, position) * total;
  double running = 0;
  int last_positive = best;
  for (const Token& t : kept) {
    running += t.weight;
    if (running > target) return t.id;
    if (t.weight > 0) last_positive = t.id;
  }
  return last_positive;  // only if rounding left target >= the whole sum
}

std::vector<double> log_softmax(const float* logits, int vocab_size) {
  const double max_logit = logits[checked_argmax(logits, vocab_size, "log_softmax")];
  double sum = 0;
  for (int t = 0; t < vocab_size; ++t) sum += std::exp(double(logits[t]) - max_logit);
  const double log_z = max_logit + std::log(sum);
  std::vector<double> out(static_cast<size_t>(vocab_size));
  for (int t = 0; t < vocab_size; ++t) out[size_t(t)] = double(logits[t]) - log_z;
  return out;
}

std::vector<BeamCandidate> select_beams(const std::vector<const float*>& rows,
                                        const std::vector<double>& scores, int vocab_size,
                                        int width) {
  PA_REQUIRE(!rows.empty(), "select_beams: no live beams");
  PA_REQUIRE(rows.size() == scores.size(), "select_beams: " << rows.size() << " rows but "
                                               << scores.size() << " scores");
  PA_REQUIRE(vocab_size >= 1, "select_beams: vocab_size must be positive, got " << vocab_size);
  PA_REQUIRE(width >= 1 && int64_t(width) <= int64_t(rows.size()) * vocab_size,
             "select_beams: width " << width << " is not in [1, beams * vocab_size = "
                                    << int64_t(rows.size()) * vocab_size << "]");
  auto better = [](const BeamCandidate& a, const BeamCandidate& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.beam != b.beam) return a.beam < b.beam;
    return a.token < b.token;
  };
  // Within one row the order is (score, token), the global order restricted to it: the
  // global best `width` are among the rows' own best `width`.
  const int per_row = std::min(width, vocab_size);
  std::vector<BeamCandidate> merged;
  for (size_t b = 0; b < rows.size(); ++b) {
    PA_REQUIRE(!std::isnan(scores[b]) && scores[b] != INFINITY,
               "select_beams: scores[" << b << "] is " << scores[b] << " (NaN and +inf are refused)");
    checked_argmax(rows[b], vocab_size, "select_beams: rows[" + std::to_string(b) + "]");
    const std::vector<double> logp = log_softmax(rows[b], vocab_size);
    std::vector<BeamCandidate> row(static_cast<size_t>(vocab_size));
    for (int t = 0; t < vocab_size; ++t) row[size_t(t)] = {int(b), t, scores[b] + logp[size_t(t)]};
    std::nth_element(row.begin(), row.begin() + (per_row - 1), row.end(), better);
    merged.insert(merged.end(), row.begin(), row.begin() + per_row);
  }
  std::sort(merged.begin(), merged.end(), better);
  merged.resize(size_t(width));
  return merged;
}

}  // namespace pa::ch08
