// Chapter 13's tests need a Hopper on the GPU (its kernels are sm_90a's); on the emulator they
// always run.
#pragma once

#include <gtest/gtest.h>

#include "pa/ch13_hopper.h"

#define PA_NEED_HOPPER() \
  if (!pa::ch13::hopper_device()) GTEST_SKIP() << "needs a Hopper GPU (sm_90)"
