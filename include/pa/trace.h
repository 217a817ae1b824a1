// The course's built-in synthetic request trace, generated bit for bit like
// reference/pa_ref/trace.py (splitmix64), and the model shape whose KV cache it fills.
#pragma once

#include <cstdint>
#include <vector>

namespace pa {

// splitmix64: a 64-bit counter through a mixing function; tiny and easy to mirror.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // In [lo, hi], both inclusive (the modulo's tiny bias does not matter here).
  int64_t uniform_int(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }

 private:
  uint64_t state_;
};

struct Request {
  int64_t prompt_len;
  int64_t output_len;
  int64_t total() const { return prompt_len + output_len; }
};

inline constexpr uint64_t kDefaultTraceSeed = 2026;
inline constexpr int kDefaultTraceRequests = 256;

// For each request in order: prompt in [32, 1024], then output in [16, 512].
inline std::vector<Request> synthetic_trace(uint64_t seed = kDefaultTraceSeed,
                                            int num_requests = kDefaultTraceRequests) {
  SplitMix64 rng(seed);
  std::vector<Request> trace(num_requests);
  for (Request& r : trace) {
    r.prompt_len = rng.uniform_int(32, 1024);
    r.output_len = rng.uniform_int(16, 512);
  }
  return trace;
}

// The KV-cache shape of a Llama-3-8B-like model (32 layers, 8 KV heads of 128, fp16).
struct KVConfig {
  int num_layers = 32;
  int num_kv_heads = 8;
  int head_size = 128;
  int dtype_bytes = 2;
  int max_seq_len = 2048;
  // K and V, every layer, every KV head: what one token costs in the cache.
  int64_t bytes_per_token() const {
    return 2ll * num_layers * num_kv_heads * head_size * dtype_bytes;
  }
};

}  // namespace pa
