// Comparing a kernel's output with the reference, with a message that says where: the
// first mismatch by named coordinates, which sequences / heads / ... fail, how many
// values, the largest errors and the tolerance, and what a NaN means.
//
//   EXPECT_TRUE(all_close(out.download(), want, decode_out_dims(B, Hq, D), atol, rtol));
//   EXPECT_TRUE(exactly_equal(got, want, k_pool_dims(...)));   // bit for bit
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <iomanip>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "dims.h"
#include "pa/check.h"
#include "pa/device_buffer.h"
#include "pa/dtype.h"

namespace pa::test {

// ---- Poison ----------------------------------------------------------------------------

// The bits of a value, for exact comparisons and for the messages ("0x7fff").
template <typename T>
uint64_t bits_of(const T& x) {
  uint64_t b = 0;
  std::memcpy(&b, &x, sizeof(T));
  return b;
}
template <typename T>
std::string hex_of(const T& x) {
  std::ostringstream os;
  os << "0x" << std::hex << std::setw(2 * sizeof(T)) << std::setfill('0') << bits_of(x);
  return os.str();
}
// A value as the messages print it: "0.3125", "NaN", "-inf".
inline std::string value_text(double v, int precision = 7) {
  if (std::isnan(v)) return "NaN";
  std::ostringstream os;
  os << std::setprecision(precision) << v;
  return os.str();
}
template <typename T>
T from_bits(uint64_t b) {
  T x;
  std::memcpy(&x, &b, sizeof(T));
  return x;
}

// Every byte 0xFF: a NaN in every dtype. Pools, dense caches and workspaces start so.
template <typename T>
T all_ones() { return from_bits<T>(~uint64_t(0)); }

// The NaN a test fills an output with before each run: every bit set but the lowest
// (0xfffe, 0xfffffffe). No arithmetic makes it, and it differs from the pools' 0xFF
// padding and from the reference's NaN, so an output that still holds it was never
// written, and any other NaN was computed from (or copied from) a poisoned slot.
template <typename T>
T output_poison() { return from_bits<T>(~uint64_t(0) - 1); }

template <typename T>
void poison(DeviceBuffer<T>& out) { out.upload(std::vector<T>(out.size(), output_poison<T>())); }

// What a NaN in an output means.
inline constexpr const char* kNeverWritten = "never written (still the output poison)";
inline constexpr const char* kReadPoison =
    "a computed NaN: a NaN-poisoned input slot was read (a block-table entry past the "
    "sequence's blocks, a token at or past context_len, padding): rerun with a finite value "
    "in every poisoned slot, this element is a number";
inline constexpr const char* kMadeNaN =
    "a computed NaN, not read from the padding (rerun with a finite value in every poisoned "
    "input slot, this element is still NaN): the arithmetic made it (inf/inf, inf - inf, 0/0 "
    "or 0 * inf: exp() of a score whose maximum was not subtracted first overflows to inf), or "
    "shared memory was read before its data arrived (on the emulator, a cp.async copy's "
    "destination holds NaN until the cp_async_wait that covers it)";
inline constexpr const char* kSomeNaN =
    "a computed NaN: a NaN-poisoned input slot was read (a block-table entry past the "
    "sequence's blocks, a token at or past context_len, padding), or the arithmetic made one "
    "(inf/inf, 0/0: exp() of a score whose maximum was not subtracted overflows to inf)";

// ---- Where a computed NaN came from ------------------------------------------------------

// A test whose inputs hold NaN poison says how to rerun its case with a finite value in
// every poisoned input slot: the rerun returns whether output element `index` is still NaN.
// all_close reruns once, at the first computed NaN, and names the cause: a NaN that goes
// away was read from the poison; one that stays was made by the arithmetic.
using NanRerun = std::function<bool(int64_t index)>;
inline const NanRerun*& current_nan_rerun() {
  thread_local const NanRerun* rerun = nullptr;
  return rerun;
}
// While in scope, all_close's failures use this rerun (nested probes: the innermost).
class NanProbe {
 public:
  explicit NanProbe(NanRerun rerun) : rerun_(std::move(rerun)), outer_(current_nan_rerun()) {
    current_nan_rerun() = &rerun_;
  }
  ~NanProbe() { current_nan_rerun() = outer_; }
  NanProbe(const NanProbe&) = delete;
  NanProbe& operator=(const NanProbe&) = delete;

 private:
  NanRerun rerun_;
  const NanRerun* outer_;
};
// An input with 0 in every NaN-poisoned slot, for a NanProbe's rerun. uint8_t elements are
// e4m3, whose NaNs are 0x7F and 0xFF.
template <typename T>
std::vector<T> nan_to_zero(std::vector<T> x) {
  for (T& e : x) {
    if constexpr (std::is_same_v<T, uint8_t>) {
      if ((e & 0x7F) == 0x7F) e = 0;
    } else if (std::isnan(static_cast<double>(to_float(e)))) {
      e = T(0.f);
    }
  }
  return x;
}

// The cause of the computed NaN at `index`: a rerun's answer, or both causes without one.
inline const char* computed_nan_cause(int64_t index) {
  const NanRerun* rerun = current_nan_rerun();
  if (rerun == nullptr) return kSomeNaN;
  return (*rerun)(index) ? kMadeNaN : kReadPoison;
}

// ---- Approximate: attention outputs ----------------------------------------------------

// Passes when every |got - want| <= atol + rtol * |want| and nothing is NaN.
template <typename G>
::testing::AssertionResult all_close(const std::vector<G>& got, const std::vector<double>& want,
                                     const Dims& dims, double atol, double rtol) {
  if (got.size() != want.size() || int64_t(got.size()) != num_values(dims))
    return ::testing::AssertionFailure() << "size mismatch: got " << got.size() << " values, want "
                                         << want.size() << ", the dims name " << num_values(dims);
  Failures bad(dims);
  size_t nans = 0, unwritten = 0;
  int64_t first_nan = -1;
  double max_abs = 0, max_rel = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(to_float(got[i]));
    const double err = std::fabs(g - want[i]);
    if (std::isnan(g)) {
      if (nans++ == 0) first_nan = int64_t(i);
      unwritten += bits_of(got[i]) == bits_of(output_poison<G>());
    } else {
      max_abs = std::max(max_abs, err);
      if (want[i] != 0) max_rel = std::max(max_rel, err / std::fabs(want[i]));
    }
    if (std::isnan(g) || !(err <= atol + rtol * std::fabs(want[i]))) bad.add(int64_t(i));
  }
  if (bad.count() == 0) return ::testing::AssertionSuccess();
  const size_t f = size_t(bad.first());
  std::ostringstream os;
  os << bad.count() << " of " << got.size() << " values differ";
  if (nans) os << " (" << nans << " of them NaN)";
  os << "; max abs error " << value_text(max_abs, 4) << ", max rel error " << value_text(max_rel, 4)
     << (nans ? " (NaN not counted)" : "") << "; tolerance atol " << atol << " + rtol " << rtol
     << " * |want|\n  first at " << where(dims, int64_t(f)) << ": got " << value_text(to_float(got[f]));
  // One rerun at most: the cause of the first computed NaN.
  const int64_t first_computed = [&] {
    for (size_t i = 0; i < got.size(); ++i)
      if (std::isnan(to_float(got[i])) && bits_of(got[i]) != bits_of(output_poison<G>())) return int64_t(i);
    return int64_t(-1);
  }();
  const char* cause = first_computed >= 0 ? computed_nan_cause(first_computed) : nullptr;
  if (std::isnan(to_float(got[f])))
    os << " (" << hex_of(got[f]) << "), want " << value_text(want[f]) << ": "
       << (bits_of(got[f]) == bits_of(output_poison<G>()) ? kNeverWritten : cause);
  else
    os << ", want " << value_text(want[f]) << " (error "
       << value_text(std::fabs(to_float(got[f]) - want[f]), 3) << ")";
  os << "\n  " << bad.summary();
  if (nans) {
    os << "\n  NaN: " << unwritten << " " << kNeverWritten << ", " << nans - unwritten << " computed";
    if (first_computed >= 0 && first_computed != int64_t(f))
      os << "; the first computed one at " << where(dims, first_computed) << ": " << cause;
    else if (first_nan != int64_t(f))
      os << "; the first at " << where(dims, first_nan);
  }
  return ::testing::AssertionFailure() << os.str();
}

// The same, reporting flat indices.
template <typename G>
::testing::AssertionResult all_close(const std::vector<G>& got, const std::vector<double>& want,
                                     double atol, double rtol) {
  return all_close(got, want, flat_dims(got.size()), atol, rtol);
}

// A request's logits, one row a generated token, against the reference's, in order: the
// first token whose row differs fails, named by its index. The later ones are not compared
// (a wrong token changes every step after it, and a failure a token would bury the first).
template <typename G, typename W>
::testing::AssertionResult generated_logits_close(const std::vector<std::vector<G>>& got,
                                                  const std::vector<std::vector<W>>& want, double atol,
                                                  double rtol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << got.size() << " generated tokens' logits, want " << want.size();
  for (size_t t = 0; t < want.size(); ++t) {
    const std::vector<double> w(want[t].begin(), want[t].end());
    const ::testing::AssertionResult r = all_close(got[t], w, {{"logit", int64_t(w.size())}}, atol, rtol);
    if (!r)
      return ::testing::AssertionFailure() << "generated token " << t
                                           << " (the first wrong one; later tokens are not compared): "
                                           << r.message();
  }
  return ::testing::AssertionSuccess();
}

// ---- Exact: data movement, and outputs that must not change ----------------------------

// Bit for bit (so a NaN matches only the same NaN, and -0 differs from 0). `untouched` is
// the poison an element the kernel must not write still holds: where want holds it, got
// must too, and a got that still holds it elsewhere was never written.
// (T deduced from got and want only, as std::type_identity_t does in C++20: this header
// stays C++17, so that tests nvcc builds can include it.)
template <typename T>
struct no_deduce {
  using type = T;
};
template <typename T>
::testing::AssertionResult exactly_equal(const std::vector<T>& got, const std::vector<T>& want,
                                         const Dims& dims,
                                         std::optional<typename no_deduce<T>::type> untouched = {}) {
  if (got.size() != want.size() || int64_t(got.size()) != num_values(dims))
    return ::testing::AssertionFailure() << "size mismatch: got " << got.size() << " values, want "
                                         << want.size() << ", the dims name " << num_values(dims);
  Failures bad(dims);
  for (size_t i = 0; i < got.size(); ++i)
    if (bits_of(got[i]) != bits_of(want[i])) bad.add(int64_t(i));
  if (bad.count() == 0) return ::testing::AssertionSuccess();
  const size_t f = size_t(bad.first());
  const bool want_poison = untouched && bits_of(want[f]) == bits_of(*untouched);
  const bool got_poison = untouched && bits_of(got[f]) == bits_of(*untouched);
  auto show = [](const T& v) { return value_text(to_float(v), 9) + " (" + hex_of(v) + ")"; };
  std::ostringstream os;
  os << bad.count() << " of " << got.size() << " values differ (compared bit for bit)\n  first at "
     << where(dims, int64_t(f)) << ": got " << show(got[f]) << ", want ";
  if (want_poison)
    os << "the poison " << hex_of(want[f]) << ": this element must stay untouched, but was written"
       << (std::isnan(to_float(got[f])) ? " (with a NaN: a poisoned slot was read)" : "");
  else
    os << show(want[f]);
  if (got_poison) os << ": never written (still the poison)";
  if (!want_poison && !got_poison && std::isnan(to_float(got[f])))
    os << ": a NaN: a poisoned slot was read";
  os << "\n  " << bad.summary();
  return ::testing::AssertionFailure() << os.str();
}

// Against reference values exact in T. A NaN in want marks an element the kernel must
// leave untouched: it must still hold exactly `untouched`, the poison it was filled with.
template <typename T>
::testing::AssertionResult exactly_equal(const std::vector<T>& got, const std::vector<float>& want,
                                         const Dims& dims, T untouched) {
  std::vector<T> expected(want.size());
  for (size_t i = 0; i < want.size(); ++i)
    expected[i] = std::isnan(want[i]) ? untouched : from_float<T>(want[i]);
  return exactly_equal(got, expected, dims, std::optional<T>(untouched));
}

// Two runs that must agree bit for bit, reporting flat indices.
template <typename T>
::testing::AssertionResult exactly_equal(const std::vector<T>& got, const std::vector<T>& want) {
  return exactly_equal(got, want, flat_dims(got.size()));
}

// e4m3 pool bytes, exactly, shown in hex and decoded (the e4m3 value, before the scale).
// `unwritten` is the byte the pool was filled with before the kernel ran.
inline ::testing::AssertionResult exactly_equal_e4m3(const std::vector<uint8_t>& got,
                                                     const std::vector<uint8_t>& want,
                                                     const Dims& dims, uint8_t unwritten) {
  if (got.size() != want.size() || int64_t(got.size()) != num_values(dims))
    return ::testing::AssertionFailure() << "size mismatch: got " << got.size() << " bytes, want "
                                         << want.size() << ", the dims name " << num_values(dims);
  Failures bad(dims);
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i]) bad.add(int64_t(i));
  if (bad.count() == 0) return ::testing::AssertionSuccess();
  auto show = [](uint8_t b) {
    __nv_fp8_e4m3 e;
    e.__x = b;
    return hex_of(b) + " (" + value_text(float(e)) + ")";
  };
  const size_t f = size_t(bad.first());
  std::ostringstream os;
  os << bad.count() << " of " << got.size() << " bytes differ\n  first at " << where(dims, int64_t(f))
     << ": got " << show(got[f]) << ", want " << show(want[f]);
  if (want[f] == unwritten) os << ": this byte must stay unwritten (" << hex_of(unwritten) << ")";
  if (got[f] == unwritten)
    os << ": " << hex_of(unwritten) << ", the byte the pool was filled with (an e4m3 NaN): either "
       << "this byte was never written, or the quantizer wrote that NaN (__nv_cvt_float_to_fp8 gives "
       << "0xff for a NaN with its sign bit set, such as 0 / 0 on x86, and, without __NV_SATFINITE, "
       << "for a value below -448; a NaN input gives 0x7f)";
  os << "\n  " << bad.summary();
  return ::testing::AssertionFailure() << os.str();
}

// ---- Helpers ---------------------------------------------------------------------------

// `other` with the leading rows (sequences) where take[row] is set replaced by those of
// `from`: to compare two results on some rows only, compare got with
// with_rows_of(want, got, take).
template <typename T>
std::vector<T> with_rows_of(const std::vector<T>& from, std::vector<T> other, const std::vector<bool>& take) {
  const size_t row = take.empty() ? 0 : from.size() / take.size();
  for (size_t r = 0; r < take.size(); ++r)
    if (take[r]) std::copy_n(from.begin() + r * row, row, other.begin() + r * row);
  return other;
}

// The message of the pa::Error that f throws, or "(no error)".
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const pa::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Passes when `message` contains `wanted`; on failure prints both:
//   EXPECT_TRUE(contains_text(msg, "beyond the table's capacity"));
inline ::testing::AssertionResult contains_text(const std::string& message, const std::string& wanted) {
  if (message.find(wanted) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "the message should contain \"" << wanted
                                       << "\"\n  actual message: " << message;
}

// Passes when f throws a pa::Error whose message contains `wanted`. On failure it prints
// the wanted text and what happened instead: the actual message, "(no error)", or another
// exception's type and message. The exact wording a test asks for is stated in the TODO
// (or the API header) of the code that throws.
//   EXPECT_TRUE(error_contains([&] { a.free(4); }, "unknown block 4"));
template <typename F>
::testing::AssertionResult error_contains(F f, const std::string& wanted) {
  std::string actual;
  try {
    f();
    actual = "(no error)";
  } catch (const pa::Error& e) {
    actual = e.what();
    if (actual.find(wanted) != std::string::npos) return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    actual = std::string("(not a pa::Error, but a std::exception) ") + e.what();
  }
  return ::testing::AssertionFailure() << "expected a pa::Error whose message contains \"" << wanted
                                       << "\"\n  actual message: " << actual;
}

// Converts reference float values (already exact in T) to T.
template <typename T>
std::vector<T> to_dtype(const std::vector<float>& x) {
  std::vector<T> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = from_float<T>(x[i]);
  return out;
}

}  // namespace pa::test
