// Chapter 11: the latent writer against the reference (pa_ref.mla.reshape_and_cache_latent),
// bit for bit, every untouched element still the pool's poison.
#include <gtest/gtest.h>

#include "compare.h"
#include "golden.h"
#include "pa/ch11_mla.h"

namespace pa::test {
namespace {

class LatentWriter : public ::testing::TestWithParam<std::string> {};

template <typename T>
void check_writer(const GoldenCase& c) {
  const int bs = int(c.param_int("block_size")), nb = int(c.param_int("num_blocks"));
  const ch11::LatentPoolShape s{nb, bs};
  const std::vector<int64_t> slots = c.get<int64_t>("slot_mapping");
  DeviceBuffer<T> c_kv(to_dtype<T>(c.get<float>("c_kv"))), k_rope(to_dtype<T>(c.get<float>("k_rope")));
  DeviceBuffer<int64_t> d_slots(slots);
  DeviceBuffer<T> pool(size_t(ch11::latent_pool_elems(s)));
  pool.fill_bytes(0xff);  // NaN everywhere: an element the writer must not touch stays so
  ch11::reshape_and_cache_latent<T>(s, c_kv.get(), k_rope.get(), int(slots.size()), pool.get(), d_slots.get());
  PA_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_TRUE(exactly_equal(pool.download(), c.get<float>("expected"),
                            Dims{{"block", nb}, {"slot", bs}, {"element", 576}},
                            all_ones<T>()))
      << c.name() << " (a row's elements 0-511 are c_kv, 512-575 k_rope): slot_mapping " << ::testing::PrintToString(slots);
}

TEST_P(LatentWriter, WritesEachRowToItsSlotAndNothingElse) {
  const GoldenCase c(golden_dir("ch11") + "/" + GetParam());
  if (c.param("dtype") == "bf16") check_writer<bf16>(c);
  else check_writer<half>(c);
}

INSTANTIATE_TEST_SUITE_P(Ch11, LatentWriter, ::testing::ValuesIn(golden_case_names("ch11", "writer_")),
                         [](const auto& info) { return info.param; });

TEST(LatentWriter, RefusesAPoolOfTheWrongWidth) {
  DeviceBuffer<half> x(576), pool(16 * 576);
  DeviceBuffer<int64_t> slot(std::vector<int64_t>{0});
  EXPECT_TRUE(error_contains([&] {
    ch11::reshape_and_cache_latent<half>(ch11::LatentPoolShape{1, 16, 512, 32}, x.get(), x.get(), 1, pool.get(), slot.get());
  }, "a latent row is c_kv 512 + k_rope 64 = 576 wide, got 512 + 32"));
  EXPECT_TRUE(error_contains([&] {
    ch11::reshape_and_cache_latent<half>(ch11::LatentPoolShape{1, 8}, x.get(), x.get(), 1, pool.get(), slot.get());
  }, "block_size 8 is not supported (16, 32 or 64)"));
}

// Issue 60: a slot one past the pool (slot == num_blocks * block_size). The row lands just
// past the pool's allocation; on the emulator its redzone fails the launch, naming the
// writer and the pool, where the heap used to be corrupted and the program to abort later.
TEST(LatentWriter, ASlotOnePastThePoolIsNamedAtItsLaunch) {
#if !defined(PA_BACKEND_CPU)
  GTEST_SKIP() << "the GPU keeps no redzone after a buffer to catch this write: run the "
                  "tests under compute-sanitizer --tool memcheck to find it";
#else
  const ch11::LatentPoolShape s{2, 16};
  DeviceBuffer<half> c_kv(to_dtype<half>(std::vector<float>(512, 1.f)));
  DeviceBuffer<half> k_rope(to_dtype<half>(std::vector<float>(64, 1.f)));
  DeviceBuffer<half> pool(size_t(ch11::latent_pool_elems(s)));  // 2 x 16 rows of 576: 36864 bytes
  DeviceBuffer<int64_t> slot(std::vector<int64_t>{2 * 16});
  const std::string msg = error_of([&] {
    ch11::reshape_and_cache_latent<half>(s, c_kv.get(), k_rope.get(), 1, pool.get(), slot.get());
  });
  EXPECT_TRUE(contains_text(msg, "reshape_and_cache_latent_kernel<__half>"));
#if defined(PA_EMU_CHECK)
  // Checked mode: the guard page stops the first chunk that a thread writes.
  EXPECT_TRUE(contains_text(msg, "bytes past the end of a 36864-byte device allocation"));
#else
  EXPECT_TRUE(contains_text(msg,
                            "wrote past the end of a 36864-byte device allocation (cudaMalloc)\n"
                            "  bytes 36864..38015 of it were written: from 0 to 1151 bytes past "
                            "its end (1152 bytes changed)\n"
                            "  its 3rd argument (of 4, a __half*) points to it (18432 elements): "
                            "the kernel wrote its elements 18432..19007\n"));
  EXPECT_TRUE(contains_text(msg, "Checked mode stops the kernel at a\n"
                                 "  write past the end and names both: make check-"));
#endif
#endif
}

}  // namespace
}  // namespace pa::test
