// Errors: every failure a user can cause becomes a pa::Error with a message that names
// the problem, never a crash or a silent wrong answer.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

#include "pa/backend.h"

namespace pa {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Thrown by an exercise stub the student has not written yet.
struct NotImplemented : Error {
  NotImplemented(const char* chapter, const char* file, const char* function)
      : Error(std::string("TODO(") + chapter + ") not done yet: " + function + "() in " +
              file + " is your exercise. Open the file, find the TODO(" + chapter +
              ") comments, and see the book's chapter page.") {}
};

}  // namespace pa

// An exercise stub: throws pa::NotImplemented naming the chapter, file and function.
#define PA_TODO(chapter) throw ::pa::NotImplemented(chapter, __FILE__, __func__)

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
