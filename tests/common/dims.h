// Named dimensions, so that a failing test says "sequence 2, head 5, d 17" instead of
// "index 1297", and which sequences, heads, ... fail: "failing sequences: 1, 3-5 (of 0-7)".
#pragma once

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace pa::test {

// One dimension of a tensor, outermost first: Dims{{"sequence", B}, {"head", Hq}, {"d", D}}.
// A name may appear twice when a layout splits a dimension (K's d is stored as D / x
// chunks of x): the coordinate is then the sum of each part's index times its step,
// as in {"d", D / x, x}, ..., {"d", x}.
struct Dim {
  std::string name;
  int64_t size;
  int64_t step = 1;
};
using Dims = std::vector<Dim>;

// A tensor without names: "element 1297".
inline Dims flat_dims(size_t n) { return {{"element", int64_t(n)}}; }

inline int64_t num_values(const Dims& dims) {
  int64_t n = 1;
  for (const Dim& d : dims) n *= d.size;
  return n;
}

// The distinct names, in order of first appearance, and how far each one reaches.
struct NamedAxes {
  std::vector<std::string> names;
  std::vector<int64_t> extents;

  explicit NamedAxes(const Dims& dims) {
    for (const Dim& d : dims) {
      const size_t a = axis(d.name);
      if (a == names.size()) {
        names.push_back(d.name);
        extents.push_back(1);
      }
      extents[a] += (d.size - 1) * d.step;
    }
  }
  size_t axis(const std::string& name) const {
    return size_t(std::find(names.begin(), names.end(), name) - names.begin());
  }
};

// The named coordinates of flat (row-major) index i.
inline std::vector<int64_t> coordinates(const Dims& dims, const NamedAxes& axes, int64_t i) {
  std::vector<int64_t> c(axes.names.size(), 0);
  for (size_t k = dims.size(); k-- > 0;) {
    c[axes.axis(dims[k].name)] += (i % dims[k].size) * dims[k].step;
    i /= dims[k].size;
  }
  return c;
}

// "sequence 2, head 5, d 17"
inline std::string where(const Dims& dims, int64_t i) {
  const NamedAxes axes(dims);
  const std::vector<int64_t> c = coordinates(dims, axes, i);
  std::ostringstream os;
  for (size_t a = 0; a < c.size(); ++a) os << (a ? ", " : "") << axes.names[a] << " " << c[a];
  return os.str();
}

// Index runs, compressed: "1, 3-5 (of 0-7)", "all 32", "all but 0 (of 0-7)" (whichever is shorter).
inline std::string index_ranges(const std::vector<bool>& hit) {
  const int64_t n = int64_t(hit.size());
  auto runs_of = [&](bool value) {
    std::vector<std::pair<int64_t, int64_t>> runs;
    for (int64_t i = 0; i < n; ++i)
      if (hit[size_t(i)] == value) {
        if (!runs.empty() && runs.back().second == i - 1) runs.back().second = i;
        else runs.push_back({i, i});
      }
    return runs;
  };
  const auto failing = runs_of(true), passing = runs_of(false);
  if (passing.empty()) return "all " + std::to_string(n);
  const bool but = passing.size() < failing.size();
  const auto& runs = but ? passing : failing;
  std::ostringstream os;
  if (but) os << "all but ";
  constexpr size_t kShown = 8;
  for (size_t r = 0; r < runs.size() && r < kShown; ++r) {
    os << (r ? ", " : "") << runs[r].first;
    if (runs[r].second > runs[r].first) os << "-" << runs[r].second;
  }
  if (runs.size() > kShown) os << ", ... (" << runs.size() << " runs)";
  os << " (of 0-" << n - 1 << ")";  // indices, not a count: "2 (of 0-7)" is head 2
  return os.str();
}

// Collects failing flat indices: the count, the first, and the failing indices along
// each named dimension.
class Failures {
 public:
  explicit Failures(const Dims& dims) : dims_(dims), axes_(dims) {
    for (int64_t e : axes_.extents) hit_.emplace_back(size_t(e), false);
  }
  void add(int64_t i) {
    if (count_++ == 0) first_ = i;
    const std::vector<int64_t> c = coordinates(dims_, axes_, i);
    for (size_t a = 0; a < c.size(); ++a) hit_[a][size_t(c[a])] = true;
  }
  size_t count() const { return count_; }
  int64_t first() const { return first_; }
  // "failing sequences: 1, 3-5 (of 0-7); failing heads: all 32; failing d: all 128"
  std::string summary() const {
    std::ostringstream os;
    for (size_t a = 0; a < hit_.size(); ++a) {
      const std::string& name = axes_.names[a];
      os << (a ? "; " : "") << "failing " << name << (name.size() > 1 ? "s" : "") << ": "
         << index_ranges(hit_[a]);
    }
    return os.str();
  }

 private:
  Dims dims_;
  NamedAxes axes_;
  std::vector<std::vector<bool>> hit_;
  size_t count_ = 0;
  int64_t first_ = -1;
};

// ---- The course's tensors ------------------------------------------------------------

// Decode attention's q and out: [num_seqs, num_q_heads, head_size].
inline Dims decode_out_dims(int num_seqs, int num_q_heads, int head_size) {
  return {{"sequence", num_seqs}, {"head", num_q_heads}, {"d", head_size}};
}

// Chapter 1's dense cache and chapter 2's gather output: [num_seqs, max_seq_len, Hkv, D].
inline Dims dense_cache_dims(int num_seqs, int max_seq_len, int num_kv_heads, int head_size) {
  return {{"sequence", num_seqs}, {"token", max_seq_len}, {"kv head", num_kv_heads}, {"d", head_size}};
}

// Chapter 2's pools: K [num_blocks, Hkv, D / x, BS, x] (d split into 16-byte chunks of x)
// and V [num_blocks, Hkv, D, BS]. A leading "layer" dimension for chapter 7's pools.
inline Dims k_pool_dims(int num_blocks, int num_kv_heads, int head_size, int block_size, int x) {
  return {{"block", num_blocks}, {"kv head", num_kv_heads}, {"d", head_size / x, x},
          {"token", block_size}, {"d", x}};
}
inline Dims v_pool_dims(int num_blocks, int num_kv_heads, int head_size, int block_size) {
  return {{"block", num_blocks}, {"kv head", num_kv_heads}, {"d", head_size}, {"token", block_size}};
}

}  // namespace pa::test
