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
// WgmmaRead: a wgmma's shared-memory operands, read until the wait that covers it (`thread`
// is then its warpgroup, `group` its wgmma group).
enum class AsyncKind { TensorLoad, BulkLoad, TensorStore, BulkStore, WgmmaRead };
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
// flight (a read of it is reported), or a store's source or a wgmma's operand not yet read (a
// write is reported). Returns a handle for async_release (-1: none); `handle` >= 0 adds the
// range to that copy (a wgmma's operands are several ranges).
int async_started(const void* dst, size_t bytes, const AsyncCopy& copy, int handle = -1);
void async_landed(const void* dst, size_t bytes);
// The chunks of [dst, dst + bytes) that copy `handle` still marks are read now.
void async_release(const void* dst, size_t bytes, int handle);
// Does a copy in flight cover some chunk of [p, p + bytes): a load into it (loads), or a
// wgmma still reading it (!loads)? Then *out says which.
bool async_covering(const void* p, size_t bytes, bool loads, AsyncCopy* out);
// wgmma's accumulators in flight (wgmma.cpp): thread `thread`'s registers [p, p + bytes)
// belong to the wgmma issued at file:line until its covering wait; an ordinary read or write
// of them in between is reported.
struct AccInFlight {
  const char* file;
  int line;
  int group;      // the thread's wgmma group the wgmma is in
  int warpgroup;
};
void acc_watch(int thread, const void* p, size_t bytes, const AccInFlight& info);
void acc_unwatch(int thread, const void* p);
// A store's source: did a thread write some 16 bytes of [src, src + bytes) with ordinary
// stores and not call fence.proxy.async since? Then *thread and *pc say which write.
// `fences` gives each thread's fence.proxy.async count so far.
bool unfenced_write(const void* src, size_t bytes, const unsigned* fences, int* thread, void** pc);
}  // namespace emu::initcheck
