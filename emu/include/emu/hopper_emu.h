// The CPU emulator's side of Hopper's asynchronous machinery (include/pa/hopper/*.h).
//
// Kernel code never calls these directly: the pa::hopper wrappers do, passing where they
// were called from, so that every report names the kernel's line. Implemented in
// emu/src/smem_window.cpp, mbarrier.cpp, tma.cpp, hopper_sync.cpp and wgmma.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

namespace emu::hopper {

// ---- The shared-memory window --------------------------------------------------------
// Each block's dynamic shared memory sits at shared address kDynamicSharedBase of its
// window (as on Hopper, where the first 1 KB of a block's shared memory is reserved), and
// is 1,024-byte aligned there and in host memory. A pointer outside it (a static
// __shared__ array, a register, global memory) has no shared address here: the block fails,
// naming `what` and the line.
inline constexpr uint32_t kDynamicSharedBase = 0x400;
uint32_t shared_address(const void* p, const char* what, const char* file, int line);
void* shared_pointer(uint32_t address, const char* what, const char* file, int line);

// ---- mbarrier ------------------------------------------------------------------------------
void mbarrier_init(void* bar, unsigned count, const char* file, int line);
void fence_mbarrier_init(const char* file, int line);
// One arrive: `expect` bytes first added to the phase's transaction count (arrive.expect_tx
// when nonzero), `count` arrivals, and with `drop`, one fewer expected arrival in every
// later phase (arrive_drop). Returns the state token (the phase it arrived in).
uint64_t mbarrier_arrive(void* bar, unsigned count, uint32_t expect, bool drop, const char* what,
                         const char* file, int line);
void mbarrier_expect_tx(void* bar, uint32_t bytes, const char* file, int line);
// try_wait.parity (blocking = false: may return false, as when the hardware's time limit
// runs out) or the wait loop (blocking = true: returns when the phase completed).
bool mbarrier_wait(void* bar, unsigned parity, bool blocking, const char* file, int line);

// ---- Tensor maps and bulk copies -----------------------------------------------------------
// What the emulator keeps of a tensor map (pa::TensorMap holds one; the encoder checked it).
struct TensorMapDesc {
  uint32_t magic = 0;  // kTensorMapMagic once encoded
  int rank = 0;
  uint32_t elem_bytes = 0;
  const char* global = nullptr;
  uint64_t dims[5] = {};
  uint64_t strides[5] = {};  // bytes; strides[0] = elem_bytes
  uint32_t box[5] = {};
  uint32_t elem_strides[5] = {};
  uint32_t swizzle_bytes = 0;  // 0, 32, 64 or 128
};
inline constexpr uint32_t kTensorMapMagic = 0x7e45a9u;
// A tensor-map load: returns the bytes it will write at dst (the box), which the wrapper
// poisons as the issuing thread; then async_issued(bar).
uint32_t tma_load(const TensorMapDesc* map, void* dst, const int32_t* coords, int rank, void* bar,
                  const char* file, int line);
uint32_t bulk_load(void* dst, const void* src, uint32_t bytes, void* bar, const char* file,
                   int line);
void async_issued(void* bar);
void tma_store(const TensorMapDesc* map, const void* src, const int32_t* coords, int rank,
               const char* file, int line);
void bulk_store(void* dst, const void* src, uint32_t bytes, const char* file, int line);
void bulk_commit(const char* file, int line);
void bulk_wait(int n, bool read, const char* file, int line);

// ---- Fences, named barriers, registers ------------------------------------------------------
void fence_proxy_async(const char* file, int line);
void named_barrier(unsigned id, unsigned count, bool arrive_only, const char* file, int line);
void setmaxnreg(bool increase, unsigned registers, const char* file, int line);

// ---- wgmma (pa/hopper/wgmma.h) ----------------------------------------------------------
// One thread's wgmma.mma_async: the 128 threads of its warpgroup meet, and the last to arrive
// issues it for all of them.
struct WgmmaCall {
  int type;                // 0 fp16, 1 bf16, 2 fp8 e4m3
  int n;                   // N of m64nNk16 (k32 for fp8)
  uint64_t desc_a;         // A's matrix descriptor (when a_regs is null)
  uint64_t desc_b;         // B's
  const uint32_t* a_regs;  // A from registers: this thread's four
  int trans_a, trans_b;    // 1: the tile is MN-major
  bool accumulate;         // scale-d: D = A * B + D, else D = A * B
};
// acc: the thread's n / 2 accumulator registers.
void wgmma_mma_async(const WgmmaCall& call, float* acc, const char* file, int line);
void wgmma_fence(const char* file, int line);
void wgmma_commit(const char* file, int line);
void wgmma_wait(int pending, const char* file, int line);

}  // namespace emu::hopper
