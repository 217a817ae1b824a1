// TEMPORARY (replaced by the sampling branch)
#pragma once
#include <cstdint>
#include <vector>
namespace pa::ch08 {
struct SamplingParams {
  int n = 1;
  int beam_width = 0;
  float temperature = 0.f;
  int top_k = 0;
  float top_p = 1.f;
  uint64_t seed = 0;
};
void check_sampling(const SamplingParams& p, int vocab_size);
int sample_token(const float* logits, int vocab_size, const SamplingParams& p, int sample, int position);
std::vector<double> log_softmax(const float* logits, int vocab_size);
struct BeamCandidate { int beam; int token; double score; };
std::vector<BeamCandidate> select_beams(const std::vector<const float*>& rows, const std::vector<double>& scores, int vocab_size, int width);
}
