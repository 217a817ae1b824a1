// Chapter 1, stretch exercise: append_kv_varlen, many sequences' new tokens in one launch.
// Every element of both caches is checked bit for bit; a token found in the wrong slot is
// named with the slot it went to. The batches have sequences with no new token at the start,
// in the middle and at the end, so that a search that stops at the wrong one of several equal
// running sums shows.
#include <gtest/gtest.h>

#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "pa/ch01_dense.h"
#include "pa/device_buffer.h"
#include "pa/dtype.h"

namespace {

using pa::ch01::DenseShape;

template <typename T>
uint32_t bits(T v) {
  uint32_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}

// counts[b] new tokens for sequence b, the first at position start[b].
template <typename T>
::testing::AssertionResult appends(const DenseShape& s, const std::vector<int>& counts, const std::vector<int>& start) {
  const int B = s.num_seqs;
  const int64_t row = int64_t(s.num_kv_heads) * s.head_size;
  std::vector<int> cu{0};
  for (int n : counts) cu.push_back(cu.back() + n);
  const int num_tokens = cu.back();
  // Token i's K row holds i + 1 + (e % 7) / 8 (V the negatives): exact in every dtype here, and
  // each row's first element names its token.
  std::vector<T> k_new(size_t(num_tokens * row)), v_new(k_new.size());
  for (int i = 0; i < num_tokens; ++i)
    for (int64_t e = 0; e < row; ++e) {
      k_new[size_t(i * row + e)] = pa::from_float<T>(float(i + 1) + float(e % 7) / 8.f);
      v_new[size_t(i * row + e)] = pa::from_float<T>(-float(i + 1) - float(e % 7) / 8.f);
    }
  const size_t cache_elems = size_t(B) * s.max_seq_len * row;
  pa::DeviceBuffer<T> kc(cache_elems), vc(cache_elems), dk(k_new), dv(v_new);
  kc.fill_bytes(0xFF);
  vc.fill_bytes(0xFF);
  pa::DeviceBuffer<int> dcu(cu), dstart(start);
  pa::ch01::append_kv_varlen<T>(s, kc.get(), vc.get(), dk.get(), dv.get(), num_tokens, dcu.get(), dstart.get());
  const std::vector<T> gk = kc.download(), gv = vc.download();

  std::ostringstream batch;
  batch << "batch: new tokens per sequence [";
  for (int b = 0; b < B; ++b) batch << (b ? ", " : "") << counts[size_t(b)];
  batch << "], first positions [";
  for (int b = 0; b < B; ++b) batch << (b ? ", " : "") << start[size_t(b)];
  batch << "], cu_tokens [";
  for (size_t b = 0; b < cu.size(); ++b) batch << (b ? ", " : "") << cu[b];
  batch << "]";
  // Where each token must be, and where a slot's value came from.
  std::vector<int> owner(size_t(B) * s.max_seq_len, -1);  // token of each (seq, pos) slot
  for (int b = 0; b < B; ++b)
    for (int j = 0; j < counts[size_t(b)]; ++j) owner[size_t(b) * s.max_seq_len + start[size_t(b)] + j] = cu[size_t(b)] + j;
  auto token_in = [&](T v) {  // which token's K row starts with this value, or -1
    for (int i = 0; i < num_tokens; ++i)
      if (bits(k_new[size_t(i * row)]) == bits(v)) return i;
    return -1;
  };
  auto seq_of = [&](int i) {
    int b = 0;
    while (cu[size_t(b) + 1] <= i) ++b;
    return b;
  };
  for (int b = 0; b < B; ++b)
    for (int p = 0; p < s.max_seq_len; ++p) {
      const int want = owner[size_t(b) * s.max_seq_len + p];
      const size_t at = (size_t(b) * s.max_seq_len + p) * size_t(row);
      for (int64_t e = 0; e < row; ++e) {
        const bool k_ok = want < 0 ? bits(gk[at + e]) == (sizeof(T) == 4 ? 0xFFFFFFFFu : 0xFFFFu)
                                   : bits(gk[at + e]) == bits(k_new[size_t(want * row + e)]);
        const bool v_ok = want < 0 ? bits(gv[at + e]) == (sizeof(T) == 4 ? 0xFFFFFFFFu : 0xFFFFu)
                                   : bits(gv[at + e]) == bits(v_new[size_t(want * row + e)]);
        if (k_ok && v_ok) continue;
        std::ostringstream os;
        os << batch.str() << "\n  " << (k_ok ? "V" : "K") << " cache, sequence " << b << ", position " << p
           << ", element " << e << ": ";
        if (want < 0) {
          os << "must not be written (no new token goes there)";
          const int i = token_in(gk[at]);
          if (i >= 0)
            os << ", but holds new token " << i << " (sequence " << seq_of(i) << "'s new token " << i - cu[size_t(seq_of(i))]
               << ", which belongs at sequence " << seq_of(i) << ", position "
               << start[size_t(seq_of(i))] + i - cu[size_t(seq_of(i))] << ")";
        } else {
          os << "want new token " << want << " (sequence " << b << "'s new token " << want - cu[size_t(b)] << ")";
          const int i = token_in(gk[at]);
          os << (i >= 0 ? ", got new token " + std::to_string(i) : std::string(", got a value of no new token's K row"));
        }
        return ::testing::AssertionFailure() << os.str();
      }
    }
  return ::testing::AssertionSuccess();
}

TEST(StretchAppendVarlen, OneTokenEach) {
  const DenseShape s{4, 16, 4, 2, 64};
  EXPECT_TRUE(appends<float>(s, {1, 1, 1, 1}, {0, 5, 15, 3}));
}

TEST(StretchAppendVarlen, PrefillsOfDifferentLengths) {
  const DenseShape s{3, 40, 2, 2, 64};
  EXPECT_TRUE(appends<float>(s, {17, 3, 32}, {0, 10, 8}));
}

TEST(StretchAppendVarlen, SequencesWithNoNewToken) {
  const DenseShape s{6, 12, 2, 1, 64};
  EXPECT_TRUE(appends<float>(s, {0, 3, 0, 0, 5, 0}, {2, 4, 0, 7, 1, 11}))
      << "(sequences 0, 2, 3 and 5 have no new token: cu_tokens repeats 0, 3 and 8)";
  EXPECT_TRUE(appends<float>(s, {2, 0, 0, 0, 0, 1}, {0, 0, 0, 0, 0, 6}));
  EXPECT_TRUE(appends<float>(s, {0, 0, 0, 0, 0, 4}, {0, 0, 0, 0, 0, 8})) << "(only the last sequence)";
}

TEST(StretchAppendVarlen, ManySequences) {
  const int B = 300;
  const DenseShape s{B, 8, 2, 1, 64};
  std::vector<int> counts(B), start(B);
  for (int b = 0; b < B; ++b) {
    counts[size_t(b)] = (b * 7) % 5;  // 0..4, zeros among them
    start[size_t(b)] = (b * 3) % (8 - counts[size_t(b)] + 1);
  }
  EXPECT_TRUE(appends<float>(s, counts, start));
}

TEST(StretchAppendVarlen, HalfAndBf16) {
  const DenseShape s{3, 20, 4, 2, 80};
  EXPECT_TRUE(appends<pa::half>(s, {5, 0, 9}, {3, 0, 11}));
  EXPECT_TRUE(appends<pa::bf16>(s, {1, 12, 2}, {19, 0, 7}));
}

}  // namespace
