// The CPU emulator of the CUDA execution model: what kernel code sees.
//
// A .cu file compiled by g++ includes this header (through pa/backend.h) instead of
// getting nvcc's built-ins. Each CUDA thread becomes a fiber; one OS worker runs one
// block at a time, so a block's fibers share the worker's thread_local storage, which
// is what makes `__shared__` work. Fibers switch only at synchronisation points
// (__syncthreads, __syncwarp, shuffles, votes), in the order PA_EMU_SCHEDULE picks.
#pragma once

// The CUDA toolkit's own headers compile under g++: they give us dim3, cudaError_t,
// the runtime API declarations (implemented in emu/src/runtime.cpp) and the real
// __half / __nv_bfloat16 / __nv_fp8_e4m3 types with host-side arithmetic.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

// ---- Keywords ---------------------------------------------------------------------
// Block-scope thread_local is implicitly static: one instance per OS worker, and a
// worker runs one block at a time, so this is exactly per-block shared memory.
#undef __shared__
#define __shared__ thread_local
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif
inline constexpr int warpSize = 32;

// ---- Built-in variables -------------------------------------------------------------
// Variables, not macros: the scheduler writes threadIdx before resuming each fiber.
extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;

namespace emu {

// Runs `body` once for every thread of every block of the grid. `kernel` identifies the
// kernel (for cudaFuncSetAttribute limits). Returns cudaSuccess or an error whose
// message (file:line of the offending barrier, shuffle or deadlock) is available from
// last_error_message() and cudaGetErrorString().
cudaError_t launch(const void* kernel, dim3 grid, dim3 block, size_t dynamic_smem_bytes,
                   const std::function<void()>& body);
const char* last_error_message();

// The schedule order in force: "forward", "reverse", "random:SEED" or "greedy".
// Read from PA_EMU_SCHEDULE at each launch; set_schedule() overrides it (tests use it).
void set_schedule(const char* order);  // nullptr: back to the environment variable
const char* schedule();
// OS workers that run blocks (PA_EMU_WORKERS, default: the number of cores).
int worker_count();

namespace detail {
void syncthreads(const char* file, int line);
int syncthreads_count(int predicate, const char* file, int line);
void syncwarp(unsigned mask, const char* file, int line);
// Every lane named in `mask` publishes `value` and asks for the value of `src_lane`;
// all meet, then each gets what it asked for, plus a ballot of the nonzero values.
uint64_t warp_exchange(unsigned mask, uint64_t value, int src_lane, unsigned* ballot,
                       const char* what, const char* file, int line);
unsigned active_mask();  // the warp's lanes that have not exited
// 0, 1, 0, 1, ...: one flip per call by the calling thread, 0 at its block's start. For a
// warp-collective helper that publishes through shared memory (pa/mma.h): it alternates two
// buffers and needs one __syncwarp a call, not two. Every lane calls the same helpers in the
// same order, so a lane uses a buffer again only after the next call's __syncwarp, which every
// lane reaches once it has read that buffer.
int next_turn();
void* dynamic_shared_memory();
int lane_id();
// PA_SHARED_REGION (pa/backend.h): names a piece of the block's shared memory for checked
// mode's reports. Plain mode never calls it.
void name_shared(const char* name, const void* p, size_t bytes, size_t elem, const size_t* dims,
                 int rank);
template <typename A>
void name_shared_array(const char* name, A& array) {
  static_assert(std::is_array_v<A>,
                "PA_SHARED_REGION(x) names a __shared__ array; for a pointer into dynamic shared "
                "memory, say how many elements: PA_SHARED_REGION(ptr, count)");
  const size_t dims[3] = {std::extent_v<A, 0>, std::extent_v<A, 1>, std::extent_v<A, 2>};
  name_shared(name, &array, sizeof(A), sizeof(std::remove_all_extents_t<A>), dims,
              int(std::rank_v<A>));
}
template <typename T>
void name_shared_pointer(const char* name, T* p, size_t count) {
  const size_t dims[1] = {count};
  name_shared(name, p, count * sizeof(T), sizeof(T), dims, 1);
}

// cp.async (pa/async_copy.h): a thread's 16-byte copies stay in flight until the
// cp_async_wait that covers their commit group. The kernel side reads the source and
// poisons the destination at the issue, and writes what lands at the wait: as kernel code,
// so that checked mode sees those accesses as the issuing thread's, at its lines.
struct LandedCopy {
  void* dst;
  uint4 data;
};
inline constexpr uint4 kInFlight{~0u, ~0u, ~0u, ~0u};  // 0xFF bytes: NaN in every float type
// A copy that a GPU would refuse (not 16-byte aligned): the block fails, naming the line.
[[noreturn]] void cp_async_misaligned(const void* dst, const void* src, const char* file, int line);
void cp_async_issue(void* dst, const uint4& data, const char* file, int line);
void cp_async_commit(const char* file, int line);
// The copies of every committed group but the newest `n`, now landing (the thread may first
// let others run: see block.h). Valid until the thread's next cp.async call.
const LandedCopy* cp_async_wait(int n, const char* file, int line, size_t* count);

template <typename T>
uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>,
                "shuffles move scalars of at most 8 bytes");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <typename T>
T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}

// The lane each shuffle reads from, as the PTX ISA defines shfl.sync: width splits the
// warp into segments; a source past the end of the caller's segment (or, for up, before
// its start) means "keep your own value". Note that xor may reach a *lower* segment:
// the hardware only checks the upper bound, and so do we.
inline int segment_first(int lane, int width) { return lane & ~(width - 1); }
inline int segment_last(int lane, int width) { return segment_first(lane, width) | (width - 1); }

template <typename T>
T shfl_idx(unsigned mask, T var, int src_lane, const char* file, int line, int width = 32) {
  const int lane = lane_id();
  const int src = segment_first(lane, width) | (src_lane & (width - 1));
  return from_bits<T>(warp_exchange(mask, to_bits(var), src, nullptr, "__shfl_sync", file, line));
}
template <typename T>
T shfl_xor(unsigned mask, T var, int lane_mask, const char* file, int line, int width = 32) {
  const int lane = lane_id();
  int src = lane ^ (lane_mask & 31);
  if (src > segment_last(lane, width)) src = lane;
  return from_bits<T>(warp_exchange(mask, to_bits(var), src, nullptr, "__shfl_xor_sync", file, line));
}
template <typename T>
T shfl_down(unsigned mask, T var, unsigned delta, const char* file, int line, int width = 32) {
  const int lane = lane_id();
  int src = lane + static_cast<int>(delta & 31);
  if (src > segment_last(lane, width)) src = lane;
  return from_bits<T>(warp_exchange(mask, to_bits(var), src, nullptr, "__shfl_down_sync", file, line));
}
template <typename T>
T shfl_up(unsigned mask, T var, unsigned delta, const char* file, int line, int width = 32) {
  const int lane = lane_id();
  int src = lane - static_cast<int>(delta & 31);
  if (src < segment_first(lane, width)) src = lane;
  return from_bits<T>(warp_exchange(mask, to_bits(var), src, nullptr, "__shfl_up_sync", file, line));
}
}  // namespace detail
}  // namespace emu

// ---- Synchronisation, shuffles, votes (macros so that errors name file:line) ---------
#define __syncthreads() ::emu::detail::syncthreads(__FILE__, __LINE__)
#define __syncthreads_count(p) ::emu::detail::syncthreads_count((p) ? 1 : 0, __FILE__, __LINE__)
#define __syncthreads_or(p) (__syncthreads_count(p) != 0)
#define __syncthreads_and(p) \
  (::emu::detail::syncthreads_count((p) ? 0 : 1, __FILE__, __LINE__) == 0)
#define __syncwarp(...) ::emu::detail::syncwarp(0xffffffffu __VA_OPT__(&(__VA_ARGS__)), __FILE__, __LINE__)
#define __activemask() ::emu::detail::active_mask()
#define __shfl_sync(mask, var, src, ...) \
  ::emu::detail::shfl_idx(mask, var, src, __FILE__, __LINE__ __VA_OPT__(, __VA_ARGS__))
#define __shfl_xor_sync(mask, var, lane_mask, ...) \
  ::emu::detail::shfl_xor(mask, var, lane_mask, __FILE__, __LINE__ __VA_OPT__(, __VA_ARGS__))
#define __shfl_down_sync(mask, var, delta, ...) \
  ::emu::detail::shfl_down(mask, var, delta, __FILE__, __LINE__ __VA_OPT__(, __VA_ARGS__))
#define __shfl_up_sync(mask, var, delta, ...) \
  ::emu::detail::shfl_up(mask, var, delta, __FILE__, __LINE__ __VA_OPT__(, __VA_ARGS__))

namespace emu::detail {
inline unsigned ballot(unsigned mask, int pred, const char* what, const char* file, int line) {
  unsigned b = 0;
  warp_exchange(mask, pred ? 1 : 0, lane_id(), &b, what, file, line);
  return b & mask;
}
}  // namespace emu::detail
#define __ballot_sync(mask, p) ::emu::detail::ballot(mask, (p), "__ballot_sync", __FILE__, __LINE__)
#define __any_sync(mask, p) (::emu::detail::ballot(mask, (p), "__any_sync", __FILE__, __LINE__) != 0)
#define __all_sync(mask, p) \
  (::emu::detail::ballot(mask, (p), "__all_sync", __FILE__, __LINE__) == (::emu::detail::active_mask() & (mask)))

// ---- Atomics and fences -------------------------------------------------------------
// Real atomics, because blocks run on several OS threads. On a GPU an atomic orders nothing
// but its own word: the partials a block wrote reach another block only through a
// __threadfence in the writer before its atomic, and one in the reader after its atomic.
// Checked mode holds kernels to that (the race detector sees the fences, not the atomics).
namespace emu::detail {
#if defined(PA_EMU_CHECK)
// Checked mode: the atomic instructions run in the (uninstrumented) emulator, so that
// ThreadSanitizer takes no ordering from them; __threadfence releases and acquires one
// synchronisation object that every fence of the launch shares.
uint64_t atomic_load_bits(const void* p, int bytes);
bool atomic_cas_bits(void* p, uint64_t* expected, uint64_t desired, int bytes);
void threadfence();
void threadfence_block();
#else
inline uint64_t atomic_load_bits(const void* p, int bytes) {
  return bytes == 4 ? __atomic_load_n(static_cast<const uint32_t*>(p), __ATOMIC_RELAXED)
                    : __atomic_load_n(static_cast<const uint64_t*>(p), __ATOMIC_RELAXED);
}
inline bool atomic_cas_bits(void* p, uint64_t* expected, uint64_t desired, int bytes) {
  if (bytes == 8)
    return __atomic_compare_exchange_n(static_cast<uint64_t*>(p), expected, desired, false,
                                       __ATOMIC_SEQ_CST, __ATOMIC_RELAXED);
  uint32_t e = uint32_t(*expected);
  const bool ok = __atomic_compare_exchange_n(static_cast<uint32_t*>(p), &e, uint32_t(desired),
                                              false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED);
  *expected = e;
  return ok;
}
inline void threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
#endif

template <typename T, typename F>
T atomic_update(T* addr, F f) {  // compare-and-swap loop for any 4- or 8-byte type
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "atomics on 4- or 8-byte types");
  uint64_t old_bits = atomic_load_bits(addr, sizeof(T));
  for (;;) {
    T old_val;
    std::memcpy(&old_val, &old_bits, sizeof(T));
    T new_val = f(old_val);
    uint64_t new_bits = 0;
    std::memcpy(&new_bits, &new_val, sizeof(T));
    if (atomic_cas_bits(addr, &old_bits, new_bits, sizeof(T))) return old_val;
  }
}
}  // namespace emu::detail

template <typename T>
T atomicAdd(T* a, std::type_identity_t<T> v) { return emu::detail::atomic_update(a, [v](T o) { return T(o + v); }); }
template <typename T>
T atomicSub(T* a, std::type_identity_t<T> v) { return emu::detail::atomic_update(a, [v](T o) { return T(o - v); }); }
template <typename T>
T atomicMax(T* a, std::type_identity_t<T> v) { return emu::detail::atomic_update(a, [v](T o) { return o < v ? v : o; }); }
template <typename T>
T atomicMin(T* a, std::type_identity_t<T> v) { return emu::detail::atomic_update(a, [v](T o) { return v < o ? v : o; }); }
template <typename T>
T atomicExch(T* a, std::type_identity_t<T> v) { return emu::detail::atomic_update(a, [v](T) { return v; }); }
template <typename T>
T atomicAnd(T* a, std::type_identity_t<T> v) { return emu::detail::atomic_update(a, [v](T o) { return T(o & v); }); }
template <typename T>
T atomicOr(T* a, std::type_identity_t<T> v) { return emu::detail::atomic_update(a, [v](T o) { return T(o | v); }); }
template <typename T>
T atomicXor(T* a, std::type_identity_t<T> v) { return emu::detail::atomic_update(a, [v](T o) { return T(o ^ v); }); }
template <typename T>
T atomicCAS(T* a, std::type_identity_t<T> compare, std::type_identity_t<T> v) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "atomicCAS on 4- or 8-byte types");
  uint64_t expected = 0, desired = 0;
  std::memcpy(&expected, &compare, sizeof(T));
  std::memcpy(&desired, &v, sizeof(T));
  emu::detail::atomic_cas_bits(a, &expected, desired, sizeof(T));
  T old;
  std::memcpy(&old, &expected, sizeof(T));
  return old;
}
inline void __threadfence() { emu::detail::threadfence(); }
inline void __threadfence_block() { emu::detail::threadfence_block(); }

// ---- Device math and intrinsics that have no host version in the toolkit headers -----
template <typename T>
inline T __ldg(const T* p) { return *p; }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
inline float __frcp_rn(float x) { return 1.f / x; }
inline int __float_as_int(float x) { int i; std::memcpy(&i, &x, 4); return i; }
inline float __int_as_float(int i) { float x; std::memcpy(&x, &i, 4); return x; }
inline unsigned __float_as_uint(float x) { unsigned i; std::memcpy(&i, &x, 4); return i; }
inline float __uint_as_float(unsigned i) { float x; std::memcpy(&x, &i, 4); return x; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
using std::max;
using std::min;
