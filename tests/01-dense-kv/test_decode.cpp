// Chapter 1: dense decode attention against the float64 NumPy reference.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "compare.h"
#include "golden.h"
#include "pa/ch01_dense.h"

namespace {

using pa::ch01::DenseShape;
using pa::test::GoldenCase;
using pa::test::contains_text;

DenseShape shape_of(const GoldenCase& c) {
  const auto q = c.shape("q"), k = c.shape("k_cache");  // q [B,Hq,D], k [B,L,Hkv,D]
  return DenseShape{int(q[0]), int(k[1]), int(q[1]), int(k[2]), int(q[2])};
}

// Runs the kernel on one golden case (inputs in dtype T) and compares with `expected`.
template <typename T>
void check_case(const GoldenCase& c) {
  const DenseShape s = shape_of(c);
  pa::DeviceBuffer<T> q(pa::test::to_dtype<T>(c.get<float>("q")));
  pa::DeviceBuffer<T> k(pa::test::to_dtype<T>(c.get<float>("k_cache")));
  pa::DeviceBuffer<T> v(pa::test::to_dtype<T>(c.get<float>("v_cache")));
  pa::DeviceBuffer<int> lens(c.get<int>("context_lens"));
  pa::DeviceBuffer<T> out(c.get<double>("expected").size());
  pa::test::poison(out);  // an output the kernel never writes keeps this NaN
  const float scale = static_cast<float>(c.get<double>("scale")[0]);
  pa::ch01::decode_attention<T>(s, out.get(), q.get(), k.get(), v.get(), lens.get(), scale);
  // The rerun that tells a NaN read from the caches' padding from one the arithmetic made.
  const pa::test::NanProbe probe([&](int64_t i) {
    auto finite = [&](const char* name) { return pa::test::nan_to_zero(pa::test::to_dtype<T>(c.get<float>(name))); };
    pa::DeviceBuffer<T> k0(finite("k_cache")), v0(finite("v_cache")), out0(out.size());
    pa::ch01::decode_attention<T>(s, out0.get(), q.get(), k0.get(), v0.get(), lens.get(), scale);
    return std::isnan(pa::to_float(out0.download()[size_t(i)]));
  });
  EXPECT_TRUE(pa::test::all_close(out.download(), c.get<double>("expected"),
                                  pa::test::decode_out_dims(s.num_seqs, s.num_q_heads, s.head_size),
                                  c.param_double("atol"), c.param_double("rtol")))
      << "case " << c.name() << ": " << c.param("note");
}

class DecodeGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(DecodeGolden, MatchesReference) {
  const GoldenCase c(pa::test::golden_dir("ch01") + "/" + GetParam());
  switch (pa::parse_dtype(c.param("dtype"))) {
    case pa::DType::fp32: return check_case<float>(c);
    case pa::DType::fp16: return check_case<pa::half>(c);
    case pa::DType::bf16: return check_case<pa::bf16>(c);
  }
}

INSTANTIATE_TEST_SUITE_P(Ch01, DecodeGolden, ::testing::ValuesIn(pa::test::golden_case_names("ch01", "decode_")),
                         [](const auto& info) { return info.param; });

// ---- Bad shapes are refused with a message naming the problem --------------------------
TEST(DecodeErrors, BadShapesAreRefusedClearly) {
  pa::DeviceBuffer<float> buf(1 << 16);
  pa::DeviceBuffer<int> lens(4);
  auto run = [&](DenseShape s) {
    return pa::test::error_of([&] {
      pa::ch01::decode_attention<float>(s, buf.get(), buf.get(), buf.get(), buf.get(),
                                        lens.get(), 1.f);
    });
  };
  EXPECT_TRUE(contains_text(run({2, 16, 6, 4, 64}), "multiple of num_kv_heads"));
  EXPECT_TRUE(contains_text(run({2, 16, 4, 4, 100}), "head_size 100 is not supported"));
  EXPECT_TRUE(contains_text(run({0, 16, 4, 4, 64}), "num_seqs must be positive"));
  EXPECT_TRUE(contains_text(run({2, -1, 4, 4, 64}), "max_seq_len must be positive"));
  EXPECT_TRUE(contains_text(run({2, 16, 4, 0, 64}), "head counts must be positive"));
}

}  // namespace
