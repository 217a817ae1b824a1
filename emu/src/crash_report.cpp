// A kernel that reads or writes outside its memory crashes the emulator with SIGSEGV, as
// it would fault on a GPU. Before the process dies, say which kernel, block and thread
// did it, and how to find the line.
#include <cxxabi.h>
#include <dlfcn.h>
#include <signal.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "block.h"
#include "crash_report.h"
#include "memory_map.h"

namespace emu {
namespace {

thread_local const void* tl_kernel = nullptr;

}  // namespace

std::string kernel_name(const void* kernel) {
  Dl_info info;
  if (kernel && dladdr(kernel, &info) && !info.dli_sname) {
    // Not exported (a kernel in an anonymous namespace): ask the line table.
    const std::string line = source_line(const_cast<void*>(kernel));
    const size_t at = line.rfind("(in ");
    if (at != std::string::npos) return line.substr(at + 4, line.size() - at - 5);
  }
  if (!kernel || !dladdr(kernel, &info) || !info.dli_sname) return "(unknown kernel)";
  int status = 0;
  char* pretty = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
  std::string name = status == 0 && pretty ? pretty : info.dli_sname;
  std::free(pretty);
  return function_name(name);
}

std::string course_path(const std::string& path) {
  for (const char* root : {"/solutions/", "/chapters/", "/tests/", "/include/", "/emu/"}) {
    const size_t at = path.rfind(root);
    if (at != std::string::npos) return path.substr(at + 1);
  }
  return path;
}

// "void (anonymous namespace)::k<false>(float*)" -> "k<false>"
std::string function_name(std::string s) {
  const std::string anon = "(anonymous namespace)::";
  for (size_t at; (at = s.find(anon)) != std::string::npos;) s.erase(at, anon.size());
  int depth = 0;  // cut the parameter list: the first '(' outside template arguments
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') ++depth;
    if (s[i] == '>') --depth;
    if (s[i] == '(' && depth == 0) { s.resize(i); break; }
  }
  depth = 0;  // drop a return type: the last space outside template arguments
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] == '>') ++depth;
    if (s[i] == '<') --depth;
    if (s[i] == ' ' && depth == 0) return s.substr(i + 1);
  }
  return s;
}

namespace {
std::vector<std::string> ask_addr2line(const std::vector<void*>& pcs);
}  // namespace

// From the binary's line table, by asking addr2line (binutils, installed with g++): one
// call for all the addresses not asked before, as each call reads the whole line table.
std::vector<std::string> source_lines(const std::vector<void*>& pcs) {
  static std::mutex mutex;
  static std::map<void*, std::string> known;
  std::lock_guard<std::mutex> lock(mutex);
  std::vector<void*> ask;
  for (void* pc : pcs)
    if (!known.count(pc)) ask.push_back(pc);
  if (!ask.empty()) {
    const std::vector<std::string> lines = ask_addr2line(ask);
    for (size_t i = 0; i < ask.size(); ++i) known[ask[i]] = lines[i];
  }
  std::vector<std::string> out;
  for (void* pc : pcs) out.push_back(known[pc]);
  return out;
}

namespace {
std::vector<std::string> ask_addr2line(const std::vector<void*>& pcs) {
  std::vector<std::string> out(pcs.size());
  Dl_info info;
  if (pcs.empty() || !dladdr(pcs[0], &info) || !info.dli_fname) return out;
  std::string cmd = std::string("addr2line -a -i -f -C -e '") +
                    (info.dli_fname[0] ? info.dli_fname : "/proc/self/exe") + "'";
  for (void* pc : pcs) {
    char buf[32];
    std::snprintf(buf, sizeof buf, " %#lx",
                  static_cast<unsigned long>(static_cast<char*>(pc) -
                                             static_cast<char*>(info.dli_fbase)));
    cmd += buf;
  }
  FILE* p = popen((cmd + " 2>/dev/null").c_str(), "r");
  if (!p) return out;
  int k = -1, i = 0;
  std::string fn;
  char buf[2048];
  while (std::fgets(buf, sizeof buf, p)) {
    std::string l(buf);
    if (!l.empty() && l.back() == '\n') l.pop_back();
    if (l.rfind("0x", 0) == 0) {  // -a: each address starts its group
      ++k;
      i = 0;
      continue;
    }
    if (k < 0 || k >= int(out.size())) continue;
    if (i++ % 2 == 0) {
      fn = function_name(l);
      continue;
    }
    if (l.rfind("??", 0) == 0) continue;
    l = course_path(l);
    if (const size_t d = l.find(" (discriminator"); d != std::string::npos) l.resize(d);
    out[k] += (out[k].empty() ? "  at " : "\n     inlined into ") + l + " (in " + fn + ")";
  }
  pclose(p);
  return out;
}
}  // namespace

std::string source_line(void* pc) { return source_lines({pc})[0]; }

namespace {

void on_fault(int sig, siginfo_t* info, void* context) {
  std::fflush(stdout);  // keep what the program printed before the crash
  std::string msg = std::string("\nemulator: ") + (sig == SIGBUS ? "bus error" : "segmentation fault");
  char addr[64];
  std::snprintf(addr, sizeof addr, " at address %p", info->si_addr);
  msg += addr;
  if (Block* b = current_block()) {
    const std::string missed = describe_fault(reinterpret_cast<uintptr_t>(info->si_addr));
    void* pc = reinterpret_cast<void*>(
        static_cast<ucontext_t*>(context)->uc_mcontext.gregs[REG_RIP]);
    const std::string line = source_line(pc);
    if (!missed.empty()) msg = "\nemulator memcheck: out-of-bounds access to " + missed;
    msg += "\n  in kernel " + kernel_name(tl_kernel) + ",\n  by " + b->where() + "\n";
    msg += line.empty() ? "  (source line unknown: build with -g, or run under gdb)\n"
                        : line + "\n";
    if (missed.empty())
      msg += "  An out-of-bounds access in kernel code (a bad index, a block table that lies,"
             " or a fiber stack overflow: then raise PA_EMU_STACK_KB).\n";
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
