// A kernel that reads or writes outside its memory crashes the emulator with SIGSEGV, as
// it would fault on a GPU. Before the process dies, say which kernel, block and thread
// did it, and how to find the line.
#include <cxxabi.h>
#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "block.h"
#include "crash_report.h"

namespace emu {
namespace {

thread_local const void* tl_kernel = nullptr;

std::string kernel_name(const void* kernel) {
  Dl_info info;
  if (!kernel || !dladdr(kernel, &info) || !info.dli_sname) return "(unknown kernel)";
  int status = 0;
  char* pretty = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
  std::string name = status == 0 && pretty ? pretty : info.dli_sname;
  std::free(pretty);
  return name;
}

void on_fault(int sig, siginfo_t* info, void*) {
  std::fflush(stdout);  // keep what the program printed before the crash
  std::string msg = std::string("\nemulator: ") + (sig == SIGBUS ? "bus error" : "segmentation fault");
  char addr[64];
  std::snprintf(addr, sizeof addr, " at address %p", info->si_addr);
  msg += addr;
  if (Block* b = current_block()) {
    msg += "\n  in kernel " + kernel_name(tl_kernel) + ",\n  " + b->where() +
           ": an out-of-bounds access in kernel code (a bad index, a block table that lies,"
           " or a fiber stack overflow: then raise PA_EMU_STACK_KB).\n"
           "  To find the line: run the same test on a GPU under compute-sanitizer --tool"
           " memcheck, or here under gdb.\n";
  } else {
    msg += " (outside any kernel)\n";
  }
  ssize_t ignored = write(STDERR_FILENO, msg.data(), msg.size());
  (void)ignored;
  signal(sig, SIG_DFL);  // die with the same signal, so the exit status still says crash
  raise(sig);
}

}  // namespace

void set_current_kernel(const void* kernel) { tl_kernel = kernel; }

void install_crash_report() {
  // Each OS thread that runs blocks needs its own alternate signal stack: a fault on a
  // small fiber stack (or a stack overflow) cannot run the handler there.
  thread_local bool has_alt_stack = false;
  if (!has_alt_stack) {
    static thread_local char alt[64 * 1024];
    stack_t ss{};
    ss.ss_sp = alt;
    ss.ss_size = sizeof alt;
    sigaltstack(&ss, nullptr);
    has_alt_stack = true;
  }
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa{};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
  });
}

}  // namespace emu
