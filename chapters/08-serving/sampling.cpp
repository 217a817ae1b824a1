// TEMPORARY (replaced by the sampling branch)
#include "pa/ch08_sampling.h"
#include <algorithm>
#include <cmath>
#include "pa/check.h"
#include "pa/trace.h"
namespace pa::ch08 {
void check_sampling(const SamplingParams& p, int) {
  PA_REQUIRE(p.n >= 1, "sampling: n must be at least 1, got " << p.n);
}
std::vector<double> log_softmax(const float* l, int v) {
  double m = *std::max_element(l, l + v), s = 0;
  for (int i = 0; i < v; ++i) s += std::exp(double(l[i]) - m);
  std::vector<double> o(static_cast<size_t>(v));
  for (int i = 0; i < v; ++i) o[size_t(i)] = double(l[i]) - m - std::log(s);
  return o;
}
int sample_token(const float* l, int v, const SamplingParams& p, int sample, int position) {
  if (p.temperature == 0.f) return int(std::max_element(l, l + v) - l);
  SplitMix64 rng(p.seed * 1000003u + uint64_t(sample) * 7919u + uint64_t(position));
  std::vector<double> lp = log_softmax(l, v);
  double u = double(rng.next() >> 11) * 0x1.0p-53, c = 0;
  for (int i = 0; i < v; ++i) { c += std::exp(lp[size_t(i)] / p.temperature); }
  double acc = 0;
  for (int i = 0; i < v; ++i) { acc += std::exp(lp[size_t(i)] / p.temperature) / c; if (u < acc) return i; }
  return v - 1;
}
std::vector<BeamCandidate> select_beams(const std::vector<const float*>& rows, const std::vector<double>& scores, int v, int w) {
  std::vector<BeamCandidate> all;
  for (size_t b = 0; b < rows.size(); ++b) {
    auto lp = log_softmax(rows[b], v);
    for (int t = 0; t < v; ++t) all.push_back({int(b), t, scores[b] + lp[size_t(t)]});
  }
  std::stable_sort(all.begin(), all.end(), [](auto& a, auto& b) { return a.score > b.score; });
  all.resize(size_t(w));
  return all;
}
}
