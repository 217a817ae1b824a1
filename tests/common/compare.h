// Comparing a kernel's output with the reference, with a message that helps: the first
// mismatching index, the largest absolute and relative errors, and the tolerance used.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "pa/check.h"
#include "pa/dtype.h"

namespace pa::test {

// Passes when every |got - want| <= atol + rtol * |want| and nothing is NaN.
template <typename G>
::testing::AssertionResult all_close(const std::vector<G>& got, const std::vector<double>& want,
                                     double atol, double rtol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure()
           << "size mismatch: got " << got.size() << " values, want " << want.size();
  size_t bad = 0, first = got.size(), nans = 0;
  double max_abs = 0, max_rel = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(to_float(got[i]));
    const double err = std::fabs(g - want[i]);
    nans += std::isnan(g) ? 1 : 0;
    const bool ok = !std::isnan(g) && err <= atol + rtol * std::fabs(want[i]);
    if (!ok && bad++ == 0) first = i;
    if (!std::isnan(err)) {
      max_abs = std::max(max_abs, err);
      if (want[i] != 0) max_rel = std::max(max_rel, err / std::fabs(want[i]));
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os << bad << " of " << got.size() << " values differ; first at index " << first << ": got "
     << to_float(got[first]) << ", want " << want[first] << "; max abs error " << max_abs
     << ", max rel error " << max_rel << "; tolerance atol " << atol << " + rtol " << rtol
     << " * |want|";
  if (nans)
    os << "; " << nans << " NaN values, not counted in the maxima (NaN: an output never "
       << "written, or a poisoned slot that was read)";
  return ::testing::AssertionFailure() << os.str();
}

// Data movement must be exact: every value equal, and NaN exactly where the reference has
// NaN (a poisoned slot that had to stay untouched).
template <typename G>
::testing::AssertionResult exactly_equal(const std::vector<G>& got, const std::vector<float>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure()
           << "size mismatch: got " << got.size() << " values, want " << want.size();
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float g = to_float(got[i]);
    const bool ok = std::isnan(want[i]) ? std::isnan(g) : g == want[i];
    if (!ok && bad++ == 0) first = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " values differ; first at index " << first << ": got "
         << to_float(got[first]) << ", want " << want[first]
         << (std::isnan(want[first]) ? " (this element must stay untouched: NaN poison)"
                                     : (std::isnan(to_float(got[first]))
                                            ? " (never written, or copied from a poisoned slot)"
                                            : ""));
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

// Converts reference float values (already exact in T) to T.
template <typename T>
std::vector<T> to_dtype(const std::vector<float>& x) {
  std::vector<T> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = from_float<T>(x[i]);
  return out;
}

}  // namespace pa::test
