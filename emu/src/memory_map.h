// What the emulator knows about an address: which device allocation or shared-memory
// buffer it falls in (or just misses). Reports of races and crashes use it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace emu {
// Device allocations (cudaMalloc/cudaFree). In checked mode each one is its own mapping
// that ends at an inaccessible guard page, so a read or write past its end faults. In
// plain mode each one sits between two redzones of kRedzoneBytes, filled with a known byte,
// that check_redzones() looks at when a launch ends.
inline constexpr size_t kRedzoneBytes = 4096;
void* device_alloc(size_t bytes);
bool device_free(void* p);  // false: not a live allocation
// "" if [p, p+n) lies inside one live allocation, else what is wrong with it.
std::string check_device_range(const void* p, size_t n, const char* role);
// The bytes from p to the end of the live allocation that holds it; 0 if none does.
size_t device_bytes_after(const void* p);

// Plain mode, after a launch of `kernel`: "" if every redzone still holds its pattern, else
// a report per allocation whose redzone changed (which bytes; which kernel argument points
// to it). The pattern is put back, so each write is reported once. Checked mode: "".
std::string check_redzones(const void* kernel);
// Set by pa::launch around each launch (include/pa/launch.h), read by check_redzones():
// `count` arguments, each at values[i] (sizes[i] bytes, typeid name types[i]); elem_sizes[i]
// is a pointer argument's element size, 0 for an argument that is not a pointer.
void note_launch_arguments(const void* kernel, int count, const void* const* values,
                           const size_t* sizes, const char* const* types,
                           const size_t* elem_sizes);

// The dynamic shared memory of the block a worker runs: `bytes` usable, 1,024-byte aligned,
// from a buffer that (in checked mode) ends at a guard page `*slack` bytes after them (fewer
// than 1,024; 0 in plain mode). Valid until the worker's next block.
void* dynamic_shared_buffer(size_t bytes, size_t* slack);

// "global memory (byte 24 of a 4096-byte device allocation)", "dynamic shared memory
// (byte 8 of 512)", "__shared__ memory (...)" when TSan says TLS, or "memory at 0x...".
std::string describe_address(uintptr_t address, const std::string& tsan_location = "");
// For a faulting address: what it just missed ("" if nothing is near). Signal-safe enough
// for the crash report (no locks; the process is dying).
std::string describe_fault(uintptr_t address);
}  // namespace emu
