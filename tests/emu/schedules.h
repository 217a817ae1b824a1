// The emulator tests' schedule orders: a scope that sets one and restores the default when
// a test ends (even a failing one), and a loop over the usual five. On the GPU, which has
// its own order, both run the body once and set nothing.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "pa/backend.h"

namespace pa::test {

struct ScheduleScope {
  explicit ScheduleScope(const char* order) {
#if defined(PA_BACKEND_CPU)
    emu::set_schedule(order);
#else
    (void)order;
#endif
  }
  ~ScheduleScope() {
#if defined(PA_BACKEND_CPU)
    emu::set_schedule(nullptr);
#endif
  }
};

// Runs `body` once per schedule order on the emulator, once on the GPU.
template <typename F>
void for_each_schedule(F body) {
#if defined(PA_BACKEND_CPU)
  for (const char* order : {"forward", "reverse", "greedy", "random:1", "random:7"}) {
    SCOPED_TRACE(std::string("schedule ") + order);
    ScheduleScope scope(order);
    body();
  }
#else
  body();
#endif
}

}  // namespace pa::test
