// A kernel that reads or writes outside its memory faults (SIGSEGV), as it would on a GPU.
// Checked mode (guard pages after every buffer) catches the access before it happens: the
// faulting CUDA thread is taken off its fiber, and the launch fails with a memcheck report
// (kernel, block, thread, buffer, line), as compute-sanitizer's memcheck would; the
// program, and the next test, go on. Plain mode has no guard pages: a write just outside a
// buffer (within its 4 KiB redzones, memory_map.cpp) fails its launch when the launch ends;
// an access farther away faults at once (the process dies, saying which kernel, block and
// thread it was in, and which command runs the same tests in checked mode) or, landing in
// other memory, corrupts it silently and a fault comes long after.
#include <cxxabi.h>
#include <dlfcn.h>
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
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
#include "race_check.h"

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

std::atomic<bool> g_dying{false};
char g_check_command[128] = "make check-chapter-N (N: the chapter whose tests crashed)";

// Checked mode: a faulting kernel thread leaves its fiber for this stack (one per worker),
// where the signal handler sends it; a fault on the fiber's own stack (an overflow) could
// not run anything there.
constexpr size_t kLandingBytes = 256 * 1024;
thread_local char* tl_landing = nullptr;

[[noreturn]] void land_after_fault(int sig, void* address, void* pc) {
  current_block()->abandon_after_fault(sig, reinterpret_cast<uintptr_t>(address), pc);
}

// The checked-mode command for the test program running now, from its name
// (test_ch02_solution -> make check-solution-2); the general form if it is not a chapter's.
bool g_chapter_known = false;
void find_check_command_once() {
  char exe[512];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return;
  exe[n] = '\0';
  const char* name = std::strrchr(exe, '/');
  name = name ? name + 1 : exe;
  int chapter = 0;
  char flavor[16] = {};
  if (std::sscanf(name, "test_ch%d_%15s", &chapter, flavor) != 2 || chapter <= 0) return;
  std::snprintf(g_check_command, sizeof g_check_command, "make check-%s-%d",
                std::strcmp(flavor, "solution") == 0 ? "solution" : "chapter", chapter);
  g_chapter_known = true;
}
void find_check_command() {
  static std::once_flag once;
  std::call_once(once, find_check_command_once);
}

void on_fault(int sig, siginfo_t* info, void* context) {
  ucontext_t* uc = static_cast<ucontext_t*>(context);
  Block* b = current_block();
#if defined(PA_EMU_CHECK) && defined(__x86_64__)
  if (b && b->in_kernel_thread() && tl_landing) {
    // The access faulted, so it did not happen: leave the kernel thread's fiber for the
    // landing stack, where it fails its block (Block::abandon_after_fault). The launch
    // returns the memcheck report as its error, and the program goes on.
    greg_t* g = uc->uc_mcontext.gregs;
    uintptr_t top = (reinterpret_cast<uintptr_t>(tl_landing) + kLandingBytes) & ~uintptr_t(15);
    top -= 8;  // as if called: a (null) return address, then the 16-byte aligned frame
    *reinterpret_cast<uintptr_t*>(top) = 0;
    g[REG_RDI] = sig;
    g[REG_RSI] = reinterpret_cast<greg_t>(info->si_addr);
    g[REG_RDX] = g[REG_RIP];
    g[REG_RSP] = static_cast<greg_t>(top);
    g[REG_RBP] = 0;
    g[REG_RIP] = reinterpret_cast<greg_t>(&land_after_fault);
    return;
  }
#endif
  // The process dies. If several workers fault at once, one of them reports.
  if (g_dying.exchange(true)) {
    for (;;) pause();
  }
  std::fflush(stdout);  // keep what the program printed before the crash
  std::string msg = std::string("\nemulator: ") + (sig == SIGBUS ? "bus error" : "segmentation fault");
  char addr[64];
  std::snprintf(addr, sizeof addr, " at address %p", info->si_addr);
  msg += addr;
  const bool checked = race::kEnabled;
  if (b) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(info->si_addr);
    const std::string missed = describe_fault(a);
    void* pc = reinterpret_cast<void*>(uc->uc_mcontext.gregs[REG_RIP]);
    const std::string line = source_line(pc);
    if (!missed.empty()) msg = "\nemulator memcheck: out-of-bounds access to " + missed;
    msg += "\n  in kernel " + kernel_name(tl_kernel) + ",\n  by " + b->where() + "\n";
    msg += line.empty() ? "  (source line unknown: build with -g, or run under gdb)\n"
                        : line + "\n";
    if (b->is_stack_guard(a))
      msg += "  A fiber stack overflow: a CUDA thread's stack is PA_EMU_STACK_KB (256 KB by "
             "default) on the emulator; raise it, or make large local arrays smaller.\n";
    else if (missed.empty())
      msg += "  An out-of-bounds access in kernel code (a bad index, a block table that lies,"
             " or a fiber stack overflow: then raise PA_EMU_STACK_KB).\n";
    if (!checked && !b->is_stack_guard(a))
      msg += "  The plain emulator fails a launch that writes just outside a buffer (within " +
             std::to_string(kRedzoneBytes / 1024) +
             " KiB\n  of its ends) when the launch ends, naming the buffer: this access went "
             "farther.\n";
    if (!checked)
      msg += std::string("  Checked mode names the buffer, how far past its end, and the line: ") +
             g_check_command + "\n";
  } else {
    static_assert(kRedzoneBytes == 4096, "the text below says 4 KiB");
    msg += " (outside any kernel)\n";
    if (!checked)
      msg += std::string(
                 "  Either host code crashed, or a kernel that ran earlier wrote out of bounds:\n"
                 "  the plain emulator catches a write just outside a buffer (within 4 KiB of\n"
                 "  its ends) when the launch ends, but a write farther away corrupts memory\n"
                 "  silently and the crash comes later, here. Checked mode stops a kernel at the\n"
                 "  access and names it: ") +
             g_check_command + "\n";
  }
  ssize_t ignored = write(STDERR_FILENO, msg.data(), msg.size());
  (void)ignored;
  signal(sig, SIG_DFL);  // die with the same signal, so the exit status still says crash
  raise(sig);
}

}  // namespace

std::string fault_report(int sig, uintptr_t address, void* pc, const std::string& who,
                         bool stack_overflow) {
  const std::string missed = describe_fault(address);
  const std::string line = source_line(pc);
  std::string msg;
  char what[96];
  if (!missed.empty()) {
    msg = "emulator memcheck: out-of-bounds access to " + missed;
  } else if (stack_overflow) {
    msg = "emulator memcheck: fiber stack overflow";
  } else {
    std::snprintf(what, sizeof what, "emulator memcheck: %s at address %p (in no buffer)",
                  sig == SIGBUS ? "bus error" : "invalid access", reinterpret_cast<void*>(address));
    msg = what;
  }
  msg += "\n  in kernel " + kernel_name(tl_kernel) + ",\n  by " + who + "\n";
  msg += line.empty() ? "  (source line unknown: build with -g, or run under gdb)\n" : line + "\n";
  if (stack_overflow)
    msg += "  A CUDA thread's stack is PA_EMU_STACK_KB (256 KB by default) on the emulator: "
           "raise it, or make large local arrays smaller.\n";
  else if (missed.empty())
    msg += "  An address outside every buffer: a bad index or pointer (a block table that "
           "lies, an offset computed in 32 bits that overflowed, a null pointer).\n";
  msg += "  The access did not happen: this launch fails, and the program goes on.\n";
  return msg;
}

void set_current_kernel(const void* kernel) { tl_kernel = kernel; }

std::string check_command() {
  find_check_command();
  return g_chapter_known ? g_check_command : "";
}

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
    if (race::kEnabled) {
      void* p = mmap(nullptr, kLandingBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p != MAP_FAILED) tl_landing = static_cast<char*>(p);
    }
  }
  static std::once_flag once;
  std::call_once(once, [] {
    find_check_command();
    struct sigaction sa{};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
  });
}

}  // namespace emu
