// Chapter 4, stretch exercise: paged_attention_suffix, v1 over each sequence's tokens from a
// given block on, with the log-sum-exp. Against a float64 reference on the host. The table's
// entries before each sequence's first block name a block full of NaN, as do the slots past
// each sequence's end, so a walk that starts too early or reads too far shows as NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "pa/ch02_paged.h"
#include "pa/ch04_paged_attention.h"
#include "pa/device_buffer.h"
#include "pa/dtype.h"

namespace {

using pa::ch04::PagedAttentionShape;

struct Seq {
  int len, first;  // context length, first block attended
};

template <typename T>
void check(int Hq, int Hkv, int D, int BS, const std::vector<Seq>& seqs, double tol, const std::string& what) {
  const int B = int(seqs.size()), x = pa::ch02::pack_x<T>();
  int width = 1, blocks_used = 1;  // block 0: the NaN block every prefix entry names
  for (const Seq& q : seqs) {
    width = std::max(width, (q.len + BS - 1) / BS);
    blocks_used += std::max(0, (q.len + BS - 1) / BS - q.first);
  }
  const PagedAttentionShape s{B, Hq, Hkv, D, BS, blocks_used + 3, width};
  std::mt19937 rng(40 + D + BS);
  std::normal_distribution<float> nd(0.f, 1.f);
  const size_t block_elems = size_t(Hkv) * D * BS;
  std::vector<float> kp(size_t(s.num_blocks) * block_elems, std::numeric_limits<float>::quiet_NaN()), vp(kp);
  std::vector<int> table(size_t(B) * width, 0);
  std::vector<int> ids(size_t(s.num_blocks) - 1);
  std::iota(ids.begin(), ids.end(), 1);
  std::shuffle(ids.begin(), ids.end(), rng);
  size_t next = 0;
  // Per sequence: the tokens' K and V (as T, rounded), [t][h][d].
  std::vector<std::vector<float>> K(static_cast<size_t>(B)), V(static_cast<size_t>(B));
  for (int b = 0; b < B; ++b) {
    const Seq& q = seqs[size_t(b)];
    K[size_t(b)].resize(size_t(q.len) * Hkv * D);
    V[size_t(b)].resize(K[size_t(b)].size());
    for (int j = q.first; j < (q.len + BS - 1) / BS; ++j) {
      const int blk = ids[next++];
      table[size_t(b) * width + j] = blk;
      for (int o = 0; o < BS && j * BS + o < q.len; ++o) {
        const int t = j * BS + o;
        for (int h = 0; h < Hkv; ++h)
          for (int d = 0; d < D; ++d) {
            const float kv = pa::to_float(pa::from_float<T>(nd(rng))), vv = pa::to_float(pa::from_float<T>(nd(rng)));
            K[size_t(b)][(size_t(t) * Hkv + h) * D + d] = kv;
            V[size_t(b)][(size_t(t) * Hkv + h) * D + d] = vv;
            const size_t region = (size_t(blk) * Hkv + h) * D * BS;
            kp[region + size_t(d / x) * BS * x + size_t(o) * x + d % x] = kv;
            vp[region + size_t(d) * BS + o] = vv;
          }
      }
    }
  }
  std::vector<float> qf(size_t(B) * Hq * D);
  for (float& e : qf) e = pa::to_float(pa::from_float<T>(nd(rng)));
  const float scale = 1.f / std::sqrt(float(D));
  auto to_t = [](const std::vector<float>& v) {
    std::vector<T> t;
    for (float e : v) t.push_back(pa::from_float<T>(e));
    return t;
  };
  std::vector<int> lens, firsts;
  for (const Seq& q : seqs) lens.push_back(q.len), firsts.push_back(q.first);
  pa::DeviceBuffer<T> dk(to_t(kp)), dv(to_t(vp)), dq(to_t(qf)), dout(qf.size());
  pa::DeviceBuffer<int> dtable(table), dlens(lens), dfirst(firsts);
  pa::DeviceBuffer<float> dlse(std::vector<float>(size_t(B) * Hq, 12345.f));
  dout.fill_bytes(0xFF);
  pa::ch04::paged_attention_suffix<T>(s, dout.get(), dlse.get(), dq.get(), dk.get(), dv.get(), dtable.get(),
                                      dlens.get(), dfirst.get(), scale);
  const std::vector<T> out = dout.download();
  const std::vector<float> lse = dlse.download();

  for (int b = 0; b < B; ++b)
    for (int h = 0; h < Hq; ++h) {
      const Seq& q = seqs[size_t(b)];
      const int g = h / (Hq / Hkv), t0 = q.first * BS;
      std::ostringstream where;
      where << what << ": sequence " << b << " (context_len " << q.len << ", first block " << q.first << ": tokens "
            << t0 << ".." << q.len - 1 << (t0 >= q.len ? ", none" : "") << "), head " << h;
      std::vector<double> sc;
      double mx = -INFINITY;
      for (int t = t0; t < q.len; ++t) {
        double dot = 0;
        for (int d = 0; d < D; ++d)
          dot += double(qf[(size_t(b) * Hq + h) * D + d]) * K[size_t(b)][(size_t(t) * Hkv + g) * D + d];
        sc.push_back(dot * scale);
        mx = std::max(mx, sc.back());
      }
      double l = 0;
      for (double v : sc) l += std::exp(v - mx);
      const double want_lse = sc.empty() ? -INFINITY : mx + std::log(l);
      const double got_lse = lse[size_t(b) * Hq + h];
      if (!(got_lse == want_lse || std::fabs(got_lse - want_lse) <= tol * (1 + std::fabs(want_lse)))) {
        ADD_FAILURE() << where.str() << ": lse got " << got_lse << ", want " << want_lse
                      << " = log(sum of exp(scale * q . k)) over the tokens";
        return;
      }
      for (int d = 0; d < D; ++d) {
        double want = 0;
        for (size_t i = 0; i < sc.size(); ++i)
          want += std::exp(sc[i] - mx) / l * V[size_t(b)][((size_t(t0) + i) * Hkv + g) * D + d];
        const double got = pa::to_float(out[(size_t(b) * Hq + h) * D + d]);
        if (!(std::fabs(got - want) <= tol * (1 + std::fabs(want)))) {
          ADD_FAILURE() << where.str() << ", d " << d << ": got " << got << ", want " << want
                        << (std::isnan(got) ? " (NaN: a block before the first block, or a slot past the end, was read; "
                                              "or the output was never written)"
                                            : "");
          return;
        }
      }
    }
}

TEST(StretchSuffix, Fp32) {
  check<float>(4, 2, 64, 16, {{100, 2}, {37, 0}, {48, 3}, {5, 0}, {130, 8}, {64, 1}}, 1e-4,
               "fp32, D 64, block_size 16, 4 query heads on 2 KV heads");
}

TEST(StretchSuffix, Fp16) {
  check<pa::half>(2, 1, 128, 8, {{60, 4}, {9, 1}, {8, 1}, {200, 11}}, 1e-2, "fp16, D 128, block_size 8, MQA");
}

TEST(StretchSuffix, Bf16) {
  check<pa::bf16>(8, 8, 64, 32, {{70, 1}, {33, 1}, {1, 0}, {300, 2}}, 2e-2, "bf16, D 64, block_size 32, 8 heads");
}

}  // namespace
