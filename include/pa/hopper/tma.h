// TMA (the Tensor Memory Accelerator): bulk copies between global and shared memory that run
// in the background, issued by one thread.
//
//   tma_load_2d..5d   a box of a tensor (described once, on the host, by a tensor map) into
//                     shared memory; its bytes complete on an mbarrier. Elements of the box
//                     outside the tensor arrive as zeros: that is how a tile's tail is handled.
//   tma_store_2d..5d  a box from shared memory back into the tensor (elements outside it are
//                     not written); tracked by bulk groups, not a barrier.
//   bulk_load         contiguous bytes (a multiple of 16) into shared memory, completing on an
//                     mbarrier: a row gather where a page is not a tile.
//   bulk_store        contiguous bytes from shared memory to global memory.
//   bulk_commit / bulk_wait_group<N> / bulk_wait_group_read<N>
//                     a thread's stores close into groups; wait_group_read<N> returns once at
//                     most N of its newest groups still read their source (so the source may be
//                     written again), wait_group<N> once their writes are done.
// A tensor map's box may be swizzled (32, 64 or 128 bytes): its 16-byte chunks are placed in
// shared memory by pa::swizzle_address (pa/hopper/swizzle.h).
//
// The host builds a map with pa::encode_tensor_map, which refuses what the driver's
// cuTensorMapEncodeTiled refuses, with the driver's reason; on the GPU it then calls the
// driver. Pass the map to the kernel by value, as a `const __grid_constant__ pa::TensorMap`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "pa/check.h"
#include "pa/hopper/smem_window.h"
#include "pa/hopper/swizzle.h"

#if !defined(PA_BACKEND_CPU)
#include <cuda.h>
#endif

#if defined(PA_BACKEND_CPU) && !defined(__grid_constant__)
#define __grid_constant__
#endif

namespace pa {

enum class TmaDtype { U8, U16, U32, I32, U64, I64, F16, F32, F64, BF16 };
enum class TmaSwizzle : uint32_t { None = 0, B32 = 32, B64 = 64, B128 = 128 };

inline uint32_t tma_dtype_bytes(TmaDtype t) {
  switch (t) {
    case TmaDtype::U8: return 1;
    case TmaDtype::U16: case TmaDtype::F16: case TmaDtype::BF16: return 2;
    case TmaDtype::U32: case TmaDtype::I32: case TmaDtype::F32: return 4;
    default: return 8;
  }
}

// What a tensor map describes (dimension 0 is the innermost, contiguous one).
struct TensorMapSpec {
  TmaDtype dtype = TmaDtype::F16;
  int rank = 2;                    // 1 to 5
  const void* global = nullptr;    // 16-byte aligned
  uint64_t dims[5] = {};           // elements in each dimension
  uint64_t strides[4] = {};        // bytes between consecutive indices of dimensions 1..rank-1
  uint32_t box[5] = {};            // elements of the box in each dimension (at most 256)
  uint32_t elem_strides[5] = {1, 1, 1, 1, 1};  // the box's step in each dimension (1 to 8)
  TmaSwizzle swizzle = TmaSwizzle::None;
  // The bytes from `global` to the end of its allocation, when known (0: unknown; the
  // emulator then asks its own allocator). A map that reaches past it is refused.
  size_t allocation_bytes = 0;
};

// The tensor map as a kernel parameter: on the GPU the driver's 128-byte object, on the
// emulator the description the emulator reads.
#if defined(PA_BACKEND_CPU)
struct alignas(64) TensorMap {
  ::emu::hopper::TensorMapDesc desc;
};
#else
struct TensorMap {
  CUtensorMap map;  // 64-byte aligned (or more) by its own declaration
};
#endif

#if defined(PA_BACKEND_CPU)
namespace detail {
// The bytes of the device allocation that holds p, from p to its end (0: none holds it).
size_t allocation_bytes_after(const void* p);
}  // namespace detail
#endif

// Why cuTensorMapEncodeTiled would refuse `s` (its documented rules, in its words), or why
// the project does (a map past its allocation); "" if neither would.
inline std::string tensor_map_problem(const TensorMapSpec& s) {
  const auto n = [](uint64_t v) { return std::to_string(v); };
  if (s.rank < 1 || s.rank > 5)
    return "tensorRank is " + n(uint64_t(s.rank)) +
           ": it must be non-zero and at most the maximum supported dimensionality of 5";
  if (reinterpret_cast<uintptr_t>(s.global) % 16)
    return "globalAddress must be 16 byte aligned";
  const uint64_t elem = tma_dtype_bytes(s.dtype);
  for (int i = 0; i < s.rank; ++i)
    if (s.dims[i] == 0 || s.dims[i] > (uint64_t(1) << 32))
      return "globalDim[" + n(uint64_t(i)) + "] is " + n(s.dims[i]) +
             ": it must be non-zero and at most 2^32";
  for (int i = 0; i + 1 < s.rank; ++i)
    if (s.strides[i] % 16 || s.strides[i] >= (uint64_t(1) << 40))
      return "globalStrides[" + n(uint64_t(i)) + "] is " + n(s.strides[i]) +
             " bytes: it must be a multiple of 16 and less than 2^40";
  for (int i = 0; i < s.rank; ++i)
    if (s.box[i] == 0 || s.box[i] > 256)
      return "boxDim[" + n(uint64_t(i)) + "] is " + n(s.box[i]) +
             ": it must be non-zero and at most 256";
  if (s.box[0] * elem % 16)
    return "boxDim[0] * elementSizeInBytes(tensorDataType) is " + n(s.box[0] * elem) +
           " bytes: it must be a multiple of 16 bytes";
  for (int i = 0; i < s.rank; ++i)
    if (s.elem_strides[i] == 0 || s.elem_strides[i] > 8)
      return "elementStrides[" + n(uint64_t(i)) + "] is " + n(s.elem_strides[i]) +
             ": it must be non-zero and at most 8";
  const uint32_t span = static_cast<uint32_t>(s.swizzle);
  if (span && s.box[0] * elem > span)
    return "the bounding box inner dimension (boxDim[0] * element size = " + n(s.box[0] * elem) +
           " bytes) must be at most the swizzle size, " + n(span) + " bytes";
  // The project's rules. A swizzled box's inner extent is the swizzle span: the driver takes
  // a shorter one, but the GPU then pads each inner row to the span in shared memory (8
  // tokens' 16-byte chunks of a K page landed 128 bytes apart on the H100, 2026-12-07), which
  // no dense reading of the box expects and the emulator does not model.
  if (span && s.box[0] * elem != span)
    return "the bounding box inner dimension (boxDim[0] * element size = " + n(s.box[0] * elem) +
           " bytes) is not the swizzle's " + n(span) + " bytes: the GPU pads a shorter inner "
           "row to the swizzle span in shared memory (the project's rule: make boxDim[0] fill "
           "the span, or use no swizzle)";
  // And the tensor must lie inside its allocation.
  uint64_t extent = s.dims[0] * elem;
  for (int i = 1; i < s.rank; ++i) extent += (s.dims[i] - 1) * s.strides[i - 1];
  size_t alloc = s.allocation_bytes;
#if defined(PA_BACKEND_CPU)
  if (!alloc) alloc = detail::allocation_bytes_after(s.global);
#endif
  if (alloc && extent > alloc)
    return "the tensor's extent, " + n(extent) + " bytes from globalAddress, is larger than its "
           "allocation, which ends " + n(alloc) + " bytes after it (a copy of the tensor's last "
           "boxes would read or write past the buffer; the driver does not check this)";
  return "";
}

// Builds the tensor map, or throws pa::Error with the reason.
inline TensorMap encode_tensor_map(const TensorMapSpec& s) {
  const std::string problem = tensor_map_problem(s);
  if (!problem.empty())
    throw Error("encode_tensor_map: cuTensorMapEncodeTiled refuses this tensor map "
                "(CUDA_ERROR_INVALID_VALUE): " + problem);
  TensorMap m{};
#if defined(PA_BACKEND_CPU)
  ::emu::hopper::TensorMapDesc& d = m.desc;
  d.magic = ::emu::hopper::kTensorMapMagic;
  d.rank = s.rank;
  d.elem_bytes = tma_dtype_bytes(s.dtype);
  d.global = static_cast<const char*>(s.global);
  d.strides[0] = d.elem_bytes;
  for (int i = 0; i < s.rank; ++i) {
    d.dims[i] = s.dims[i];
    d.box[i] = s.box[i];
    d.elem_strides[i] = s.elem_strides[i];
    if (i) d.strides[i] = s.strides[i - 1];
  }
  d.swizzle_bytes = static_cast<uint32_t>(s.swizzle);
#else
  using Encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                              const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                              const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                              CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  static Encode encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult status{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &status) != cudaSuccess ||
        status != cudaDriverEntryPointSuccess)
      fn = nullptr;
    return reinterpret_cast<Encode>(fn);
  }();
  if (!encode) throw Error("encode_tensor_map: the driver has no cuTensorMapEncodeTiled (CUDA 12+)");
  static const CUtensorMapDataType types[] = {
      CU_TENSOR_MAP_DATA_TYPE_UINT8,   CU_TENSOR_MAP_DATA_TYPE_UINT16,  CU_TENSOR_MAP_DATA_TYPE_UINT32,
      CU_TENSOR_MAP_DATA_TYPE_INT32,   CU_TENSOR_MAP_DATA_TYPE_UINT64,  CU_TENSOR_MAP_DATA_TYPE_INT64,
      CU_TENSOR_MAP_DATA_TYPE_FLOAT16, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, CU_TENSOR_MAP_DATA_TYPE_FLOAT64,
      CU_TENSOR_MAP_DATA_TYPE_BFLOAT16};
  const CUtensorMapSwizzle swizzle =
      s.swizzle == TmaSwizzle::B32   ? CU_TENSOR_MAP_SWIZZLE_32B
      : s.swizzle == TmaSwizzle::B64 ? CU_TENSOR_MAP_SWIZZLE_64B
      : s.swizzle == TmaSwizzle::B128 ? CU_TENSOR_MAP_SWIZZLE_128B
                                      : CU_TENSOR_MAP_SWIZZLE_NONE;
  cuuint64_t dims[5], strides[4];
  cuuint32_t box[5], estrides[5];
  for (int i = 0; i < s.rank; ++i) {
    dims[i] = s.dims[i];
    box[i] = s.box[i];
    estrides[i] = s.elem_strides[i];
    if (i + 1 < s.rank) strides[i] = s.strides[i];
  }
  const CUresult r = encode(&m.map, types[static_cast<int>(s.dtype)], cuuint32_t(s.rank),
                            const_cast<void*>(s.global), dims, strides, box, estrides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw Error("encode_tensor_map: cuTensorMapEncodeTiled failed (CUresult " +
                std::to_string(int(r)) + ") on a map the project's checks accepted");
#endif
  return m;
}

namespace detail {
#if defined(PA_BACKEND_CPU)
template <int R>
__device__ inline void tma_load(void* dst, const TensorMap& map, const int32_t (&c)[R],
                                uint64_t* bar, const char* file, int line) {
  const uint32_t bytes = ::emu::hopper::tma_load(&map.desc, dst, c, R, bar, file, line);
  std::memset(dst, 0xFF, bytes);  // in flight: garbage until the barrier's phase completes
  ::emu::hopper::async_issued(bar);
}
#else
template <int R>
__device__ inline void tma_load(void* dst, const TensorMap& map, const int32_t (&c)[R],
                                uint64_t* bar) {
#if PA_HOPPER_PTX
  const uint32_t d = smem_address(dst), b = smem_address(bar);
  const uint64_t m = reinterpret_cast<uint64_t>(&map.map);
  if constexpr (R == 2)
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(d), "l"(m), "r"(c[0]), "r"(c[1]), "r"(b) : "memory");
  else if constexpr (R == 3)
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];\n"
                 ::"r"(d), "l"(m), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(b) : "memory");
  else if constexpr (R == 4)
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6];\n"
                 ::"r"(d), "l"(m), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(b) : "memory");
  else
    asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5, %6}], [%7];\n"
                 ::"r"(d), "l"(m), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4]), "r"(b)
                 : "memory");
#else
  __trap();
#endif
}
template <int R>
__device__ inline void tma_store(const TensorMap& map, const void* src, const int32_t (&c)[R]) {
#if PA_HOPPER_PTX
  const uint32_t s = smem_address(src);
  const uint64_t m = reinterpret_cast<uint64_t>(&map.map);
  if constexpr (R == 2)
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%2, %3}], [%1];\n"
                 ::"l"(m), "r"(s), "r"(c[0]), "r"(c[1]) : "memory");
  else if constexpr (R == 3)
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4}], [%1];\n"
                 ::"l"(m), "r"(s), "r"(c[0]), "r"(c[1]), "r"(c[2]) : "memory");
  else if constexpr (R == 4)
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group"
                 " [%0, {%2, %3, %4, %5}], [%1];\n"
                 ::"l"(m), "r"(s), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]) : "memory");
  else
    asm volatile("cp.async.bulk.tensor.5d.global.shared::cta.tile.bulk_group"
                 " [%0, {%2, %3, %4, %5, %6}], [%1];\n"
                 ::"l"(m), "r"(s), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4]) : "memory");
#else
  __trap();
#endif
}
#endif
}  // namespace detail

#if defined(PA_BACKEND_CPU)
#define PA_TMA_LOAD_(R, ...)                                                  \
  const int32_t c[R] = {__VA_ARGS__};                                         \
  detail::tma_load<R>(dst, map, c, bar, PA_HOPPER_AT_)
#define PA_TMA_STORE_(R, ...)                                                 \
  const int32_t c[R] = {__VA_ARGS__};                                         \
  ::emu::hopper::tma_store(&map.desc, src, c, R, PA_HOPPER_AT_)
#else
#define PA_TMA_LOAD_(R, ...)                                                  \
  const int32_t c[R] = {__VA_ARGS__};                                         \
  detail::tma_load<R>(dst, map, c, bar)
#define PA_TMA_STORE_(R, ...)                                                 \
  const int32_t c[R] = {__VA_ARGS__};                                         \
  detail::tma_store<R>(map, src, c)
#endif

// The box whose first element is at coordinates (c0 innermost, ...) into dst (128-byte
// aligned shared memory), completing its bytes on bar. Coordinates may be negative or past
// the tensor's end: those elements arrive as zeros.
__device__ inline void tma_load_2d(void* dst, const TensorMap& map, int32_t c0, int32_t c1,
                                   uint64_t* bar PA_HOPPER_AND_SITE_) {
  PA_TMA_LOAD_(2, c0, c1);
}
__device__ inline void tma_load_3d(void* dst, const TensorMap& map, int32_t c0, int32_t c1,
                                   int32_t c2, uint64_t* bar PA_HOPPER_AND_SITE_) {
  PA_TMA_LOAD_(3, c0, c1, c2);
}
__device__ inline void tma_load_4d(void* dst, const TensorMap& map, int32_t c0, int32_t c1,
                                   int32_t c2, int32_t c3, uint64_t* bar PA_HOPPER_AND_SITE_) {
  PA_TMA_LOAD_(4, c0, c1, c2, c3);
}
__device__ inline void tma_load_5d(void* dst, const TensorMap& map, int32_t c0, int32_t c1,
                                   int32_t c2, int32_t c3, int32_t c4,
                                   uint64_t* bar PA_HOPPER_AND_SITE_) {
  PA_TMA_LOAD_(5, c0, c1, c2, c3, c4);
}

// The box at (c0, ...) from src (128-byte aligned shared memory) into the tensor; only the
// elements inside the tensor are written. Part of the thread's current bulk group.
__device__ inline void tma_store_2d(const TensorMap& map, const void* src, int32_t c0,
                                    int32_t c1 PA_HOPPER_AND_SITE_) {
  PA_TMA_STORE_(2, c0, c1);
}
__device__ inline void tma_store_3d(const TensorMap& map, const void* src, int32_t c0, int32_t c1,
                                    int32_t c2 PA_HOPPER_AND_SITE_) {
  PA_TMA_STORE_(3, c0, c1, c2);
}
__device__ inline void tma_store_4d(const TensorMap& map, const void* src, int32_t c0, int32_t c1,
                                    int32_t c2, int32_t c3 PA_HOPPER_AND_SITE_) {
  PA_TMA_STORE_(4, c0, c1, c2, c3);
}
__device__ inline void tma_store_5d(const TensorMap& map, const void* src, int32_t c0, int32_t c1,
                                    int32_t c2, int32_t c3, int32_t c4 PA_HOPPER_AND_SITE_) {
  PA_TMA_STORE_(5, c0, c1, c2, c3, c4);
}
#undef PA_TMA_LOAD_
#undef PA_TMA_STORE_

// `bytes` (a nonzero multiple of 16) from global src to shared dst (both 16-byte aligned),
// completing on bar.
__device__ inline void bulk_load(void* dst, const void* src, uint32_t bytes,
                                 uint64_t* bar PA_HOPPER_AND_SITE_) {
#if defined(PA_BACKEND_CPU)
  const uint32_t n = ::emu::hopper::bulk_load(dst, src, bytes, bar, PA_HOPPER_AT_);
  std::memset(dst, 0xFF, n);  // in flight: garbage until the barrier's phase completes
  ::emu::hopper::async_issued(bar);
#elif PA_HOPPER_PTX
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(smem_address(dst)), "l"(src), "r"(bytes), "r"(smem_address(bar)) : "memory");
#else
  __trap();
#endif
}

// `bytes` (a nonzero multiple of 16) from shared src to global dst; part of the thread's
// current bulk group.
__device__ inline void bulk_store(void* dst, const void* src, uint32_t bytes PA_HOPPER_AND_SITE_) {
#if defined(PA_BACKEND_CPU)
  ::emu::hopper::bulk_store(dst, src, bytes, PA_HOPPER_AT_);
#elif PA_HOPPER_PTX
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n"
               ::"l"(dst), "r"(smem_address(src)), "r"(bytes) : "memory");
#else
  __trap();
#endif
}

// Closes the thread's bulk stores issued since the last commit into a group.
__device__ inline void bulk_commit(PA_HOPPER_SITE_) {
#if defined(PA_BACKEND_CPU)
  ::emu::hopper::bulk_commit(PA_HOPPER_AT_);
#elif PA_HOPPER_PTX
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#else
  __trap();
#endif
}

// Until at most N of the thread's newest bulk groups are pending: their writes are done.
template <int N>
__device__ inline void bulk_wait_group(PA_HOPPER_SITE_) {
#if defined(PA_BACKEND_CPU)
  ::emu::hopper::bulk_wait(N, false, PA_HOPPER_AT_);
#elif PA_HOPPER_PTX
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
#else
  __trap();
#endif
}

// Until at most N of the thread's newest bulk groups still read their sources: the older
// groups' sources may be written again.
template <int N>
__device__ inline void bulk_wait_group_read(PA_HOPPER_SITE_) {
#if defined(PA_BACKEND_CPU)
  ::emu::hopper::bulk_wait(N, true, PA_HOPPER_AT_);
#elif PA_HOPPER_PTX
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
#else
  __trap();
#endif
}

}  // namespace pa
