// The CUDA runtime API on the CPU: device memory is host memory, copies are memcpy,
// launches finish before they return (so every synchronisation is a no-op), and each
// device pointer is remembered so that a copy past the end of an allocation, or a
// free of an unknown pointer, is an error instead of silent corruption.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "emu/cuda_emu.h"
#include "memory_map.h"
#include "state.h"

struct CUevent_st {
  std::chrono::steady_clock::time_point when;
};
struct CUstream_st {};

namespace emu {
namespace {
thread_local cudaError_t tl_last = cudaSuccess;
thread_local std::string tl_message;
constexpr size_t kFakeMemory = size_t(16) << 30;
}  // namespace

cudaError_t set_error(cudaError_t code, const std::string& message) {
  tl_last = code;
  tl_message = message;
  return code;
}
const char* last_error_message() { return tl_message.c_str(); }
}  // namespace emu

using emu::set_error;

extern "C" {

cudaError_t cudaMalloc(void** ptr, size_t size) {
  if (!ptr) return set_error(cudaErrorInvalidValue, "cudaMalloc: null output pointer");
  void* p = emu::device_alloc(size);
  if (!p)
    return set_error(cudaErrorMemoryAllocation,
                     "cudaMalloc: out of memory (" + std::to_string(size) + " bytes)");
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (!ptr) return cudaSuccess;
  if (!emu::device_free(ptr))
    return set_error(cudaErrorInvalidValue,
                     "cudaFree: pointer was not returned by cudaMalloc (or freed twice)");
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  *ptr = std::malloc(size ? size : 1);
  return *ptr ? cudaSuccess : set_error(cudaErrorMemoryAllocation, "cudaMallocHost: out of memory");
}
cudaError_t cudaFreeHost(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  std::string problem;
  const bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
    return set_error(cudaErrorInvalidMemcpyDirection, "cudaMemcpy: invalid direction");
  if (dst_dev) problem = emu::check_device_range(dst, count, "cudaMemcpy: destination");
  if (problem.empty() && src_dev) problem = emu::check_device_range(src, count, "cudaMemcpy: source");
  if (!problem.empty()) return set_error(cudaErrorInvalidValue, problem);
  if (count) std::memmove(dst, src, count);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t) {
  return cudaMemcpy(dst, src, count, kind);
}
cudaError_t cudaMemset(void* dst, int value, size_t count) {
  std::string problem = emu::check_device_range(dst, count, "cudaMemset: destination");
  if (!problem.empty()) return set_error(cudaErrorInvalidValue, problem);
  std::memset(dst, value, count);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* dst, int value, size_t count, cudaStream_t) {
  return cudaMemset(dst, value, count);
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  *free_bytes = *total = emu::kFakeMemory;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamCreate(cudaStream_t* s) {
  *s = new CUstream_st;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete s;
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = emu::tl_last;
  emu::tl_last = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) { return emu::tl_last; }

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    default: return "cudaError";
  }
}
// The emulator's messages are more precise than CUDA's fixed strings: give the last one
// when it belongs to the error asked about.
const char* cudaGetErrorString(cudaError_t e) {
  if (e == cudaSuccess) return "no error";
  if (!emu::tl_message.empty()) return emu::tl_message.c_str();
  return cudaGetErrorName(e);
}

cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
  return d == 0 ? cudaSuccess : set_error(cudaErrorInvalidDevice, "cudaSetDevice: no such device");
}
cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (device != 0) return set_error(cudaErrorInvalidDevice, "no such device");
  std::memset(p, 0, sizeof *p);
  std::strncpy(p->name, "CPU emulator (pa)", sizeof p->name - 1);
  p->totalGlobalMem = emu::kFakeMemory;
  p->sharedMemPerBlock = emu::kDefaultSmemLimit;
  p->sharedMemPerBlockOptin = emu::kOptInSmemLimit;
  p->sharedMemPerMultiprocessor = emu::kOptInSmemLimit;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 0x7fffffff;
  p->maxGridSize[1] = p->maxGridSize[2] = 65535;
  p->multiProcessorCount = emu::worker_count();
  p->maxThreadsPerMultiProcessor = 1024;
  p->l2CacheSize = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  cudaDeviceProp p;
  cudaError_t e = cudaGetDeviceProperties(&p, device);
  if (e != cudaSuccess) return e;
  switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = int(p.sharedMemPerBlockOptin); break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = int(p.sharedMemPerBlock); break;
    case cudaDevAttrL2CacheSize: *value = p.l2CacheSize; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
    default:
      return set_error(cudaErrorInvalidValue,
                       "cudaDeviceGetAttribute: attribute not emulated (" +
                           std::to_string(int(attr)) + ")");
  }
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || size_t(value) > emu::kOptInSmemLimit)
      return set_error(cudaErrorInvalidValue,
                       "cudaFuncSetAttribute: " + std::to_string(value) +
                           " bytes of dynamic shared memory is over the device's maximum");
    emu::set_max_dynamic_smem(func, size_t(value));
  }
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = new CUevent_st;
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  e->when = std::chrono::steady_clock::now();
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  *ms = std::chrono::duration<float, std::milli>(b->when - a->when).count();
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* v) {
  *v = 0;  // no driver: this is the emulator
  return cudaSuccess;
}

}  // extern "C"
