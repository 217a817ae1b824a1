// Errors: every failure a user can cause becomes a pa::Error with a message that names
// the problem, never a crash or a silent wrong answer.
#pragma once

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <string>

#include "pa/backend.h"

namespace pa {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

namespace detail {

// The function a stub is in, from __func__ and __PRETTY_FUNCTION__. Inside a lambda,
// __func__ is "operator()"; the pretty name holds the enclosing function:
//   g++:   "pa::ch10::make_plan(const std::vector<int>&, int)::<lambda(int)>"
//   clang: "auto pa::ch10::make_plan(const std::vector<int> &, int)::(anonymous class)::
//           operator()(int) const"
// Returns {"make_plan", true} there, and {func, false} anywhere else (a real operator() too).
struct StubSite {
  std::string function;
  bool in_lambda = false;
};

inline StubSite stub_site(const char* func, const char* pretty) {
  if (std::string(func) != "operator()" || !pretty) return {func, false};
  std::string p = pretty;
  size_t cut = std::string::npos;
  for (const char* marker : {"::<lambda", "::(lambda", "::(anonymous class)"})
    cut = std::min(cut, p.find(marker));
  if (cut == std::string::npos) return {func, false};
  p.resize(cut);  // the outermost enclosing function, with its parameters
  // Drops a trailing bracketed list, e.g. the parameters "(...)" or template arguments "<...>".
  auto drop_trailing = [&p](char open, char close) {
    if (p.empty() || p.back() != close) return;
    int depth = 0;
    for (size_t i = p.size(); i-- > 0;) {
      if (p[i] == close) ++depth;
      else if (p[i] == open && --depth == 0) {
        p.resize(i);
        return;
      }
    }
  };
  drop_trailing('(', ')');
  drop_trailing('<', '>');
  const size_t colons = p.rfind("::"), space = p.rfind(' ');
  size_t start = 0;
  if (colons != std::string::npos) start = colons + 2;
  if (space != std::string::npos && space + 1 > start) start = space + 1;
  std::string name = p.substr(start);
  if (name.empty()) return {func, false};
  return {name, true};
}

inline std::string not_implemented_message(const char* chapter, const char* file,
                                           const StubSite& site) {
  return std::string("TODO(") + chapter + ") not done yet: " +
         (site.in_lambda ? "the lambda in " : "") + site.function + "() in " + file +
         " is your exercise. Open the file, find the TODO(" + chapter +
         ") comments, and see the book's chapter page.";
}

}  // namespace detail

// Thrown by an exercise stub the student has not written yet.
struct NotImplemented : Error {
  NotImplemented(const char* chapter, const char* file, const char* function,
                 const char* pretty_function = nullptr)
      : Error(detail::not_implemented_message(chapter, file,
                                              detail::stub_site(function, pretty_function))) {}
};

}  // namespace pa

// An exercise stub: throws pa::NotImplemented naming the chapter, file and function (inside
// a lambda, the function the lambda is in).
#define PA_TODO(chapter) \
  throw ::pa::NotImplemented(chapter, __FILE__, __func__, __PRETTY_FUNCTION__)

// Argument checks: PA_REQUIRE(head_size > 0, "head_size must be positive, got " << d);
#define PA_REQUIRE(cond, message)                     \
  do {                                                \
    if (!(cond)) {                                    \
      std::ostringstream pa_os_;                      \
      pa_os_ << message;                              \
      throw ::pa::Error(pa_os_.str());                \
    }                                                 \
  } while (0)

// CUDA runtime calls: PA_CUDA_CHECK(cudaMalloc(&p, n));
#define PA_CUDA_CHECK(call)                                                        \
  do {                                                                             \
    cudaError_t pa_err_ = (call);                                                  \
    if (pa_err_ != cudaSuccess)                                                    \
      throw ::pa::Error(std::string(__FILE__) + ":" + std::to_string(__LINE__) +  \
                        ": " #call " failed: " + cudaGetErrorString(pa_err_));     \
  } while (0)
