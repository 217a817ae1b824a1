// Checked mode's initcheck (init_check.cpp): reads of shared memory that no thread of the
// block wrote. In a plain build these do nothing.
#pragma once
#include <cstddef>
#include <string>

namespace emu::initcheck {
// Around each block a worker runs: its dynamic shared memory, then nothing is written yet.
void begin_block(void* dynamic_shared, size_t bytes);
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
}  // namespace emu::initcheck
