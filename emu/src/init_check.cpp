// Checked mode's initcheck: a read of shared memory that no thread of the block has
// written. Real shared memory starts as garbage in every block (the emulator's static
// __shared__ arrays would even keep the last block's values), so such a read is a bug
// that a test may never see.
//
// How: ThreadSanitizer's instrumentation calls __tsan_readN/__tsan_writeN before every
// load and store of kernel code. We define those functions here (a definition in the
// program wins over the one in libtsan), keep one "written" byte per byte of the block's
// shared memory, and then hand the access on to TSan's own function.
#include "init_check.h"

#if defined(PA_EMU_CHECK)
#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstring>
#include <set>
#include <vector>

#include "block.h"
#include "crash_report.h"
#include "memory_map.h"

namespace emu::initcheck {
namespace {

struct Region {  // shared memory of the block running on this worker, with its shadow
  uintptr_t lo = 0, hi = 0;
  std::vector<unsigned char> written;
  void reset(uintptr_t l, uintptr_t h) {
    lo = l;
    hi = h;
    written.assign(h - l, 0);
  }
  void mark(uintptr_t a, size_t n) {
    if (a >= lo && a < hi) std::memset(&written[a - lo], 1, std::min<size_t>(n, hi - a));
  }
};
thread_local bool tl_active = false;  // a block runs on this worker
thread_local Region tl_static;        // the worker's TLS: where static __shared__ lives
thread_local Region tl_dynamic;

struct Finding {
  void* pc;
  uintptr_t address;
  size_t bytes;
  bool dynamic;
  size_t offset;
  uint3 block, thread;
};
// Filled from kernel fibers without locks: a mutex would order the fibers for TSan and
// hide races. take_report() keeps the first finding of each source line.
constexpr int kMaxFindings = 64;
Finding g_findings[kMaxFindings];
std::atomic<int> g_count{0};

// The main program's TLS block on this thread: [thread pointer - size, thread pointer)
// on x86-64. Our __shared__ arrays are thread_local variables of the program.
void program_tls(uintptr_t* lo, uintptr_t* hi) {
  struct Seg {
    size_t memsz = 0, align = 1;
  } seg;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        for (int i = 0; i < info->dlpi_phnum; ++i)
          if (info->dlpi_phdr[i].p_type == PT_TLS) {
            static_cast<Seg*>(out)->memsz = info->dlpi_phdr[i].p_memsz;
            static_cast<Seg*>(out)->align = info->dlpi_phdr[i].p_align;
          }
        return 1;  // the first entry is the program itself
      },
      &seg);
  const uintptr_t tp = reinterpret_cast<uintptr_t>(__builtin_thread_pointer());
  const size_t size = (seg.memsz + seg.align - 1) / seg.align * seg.align;
  *lo = tp - size;
  *hi = tp;
}

void found(void* pc, uintptr_t a, size_t n, bool dynamic, const Region& r) {
  const int k = g_count.fetch_add(1, std::memory_order_relaxed);
  if (k < kMaxFindings) g_findings[k] = Finding{pc, a, n, dynamic, a - r.lo, blockIdx, threadIdx};
}

inline void on_read(void* pc, const void* p, size_t n) {
  if (!tl_active) return;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  for (Region* r : {&tl_dynamic, &tl_static}) {
    if (a < r->lo || a >= r->hi) continue;
    const size_t len = std::min<size_t>(n, r->hi - a);
    for (size_t i = 0; i < len; ++i)
      if (!r->written[a - r->lo + i]) return found(pc, a, n, r == &tl_dynamic, *r);
    return;
  }
}

inline void on_write(const void* p, size_t n) {
  if (!tl_active) return;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  tl_dynamic.mark(a, n);
  tl_static.mark(a, n);
}

template <typename F>
F real(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

}  // namespace

void begin_block(void* dynamic_shared, size_t bytes) {
  thread_local uintptr_t lo = 0, hi = 0;  // this worker's TLS does not move: look once
  if (!hi) program_tls(&lo, &hi);
  tl_static.reset(lo, hi);
  // The built-in variables are written by the emulator, which TSan does not see.
  for (const void* v : {static_cast<const void*>(&threadIdx), static_cast<const void*>(&blockIdx),
                        static_cast<const void*>(&blockDim), static_cast<const void*>(&gridDim)})
    tl_static.mark(reinterpret_cast<uintptr_t>(v), sizeof(dim3));
  const uintptr_t d = reinterpret_cast<uintptr_t>(dynamic_shared);
  tl_dynamic.reset(d, d + bytes);
  tl_active = true;
}

void end_block() { tl_active = false; }

std::string take_report(const void* kernel_address) {
  // Called after the launch, when the workers are idle. One report per source line.
  std::vector<std::pair<Finding, std::string>> findings;
  std::set<std::string> seen;
  const int count = std::min(g_count.exchange(0), kMaxFindings);
  std::vector<void*> pcs;
  for (int i = 0; i < count; ++i) pcs.push_back(static_cast<char*>(g_findings[i].pc) - 1);
  const std::vector<std::string> lines = source_lines(pcs);
  for (int i = 0; i < count; ++i) {
    std::string line = lines[i].empty() ? "  at (unknown line)" : lines[i];
    if (seen.insert(line).second) findings.emplace_back(g_findings[i], line);
  }
  std::string out;
  const std::string kernel = findings.empty() ? "" : kernel_name(kernel_address);
  for (size_t i = 0; i < findings.size() && i < 2; ++i) {
    const Finding& f = findings[i].first;
    const std::string& line = findings[i].second;
    char who[160];
    std::snprintf(who, sizeof who, "block (%u,%u,%u), thread (%u,%u,%u)", f.block.x, f.block.y,
                  f.block.z, f.thread.x, f.thread.y, f.thread.z);
    out += "emulator initcheck: read of " + std::to_string(f.bytes) + " bytes of " +
           (f.dynamic ? "dynamic shared memory (byte " + std::to_string(f.offset) + ")"
                      : std::string("__shared__ memory")) +
           " that no thread of this block has written\n  in kernel " + kernel + "\n" + line +
           "\n  by " + who +
           "\n  Shared memory starts as garbage in every block: write it, and __syncthreads()"
           " (or __syncwarp() within a warp), before any thread reads it.\n";
  }
  if (findings.size() > 2)
    out += "  (" + std::to_string(findings.size() - 2) + " more such reads in this launch)\n";
  return out;
}

}  // namespace emu::initcheck

// ---- The instrumentation entry points, wrapped ------------------------------------------
// Each wrapper ends in a tail call (a jump, at -O2), so that TSan's function, which takes
// the access's source line from its own return address, still sees the kernel's line.
namespace {
struct Next {
  void (*read[17])(void*) = {};
  void (*write[17])(void*) = {};
  void (*read_range)(void*, unsigned long) = nullptr;
  void (*write_range)(void*, unsigned long) = nullptr;
  Next() {  // nothing here may call instrumented code (std::string may be): it would recurse
    using emu::initcheck::real;
    using Fn = void (*)(void*);
    read[1] = real<Fn>("__tsan_read1"), write[1] = real<Fn>("__tsan_write1");
    read[2] = real<Fn>("__tsan_read2"), write[2] = real<Fn>("__tsan_write2");
    read[4] = real<Fn>("__tsan_read4"), write[4] = real<Fn>("__tsan_write4");
    read[8] = real<Fn>("__tsan_read8"), write[8] = real<Fn>("__tsan_write8");
    read[16] = real<Fn>("__tsan_read16"), write[16] = real<Fn>("__tsan_write16");
    read_range = real<void (*)(void*, unsigned long)>("__tsan_read_range");
    write_range = real<void (*)(void*, unsigned long)>("__tsan_write_range");
  }
};
const Next& next() {  // a function-local static: instrumented start-up code may come first
  static const Next n;
  return n;
}
}  // namespace

#define PA_WRAP_ACCESS(n)                                                \
  extern "C" void __tsan_read##n(void* p) {                              \
    emu::initcheck::on_read(__builtin_return_address(0), p, n);          \
    return next().read[n](p);                                       \
  }                                                                      \
  extern "C" void __tsan_write##n(void* p) {                             \
    emu::initcheck::on_write(p, n);                                      \
    return next().write[n](p);                                      \
  }
PA_WRAP_ACCESS(1)
PA_WRAP_ACCESS(2)
PA_WRAP_ACCESS(4)
PA_WRAP_ACCESS(8)
PA_WRAP_ACCESS(16)
#undef PA_WRAP_ACCESS

extern "C" void __tsan_read_range(void* p, unsigned long n) {
  emu::initcheck::on_read(__builtin_return_address(0), p, n);
  return next().read_range(p, n);
}
extern "C" void __tsan_write_range(void* p, unsigned long n) {
  emu::initcheck::on_write(p, n);
  return next().write_range(p, n);
}

#else  // plain build: nothing to check

namespace emu::initcheck {
void begin_block(void*, size_t) {}
void end_block() {}
std::string take_report(const void*) { return ""; }
}  // namespace emu::initcheck

#endif
