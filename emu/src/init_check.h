// Checked mode's initcheck (init_check.cpp): reads of shared memory that no thread of the
// block wrote. In a plain build these do nothing.
#pragma once
#include <cstddef>
#include <string>

namespace emu::initcheck {
// Around each block a worker runs: its dynamic shared memory, then nothing is written yet.
// `slack`: the bytes after it before the guard page, where an access faults as it would there.
void begin_block(void* dynamic_shared, size_t bytes, size_t slack);
void end_block();
// After a launch: what was found, in the course's words ("" if nothing).
std::string take_report(const void* kernel);
// PA_SHARED_REGION: names [p, p + bytes) of the running block's shared memory, an array of
// `elem`-byte elements shaped dims[0..rank), for the reports.
void name_region(const char* name, const void* p, size_t bytes, size_t elem, const size_t* dims,
                 int rank);
// cp.async (async_copy.cpp): the 16 bytes at dst are in flight, a copy by thread `thread` of
// the running block, until they land. A read of them in between is reported.
void copy_started(const void* dst, int thread);
void copy_landed(const void* dst);

// Hopper's bulk copies (tma.cpp): what a report says of one. Plain data.
enum class AsyncKind { TensorLoad, BulkLoad, TensorStore, BulkStore };
struct AsyncCopy {
  AsyncKind kind;
  const char* file;  // where it was issued
  int line;
  int thread;        // the issuing thread of the block
  // Loads: the barrier its bytes complete on, and that barrier's phase at the issue.
  uint32_t barrier;
  uint64_t phase;
  const char* init_file;
  int init_line;
  int group;  // stores: the issuing thread's bulk group
};
// [dst, dst + bytes) of the running block's dynamic shared memory: a load's destination in
// flight (a read of it is reported), or a store's source not yet read (a write is reported).
void async_started(const void* dst, size_t bytes, const AsyncCopy& copy);
void async_landed(const void* dst, size_t bytes);
// A store's source: did a thread write some 16 bytes of [src, src + bytes) with ordinary
// stores and not call fence.proxy.async since? Then *thread and *pc say which write.
// `fences` gives each thread's fence.proxy.async count so far.
bool unfenced_write(const void* src, size_t bytes, const unsigned* fences, int* thread, void** pc);
}  // namespace emu::initcheck
