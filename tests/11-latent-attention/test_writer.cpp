// Chapter 11: the latent writer against the reference (pa_ref.mla.reshape_and_cache_latent),
// bit for bit, every untouched element still the pool's poison.
#include <gtest/gtest.h>

#include <limits>

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

// A pool of a few GB passes 2^31 elements: slot 7,456,541's row starts at element
// 7,456,541 x 576 = 4,294,967,616 = 2^32 + 320. An offset computed in 32 bits wraps to 320,
// inside row 0. The pool (8.6 GB) is only reserved: the test poisons and reads back just the
// rows it looks at (the emulator's allocations, like the GPU's, are not touched until used).
TEST(LatentWriter, SlotsPastTwoToThe32ElementsUse64BitOffsets) {
  const int64_t slot = 7'456'541, row = ch11::kRowWidth;
  const ch11::LatentPoolShape s{int((slot + 64) / 64), 64};
  DeviceBuffer<half> pool(size_t(ch11::latent_pool_elems(s)));
  std::vector<float> c(512), r(64);
  for (int e = 0; e < 512; ++e) c[size_t(e)] = float(e % 61 + 1);
  for (int e = 0; e < 64; ++e) r[size_t(e)] = float(-1 - e);
  DeviceBuffer<half> c_kv(to_dtype<half>(c)), k_rope(to_dtype<half>(r));
  DeviceBuffer<int64_t> d_slot(std::vector<int64_t>{slot});
  // Rows 0-1 (where a wrapped offset lands) and slots slot - 1 .. slot + 1, all NaN.
  const std::vector<half> nan_rows(size_t(3 * row), all_ones<half>());
  auto put = [&](int64_t first_row, int rows) {
    PA_CUDA_CHECK(cudaMemcpy(pool.get() + first_row * row, nan_rows.data(), size_t(rows * row) * sizeof(half),
                             cudaMemcpyHostToDevice));
  };
  auto get = [&](int64_t first_row, int rows) {
    std::vector<half> h(size_t(rows * row));
    PA_CUDA_CHECK(cudaMemcpy(h.data(), pool.get() + first_row * row, h.size() * sizeof(half), cudaMemcpyDeviceToHost));
    return h;
  };
  put(0, 2);
  put(slot - 1, 3);
  ch11::reshape_and_cache_latent<half>(s, c_kv.get(), k_rope.get(), 1, pool.get(), d_slot.get());
  PA_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> want(size_t(3 * row), std::numeric_limits<float>::quiet_NaN());
  for (int e = 0; e < 512; ++e) want[size_t(row + e)] = c[size_t(e)];
  for (int e = 0; e < 64; ++e) want[size_t(row + 512 + e)] = r[size_t(e)];
  const std::vector<half> low = get(0, 2);
  int64_t changed = 0, first_changed = -1;
  for (size_t i = 0; i < low.size(); ++i)
    if (bits_of(low[i]) != bits_of(all_ones<half>()) && changed++ == 0) first_changed = int64_t(i);
  EXPECT_EQ(changed, 0) << "writing slot " << slot << " (its row starts at element " << slot * row
                        << " = 2^32 + 320) changed " << changed << " elements of the pool's rows 0-1, the "
                        << "first at row " << first_changed / row << ", element " << first_changed % row
                        << ": the row's offset was computed in 32 bits and wrapped past 2^32. Offsets "
                           "into the pool must be 64-bit (an int64_t slot, times the row width in 64 bits)";
  EXPECT_TRUE(exactly_equal(get(slot - 1, 3), want, Dims{{"row (0: slot - 1, 1: the slot, 2: slot + 1)", 3}, {"element", row}},
                            all_ones<half>()))
      << "slot " << slot << " (the middle row here) must hold the token's row, and its neighbours stay NaN";
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
