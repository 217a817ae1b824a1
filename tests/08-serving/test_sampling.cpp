// Chapter 8: greedy, seeded top-k / top-p sampling and beam selection against the NumPy
// reference (reference/pa_ref/sampling.py): the exact draws of each golden case, 20000
// draws that stay in the kept set and follow its probabilities, determinism whatever runs
// around a draw, beam survivors equal to the reference's, and clear errors for bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>

#include "compare.h"
#include "golden.h"
#include "pa/ch08_model.h"
#include "pa/ch08_sampling.h"

namespace {

using pa::ch08::BeamCandidate;
using pa::ch08::SamplingParams;
using pa::ch08::sample_token;
using pa::test::error_of;
using pa::test::GoldenCase;

constexpr float kInf = std::numeric_limits<float>::infinity();

SamplingParams params_of(const GoldenCase& g) {
  SamplingParams p;
  p.n = int(g.param_int("n"));
  p.temperature = float(g.param_double("temperature"));  // printed exactly by the reference
  p.top_k = int(g.param_int("top_k"));
  p.top_p = float(g.param_double("top_p"));
  p.seed = uint64_t(g.param_int("seed"));
  return p;
}

std::vector<float> normal_logits(int n, unsigned seed, float scale = 2.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng);
  return v;
}

// ---- Golden sampling cases ------------------------------------------------------------

class SamplingGolden : public ::testing::TestWithParam<std::string> {
 protected:
  GoldenCase g{pa::test::golden_dir("ch08") + "/" + GetParam()};
  SamplingParams p = params_of(g);
  std::vector<float> logits = g.get<float>("logits");
  std::vector<double> probs = g.get<double>("probs");
  int vocab = int(logits.size());
  std::string where() const { return "case " + g.name() + " (" + g.param("note") + ")"; }
};

// Python and C++ draw the same token at every (sample, position): the uniform, the kept
// set and the inverse CDF are one specification.
TEST_P(SamplingGolden, DrawsEqualTheReferenceDrawForDraw) {
  const auto samples = g.get<int>("draw_samples"), positions = g.get<int>("draw_positions");
  const auto draws = g.get<int>("draws");
  for (size_t s = 0; s < samples.size(); ++s)
    for (size_t i = 0; i < positions.size(); ++i) {
      const int want = draws[s * positions.size() + i];
      const int got = sample_token(logits.data(), vocab, p, samples[s], positions[i]);
      EXPECT_EQ(got, want) << where() << ": sample " << samples[s] << ", position " << positions[i]
                           << ": expected token " << want << " (p = " << probs[size_t(want)]
                           << "), got token " << got << " (p = " << probs[size_t(got)] << ")";
    }
}

// 20000 draws (samples 0..n-1 over 20000/n positions): never a token the reference leaves
// out, and each kept token's frequency f within Bernstein's bound of its probability p:
//   |f - p| <= sqrt(2 p (1 - p) L / N) + 2 L / (3 N),  L = ln(2 V / 1e-6),
// which all V tokens together exceed with probability below 1e-6 for a correct sampler
// (the seed is fixed anyway, so the test is deterministic).
TEST_P(SamplingGolden, DrawsStayInTheKeptSetAndFollowItsProbabilities) {
  const int N = 20000;
  std::vector<int> counts(static_cast<size_t>(vocab), 0);
  for (int i = 0; i < N; ++i)
    ++counts[size_t(sample_token(logits.data(), vocab, p, i % p.n, 4096 + i / p.n))];
  const double L = std::log(2.0 * vocab / 1e-6);
  int failures = 0;
  for (int t = 0; t < vocab && failures < 10; ++t) {
    const double want = probs[size_t(t)], f = double(counts[size_t(t)]) / N;
    if (want == 0) {
      if (counts[size_t(t)] != 0) ++failures;
      EXPECT_EQ(counts[size_t(t)], 0) << where() << ": token " << t << " was drawn "
                                      << counts[size_t(t)] << " times, but the reference keeps it out";
      continue;
    }
    const double tol = std::sqrt(2 * want * (1 - want) * L / N) + 2 * L / (3 * N);
    if (std::abs(f - want) > tol) ++failures;
    EXPECT_LE(std::abs(f - want), tol)
        << where() << ": token " << t << ": expected frequency " << want << " +- " << tol
        << ", got " << f << " (" << counts[size_t(t)] << " of " << N << " draws)";
  }
}

INSTANTIATE_TEST_SUITE_P(Ch08, SamplingGolden,
                         ::testing::ValuesIn(pa::test::golden_case_names("ch08", "sampling_")),
                         [](const auto& info) { return info.param; });

// ---- Greedy and determinism -----------------------------------------------------------

// Temperature 0 is chapter 8's argmax whatever the seed, sample, top_k or top_p; top_k 1
// is too, at any temperature. Logits rounded to integers make ties: the first one wins.
TEST(Sampling, GreedyAndTopK1EqualArgmax) {
  for (unsigned row = 0; row < 40; ++row) {
    std::vector<float> logits = normal_logits(128, 500 + row);
    if (row % 2) for (float& x : logits) x = std::round(x);
    const int want = pa::ch08::argmax(logits.data(), 128);
    for (uint64_t seed : {0ull, 1ull, 99ull, ~0ull}) {
      SamplingParams greedy;
      greedy.n = 3;
      greedy.seed = seed;
      greedy.top_k = int(seed % 7);
      greedy.top_p = 0.25f;
      SamplingParams top1 = greedy;
      top1.temperature = 1.7f;
      top1.top_k = 1;
      top1.top_p = 1.f;
      for (int s = 0; s < 3; ++s)
        for (int pos : {0, 5, 1 << 20}) {
          EXPECT_EQ(sample_token(logits.data(), 128, greedy, s, pos), want)
              << "greedy, row " << row << ", seed " << seed << ", sample " << s << ", position " << pos;
          EXPECT_EQ(sample_token(logits.data(), 128, top1, s, pos), want)
              << "top_k 1, row " << row << ", seed " << seed << ", sample " << s << ", position " << pos;
        }
    }
  }
}

// A draw depends on nothing but its arguments: the same table comes back in reverse order
// with other requests' draws in between (another batch, a preemption, a recompute).
TEST(Sampling, SameArgumentsGiveTheSameTokenWhateverRunsAround) {
  const std::vector<float> a = normal_logits(300, 1), other = normal_logits(300, 2);
  SamplingParams p;
  p.n = 4, p.temperature = 1.1f, p.top_k = 100, p.top_p = 0.95f, p.seed = 1234;
  SamplingParams q = p;
  q.seed = 77;
  std::vector<int> first;
  for (int s = 0; s < 4; ++s)
    for (int pos = 0; pos < 64; ++pos) first.push_back(sample_token(a.data(), 300, p, s, pos));
  for (int s = 3; s >= 0; --s)
    for (int pos = 63; pos >= 0; --pos) {
      (void)sample_token(other.data(), 300, q, 3 - s, pos);
      EXPECT_EQ(sample_token(a.data(), 300, p, s, pos), first[size_t(s * 64 + pos)])
          << "sample " << s << ", position " << pos << ": a second draw gave another token";
    }
}

// Over 256 equally likely tokens two independent streams agree at 1/256 of the places.
// Matches are counted between streams that must be independent: another sample index,
// the next position, another seed, and (sample, position) swapped.
TEST(Sampling, SampleIndexPositionAndSeedGiveIndependentStreams) {
  const int V = 256, P = 2000;
  const std::vector<float> flat(V, 0.f);
  SamplingParams p;
  p.n = 64, p.temperature = 1.f, p.seed = 42;
  SamplingParams other_seed = p;
  other_seed.seed = 43;
  auto draw = [&](const SamplingParams& sp, int s, int pos) { return sample_token(flat.data(), V, sp, s, pos); };
  int same_sample = 0, same_next = 0, same_seed = 0, same_swap = 0, swaps = 0;
  for (int pos = 0; pos < P; ++pos) {
    const int t = draw(p, 0, pos);
    same_sample += t == draw(p, 1, pos);
    same_next += t == draw(p, 0, pos + 1);
    same_seed += t == draw(other_seed, 0, pos);
  }
  for (int s = 0; s < 64; ++s)
    for (int pos = 0; pos < 64; ++pos)
      if (s != pos) {
        same_swap += draw(p, s, pos) == draw(p, pos, s);
        ++swaps;
      }
  // Expected P / 256 = 7.8 matches (sd 2.8), and 4032 / 256 = 15.8 (sd 3.9): 8 sd of room.
  EXPECT_LE(same_sample, 30) << "samples 0 and 1 agree at " << same_sample << " of " << P << " positions";
  EXPECT_LE(same_next, 30) << "positions p and p + 1 agree at " << same_next << " of " << P;
  EXPECT_LE(same_seed, 30) << "seeds 42 and 43 agree at " << same_seed << " of " << P << " positions";
  EXPECT_LE(same_swap, 50) << "(sample, position) and (position, sample) agree at " << same_swap
                           << " of " << swaps;
}

TEST(Sampling, DrawUniformIsInZeroOneAndCentered) {
  double sum = 0;
  for (int i = 0; i < 100000; ++i) {
    const double u = pa::ch08::draw_uniform(7, i % 3, i);
    ASSERT_TRUE(u >= 0 && u < 1) << "draw_uniform(7, " << i % 3 << ", " << i << ") = " << u;
    sum += u;
  }
  EXPECT_NEAR(sum / 100000, 0.5, 0.005);  // sd of the mean: 0.0009
}

// ---- Beam selection -------------------------------------------------------------------

std::string text(const BeamCandidate& c) {
  std::ostringstream os;
  os << "(beam " << c.beam << ", token " << c.token << ", score " << c.score << ")";
  return os.str();
}

bool scores_close(double a, double b, double tol) { return a == b || std::abs(a - b) <= tol; }

class BeamGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(BeamGolden, SurvivorsEqualTheReference) {
  const GoldenCase g(pa::test::golden_dir("ch08") + "/" + GetParam());
  const std::string where = "case " + g.name() + " (" + g.param("note") + ")";
  const std::vector<float> logits = g.get<float>("logits");
  const std::vector<double> scores = g.get<double>("scores"), logprobs = g.get<double>("logprobs");
  const int V = int(g.param_int("vocab_size")), width = int(g.param_int("width"));
  std::vector<const float*> rows;
  for (size_t b = 0; b < scores.size(); ++b) rows.push_back(logits.data() + b * size_t(V));

  for (size_t b = 0; b < rows.size(); ++b) {
    const std::vector<double> got = pa::ch08::log_softmax(rows[b], V);
    for (int t = 0; t < V; ++t) {
      const double want = logprobs[b * size_t(V) + size_t(t)];
      ASSERT_TRUE(scores_close(got[size_t(t)], want, 1e-12))
          << where << ": log_softmax of beam " << b << ", token " << t << ": expected " << want
          << ", got " << got[size_t(t)];
    }
  }

  const auto beams = g.get<int>("expected_beam"), tokens = g.get<int>("expected_token");
  const auto want_scores = g.get<double>("expected_score");
  const std::vector<BeamCandidate> got = pa::ch08::select_beams(rows, scores, V, width);
  ASSERT_EQ(got.size(), size_t(width)) << where;
  for (size_t i = 0; i < got.size(); ++i) {
    const BeamCandidate want{beams[i], tokens[i], want_scores[i]};
    EXPECT_TRUE(got[i].beam == want.beam && got[i].token == want.token &&
                scores_close(got[i].score, want.score, 1e-9))
        << where << ": survivor " << i << ": expected " << text(want) << ", got " << text(got[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(Ch08, BeamGolden,
                         ::testing::ValuesIn(pa::test::golden_case_names("ch08", "beams_")),
                         [](const auto& info) { return info.param; });

// The per-row shortcut gives exactly the full sort of every candidate, widths past the
// vocabulary and integer logits (ties) included.
TEST(BeamSearch, SelectBeamsEqualsSortingEveryCandidate) {
  const int V = 6;
  for (unsigned trial = 0; trial < 30; ++trial) {
    const int B = 1 + int(trial % 4);
    std::vector<float> logits = normal_logits(B * V, 900 + trial);
    if (trial % 3 == 0) for (float& x : logits) x = std::round(x);
    std::vector<const float*> rows;
    std::vector<double> scores;
    for (int b = 0; b < B; ++b) {
      rows.push_back(logits.data() + b * V);
      scores.push_back(trial % 5 == 0 ? -1.0 : -0.25 * (b * 7 % 5));  // ties between beams too
    }
    std::vector<BeamCandidate> all;
    for (int b = 0; b < B; ++b) {
      const auto lp = pa::ch08::log_softmax(rows[size_t(b)], V);
      for (int t = 0; t < V; ++t) all.push_back({b, t, scores[size_t(b)] + lp[size_t(t)]});
    }
    std::sort(all.begin(), all.end(), [](const BeamCandidate& x, const BeamCandidate& y) {
      return x.score != y.score ? x.score > y.score : x.beam != y.beam ? x.beam < y.beam : x.token < y.token;
    });
    for (int width : {1, 2, V - 1, V, V + 1, B * V}) {
      if (width > B * V) continue;
      const auto got = pa::ch08::select_beams(rows, scores, V, width);
      ASSERT_EQ(got.size(), size_t(width));
      for (int i = 0; i < width; ++i)
        EXPECT_TRUE(got[size_t(i)].beam == all[size_t(i)].beam && got[size_t(i)].token == all[size_t(i)].token &&
                    got[size_t(i)].score == all[size_t(i)].score)
            << "trial " << trial << ", width " << width << ", survivor " << i << ": expected "
            << text(all[size_t(i)]) << ", got " << text(got[size_t(i)]);
    }
  }
}

// ---- Bad input ------------------------------------------------------------------------

std::string check_error(SamplingParams p, int vocab = 128) {
  return error_of([&] { pa::ch08::check_sampling(p, vocab); });
}

void expect_fragment(const std::string& message, const std::string& fragment) {
  EXPECT_NE(message.find(fragment), std::string::npos)
      << "expected an error containing \"" << fragment << "\", got \"" << message << "\"";
}

TEST(SamplingErrors, BadParamsNameTheField) {
  const SamplingParams ok;
  auto with = [&](auto change) {
    SamplingParams p = ok;
    change(p);
    return p;
  };
  EXPECT_EQ(check_error(ok), "(no error)");
  EXPECT_EQ(check_error(with([](auto& p) { p.beam_width = 4; })), "(no error)");
  EXPECT_EQ(check_error(with([](auto& p) { p.n = 8, p.temperature = 0.7f, p.top_k = 128, p.top_p = 0.01f; })),
            "(no error)");
  const std::pair<SamplingParams, std::string> bad[] = {
      {with([](auto& p) { p.n = 0; }), "SamplingParams.n must be at least 1, got 0"},
      {with([](auto& p) { p.beam_width = -1; }), "SamplingParams.beam_width must be >= 0 (0: no beam search), got -1"},
      {with([](auto& p) { p.beam_width = 129; }), "SamplingParams.beam_width 129 exceeds vocab_size 128"},
      {with([](auto& p) { p.beam_width = 2, p.n = 3; }), "SamplingParams.n must be 1 with beam search (beam_width 2), got 3"},
      {with([](auto& p) { p.beam_width = 2, p.temperature = 0.5f; }), "must stay off (0, 0, 1) with beam search"},
      {with([](auto& p) { p.beam_width = 2, p.top_p = 0.5f; }), "must stay off (0, 0, 1) with beam search"},
      {with([](auto& p) { p.temperature = -0.5f; }), "SamplingParams.temperature must be finite and >= 0 (0: greedy), got -0.5"},
      {with([](auto& p) { p.temperature = std::nanf(""); }), "SamplingParams.temperature must be finite"},
      {with([](auto& p) { p.temperature = kInf; }), "SamplingParams.temperature must be finite and >= 0 (0: greedy), got inf"},
      {with([](auto& p) { p.top_k = -1; }), "SamplingParams.top_k must be >= 0 (0: off), got -1"},
      {with([](auto& p) { p.top_k = 129; }), "SamplingParams.top_k 129 exceeds vocab_size 128"},
      {with([](auto& p) { p.top_p = 0.f; }), "SamplingParams.top_p must be in (0, 1] (1: off), got 0"},
      {with([](auto& p) { p.top_p = 1.5f; }), "SamplingParams.top_p must be in (0, 1] (1: off), got 1.5"},
      {with([](auto& p) { p.top_p = std::nanf(""); }), "SamplingParams.top_p must be in (0, 1]"},
  };
  for (const auto& [p, fragment] : bad) expect_fragment(check_error(p), fragment);
  expect_fragment(check_error(ok, 0), "vocab_size must be positive, got 0");
}

TEST(SamplingErrors, BadDrawsAndLogitsAreRefused) {
  std::vector<float> logits = normal_logits(8, 3);
  SamplingParams p;
  p.n = 2, p.temperature = 1.f;
  auto draw = [&](int sample, int position, SamplingParams sp) {
    return error_of([&] { sample_token(logits.data(), 8, sp, sample, position); });
  };
  EXPECT_EQ(draw(1, 0, p), "(no error)");
  expect_fragment(draw(2, 0, p), "sample_token: sample 2 is not in [0, n = 2)");
  expect_fragment(draw(-1, 0, p), "sample_token: sample -1 is not in [0, n = 2)");
  expect_fragment(draw(0, -1, p), "sample_token: position must be >= 0, got -1");
  SamplingParams bad_p = p;
  bad_p.top_p = 0.f;
  expect_fragment(draw(0, 0, bad_p), "SamplingParams.top_p must be in (0, 1]");
  logits[5] = std::nanf("");
  expect_fragment(draw(0, 0, p), "sample_token: logits[5] is nan (NaN and +inf are refused)");
  logits[5] = kInf;
  expect_fragment(draw(0, 0, p), "sample_token: logits[5] is inf");
  std::fill(logits.begin(), logits.end(), -kInf);
  expect_fragment(draw(0, 0, p), "sample_token: every logit is -inf");
  expect_fragment(error_of([&] { pa::ch08::log_softmax(logits.data(), 8); }), "log_softmax: every logit is -inf");
}

TEST(SamplingErrors, BadBeamInputIsRefused) {
  const std::vector<float> a = normal_logits(8, 4), b = normal_logits(8, 5);
  std::vector<float> nan_row = b;
  nan_row[2] = std::nanf("");
  auto select = [](std::vector<const float*> rows, std::vector<double> scores, int width) {
    return error_of([&] { pa::ch08::select_beams(rows, scores, 8, width); });
  };
  EXPECT_EQ(select({a.data(), b.data()}, {0, -1}, 16), "(no error)");
  expect_fragment(select({}, {}, 1), "select_beams: no live beams");
  expect_fragment(select({a.data(), b.data()}, {0}, 1), "select_beams: 2 rows but 1 scores");
  expect_fragment(select({a.data(), b.data()}, {0, -1}, 0), "select_beams: width 0 is not in [1, beams * vocab_size = 16]");
  expect_fragment(select({a.data(), b.data()}, {0, -1}, 17), "select_beams: width 17 is not in [1, beams * vocab_size = 16]");
  expect_fragment(select({a.data(), b.data()}, {0, std::nan("")}, 2), "select_beams: scores[1] is nan");
  expect_fragment(select({a.data(), nan_row.data()}, {0, -1}, 2), "select_beams: rows[1]: logits[2] is nan");
  expect_fragment(select({a.data(), nullptr}, {0, -1}, 2), "select_beams: rows[1]: logits is null");
}

}  // namespace
