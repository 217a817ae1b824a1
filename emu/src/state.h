// Error state shared by the emulator's launch and runtime API.
#pragma once
#include <cstddef>
#include <string>

#include <cuda_runtime.h>

namespace emu {
constexpr size_t kDefaultSmemLimit = 48 * 1024;  // dynamic shared memory without opt-in
constexpr size_t kOptInSmemLimit = 227 * 1024;   // Hopper's opt-in maximum per block
// Records `code` with a message for cudaGetLastError / cudaGetErrorString; returns code.
cudaError_t set_error(cudaError_t code, const std::string& message);
void set_max_dynamic_smem(const void* kernel, size_t bytes);
}  // namespace emu
