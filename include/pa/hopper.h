// Hopper's asynchronous machinery (sm_90a), one source for the GPU and the emulator: the
// shared window, mbarrier, TMA and bulk copies, the swizzle, proxy fences, named barriers,
// setmaxnreg and wgmma. See each header.
#pragma once

#include "pa/hopper/mbarrier.h"
#include "pa/hopper/smem_window.h"
#include "pa/hopper/swizzle.h"
#include "pa/hopper/sync.h"
#include "pa/hopper/tma.h"
#include "pa/hopper/wgmma.h"
