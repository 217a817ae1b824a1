// Naming the kernel, block and thread when a kernel crashes the emulator.
#pragma once

namespace emu {
// Installs the SIGSEGV/SIGBUS report (once per process) and this thread's alternate stack.
void install_crash_report();
// The kernel this OS thread is running, for the report.
void set_current_kernel(const void* kernel);
}  // namespace emu
