// What the emulator knows about an address: which device allocation or shared-memory
// buffer it falls in (or just misses). Reports of races and crashes use it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace emu {
// Device allocations (cudaMalloc/cudaFree). In checked mode each one is its own mapping
// that ends at an inaccessible guard page, so a read or write past its end faults.
void* device_alloc(size_t bytes);
bool device_free(void* p);  // false: not a live allocation
// "" if [p, p+n) lies inside one live allocation, else what is wrong with it.
std::string check_device_range(const void* p, size_t n, const char* role);

// The dynamic shared memory of the block a worker runs: `bytes` usable, from a buffer
// that (in checked mode) ends at a guard page. Valid until the worker's next block.
void* dynamic_shared_buffer(size_t bytes);

// "global memory (byte 24 of a 4096-byte device allocation)", "dynamic shared memory
// (byte 8 of 512)", "__shared__ memory (...)" when TSan says TLS, or "memory at 0x...".
std::string describe_address(uintptr_t address, const std::string& tsan_location = "");
// For a faulting address: what it just missed ("" if nothing is near). Signal-safe enough
// for the crash report (no locks; the process is dying).
std::string describe_fault(uintptr_t address);
}  // namespace emu
