// Naming the kernel, block and thread when a kernel crashes the emulator.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace emu {
// Installs the SIGSEGV/SIGBUS report (once per process) and this thread's alternate stack.
void install_crash_report();
// The kernel this OS thread is running, for the report.
void set_current_kernel(const void* kernel);
// Checked mode: the memcheck report of a kernel thread's fault (`who`: block and thread).
std::string fault_report(int sig, uintptr_t address, void* pc, const std::string& who,
                         bool stack_overflow);
// The checked-mode command that runs the test program running now, from its name
// ("make check-solution-11"); "" if it is not a chapter's test program.
std::string check_command();
// The demangled name of a kernel, from its address.
std::string kernel_name(const void* kernel);
// "  at file:line (in function)" for a code address, with the inlined-into chain; "" if
// the binary has no line table for it.
std::string source_line(void* pc);
std::vector<std::string> source_lines(const std::vector<void*>& pcs);  // one addr2line run
// A path as the student knows it: from solutions/, chapters/, tests/, include/ or emu/ on.
std::string course_path(const std::string& path);
// A demangled signature cut to the function's name: "void ns::k<float>(int)" -> "ns::k<float>".
std::string function_name(std::string signature);
}  // namespace emu
