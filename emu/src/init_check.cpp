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
#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <link.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <vector>

#include "block.h"
#include "crash_report.h"
#include "memory_map.h"

namespace emu::initcheck {
namespace {

struct Region {  // shared memory of the block running on this worker, with its shadows
  uintptr_t lo = 0, hi = 0;
  std::vector<unsigned char> written;
  // cp.async: per 16-byte chunk (by absolute address, as copies are 16-byte aligned), the
  // thread + 1 whose copy into it is in flight, or 0. Sized at the block's first copy.
  std::vector<uint16_t> flight;
  int flying = 0;
  // Dynamic shared memory only: per 16-byte chunk, the thread (+ 1) that last wrote it with
  // an ordinary store, its fence.proxy.async count then, and the store's code address, so
  // that a bulk store (the async proxy) reading it can tell whether the writer fenced.
  bool track_writers = false;
  std::vector<uint16_t> writer;
  std::vector<uint32_t> writer_fences;
  std::vector<void*> writer_pc;
  void reset(uintptr_t l, uintptr_t h, bool writers = false) {
    lo = l;
    hi = h;
    written.assign(h - l, 0);
    flight.clear();
    flying = 0;
    track_writers = writers;
    if (writers) {
      const size_t chunks = ((h + 15) >> 4) - (l >> 4);
      writer.assign(chunks, 0);
      writer_fences.assign(chunks, 0);
      writer_pc.assign(chunks, nullptr);
    }
  }
  void mark(uintptr_t a, size_t n) {
    if (a >= lo && a < hi) std::memset(&written[a - lo], 1, std::min<size_t>(n, hi - a));
  }
  size_t chunk(uintptr_t a) const { return (a >> 4) - (lo >> 4); }
  // The thread (+ 1) whose copy in flight covers some byte of [a, a + n), or 0.
  int in_flight(uintptr_t a, size_t n) const {
    if (!flying) return 0;
    const uintptr_t end = std::min<uintptr_t>(a + n, hi);
    for (uintptr_t c = a; c < end; c = (c | 15) + 1)
      if (flight[chunk(c)]) return flight[chunk(c)];
    return 0;
  }
};
thread_local bool tl_active = false;  // a block runs on this worker
thread_local Region tl_static;        // the worker's TLS: where static __shared__ lives
thread_local Region tl_dynamic;
// Checked mode's dynamic shared memory is 1,024-byte aligned, so its guard page may start a
// little after its end: an access in between faults here, as it would on the guard page.
thread_local uintptr_t tl_slack_end = 0;
[[noreturn]] void fault_in_slack(void* pc, uintptr_t a) {
  emu::current_block()->abandon_after_fault(SIGSEGV, a, static_cast<char*>(pc) - 1);
}

// A piece of shared memory with a name: an array a kernel named with PA_SHARED_REGION
// (its elements and shape known), or a static __shared__ array found in the program's
// symbol table (its name and size only).
struct Span {
  uintptr_t lo = 0, hi = 0;
  const char* name = nullptr;  // nullptr: unnamed dynamic shared memory
  size_t elem = 0;             // element bytes; 0: unknown
  size_t dims[3] = {};
  int rank = 0;
};
thread_local std::vector<Span> tl_named;  // registered in the block running on this worker

// Static __shared__ arrays are thread_local variables of the program: their offsets in its
// TLS block and their names, from the ELF symbol table (read once).
struct TlsSymbol {
  uintptr_t offset;
  size_t size;
  std::string name;
};
std::vector<TlsSymbol> g_tls_symbols;  // sorted by offset
uintptr_t g_threadidx_offset = 0;
bool g_have_symbols = false;
thread_local uintptr_t tl_tls_base = 0;  // where this worker's copy of offset 0 is

std::string short_name(const char* mangled) {
  int status = 0;
  char* pretty = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && pretty ? pretty : mangled;
  std::free(pretty);
  const size_t colons = name.rfind("::");  // "void k<false>(float*)::partial" -> "partial"
  return colons == std::string::npos ? name : name.substr(colons + 2);
}

void load_tls_symbols() {
  std::ifstream in("/proc/self/exe", std::ios::binary);
  const std::string elf((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (elf.size() < sizeof(Elf64_Ehdr) || elf.compare(0, 4, ELFMAG) != 0) return;
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(elf.data());
  if (eh->e_shoff + size_t(eh->e_shnum) * sizeof(Elf64_Shdr) > elf.size()) return;
  const auto* sh = reinterpret_cast<const Elf64_Shdr*>(elf.data() + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; ++i) {
    if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum) continue;
    const Elf64_Shdr& strtab = sh[sh[i].sh_link];
    if (sh[i].sh_offset + sh[i].sh_size > elf.size() || strtab.sh_offset + strtab.sh_size > elf.size())
      return;
    const auto* sym = reinterpret_cast<const Elf64_Sym*>(elf.data() + sh[i].sh_offset);
    const size_t n = sh[i].sh_size / sizeof(Elf64_Sym);
    for (size_t k = 0; k < n; ++k) {
      if (ELF64_ST_TYPE(sym[k].st_info) != STT_TLS || sym[k].st_name >= strtab.sh_size) continue;
      const char* name = elf.data() + strtab.sh_offset + sym[k].st_name;
      if (std::strcmp(name, "threadIdx") == 0) {
        g_threadidx_offset = sym[k].st_value;
        g_have_symbols = true;
      }
      if (sym[k].st_size > 0) g_tls_symbols.push_back({sym[k].st_value, sym[k].st_size, short_name(name)});
    }
  }
  std::sort(g_tls_symbols.begin(), g_tls_symbols.end(),
            [](const TlsSymbol& a, const TlsSymbol& b) { return a.offset < b.offset; });
}

enum class Kind { Unwritten, InFlight, AsyncRead, AsyncWrite, AccRead, AccWrite };
// Hopper's bulk copies of the block running on this worker (flight values 0x8000 | index).
constexpr uint16_t kAsyncFlag = 0x8000;
thread_local std::vector<AsyncCopy> tl_async;
// wgmma accumulators in flight, per thread of the running block (wgmma.cpp), and how many.
struct AccWatch {
  uintptr_t lo, hi;
  AccInFlight info;
};
thread_local std::vector<std::vector<AccWatch>> tl_acc;
thread_local int tl_acc_count = 0;

struct Finding {
  Kind kind;
  void* pc;
  uintptr_t address;
  size_t bytes;
  bool dynamic;
  size_t offset;  // in the block's dynamic shared memory
  uint3 block, thread;
  Span span;                        // the named array (or the whole buffer) read from
  uintptr_t gap_lo = 0, gap_hi = 0;  // the not-yet-written run of it around the read
  bool span_written = false;         // some byte of the span was written before the read
  bool written_later = false;        // the bytes read were written after it, in the block
  // Kind::InFlight: the copy, the thread that issued it, and that thread's state then.
  emu::InFlightCopy copy{};
  uint3 issuer{};
  bool issuer_is_reader = false;
  emu::CopyWait wait{};
  int committed = 0;
  // Kind::AsyncRead / AsyncWrite: the bulk copy whose bytes were read too early (a load's
  // destination) or written too early (a store's source, a wgmma's operand).
  AsyncCopy async{};
  // Kind::AccRead / AccWrite: the wgmma that owns the registers, which of them (d[acc_index]),
  // and the thread's wgmma groups committed and its last wait then.
  AccInFlight acc{};
  int acc_index = 0, acc_committed = 0;
  const char* wait_file = nullptr;
  int wait_line = 0, wait_n = 0, wait_committed = 0;
};
// Filled from kernel fibers without locks: a mutex would order the fibers for TSan and
// hide races. take_report() keeps the first finding of each source line.
constexpr int kMaxFindings = 64;
Finding g_findings[kMaxFindings];
std::atomic<int> g_count{0};
thread_local std::vector<int> tl_mine;  // the findings of the block running on this worker

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

// The named array that holds address a, else the region itself.
Span span_of(uintptr_t a, const Region& r, bool dynamic) {
  for (const Span& s : tl_named)
    if (a >= s.lo && a < s.hi) return s;
  Span s;
  s.lo = r.lo;
  s.hi = r.hi;
  if (!dynamic && g_have_symbols) {
    const uintptr_t off = a - tl_tls_base;
    auto it = std::upper_bound(g_tls_symbols.begin(), g_tls_symbols.end(), off,
                               [](uintptr_t o, const TlsSymbol& t) { return o < t.offset; });
    if (it != g_tls_symbols.begin() && off < (--it)->offset + it->size) {
      s.lo = tl_tls_base + it->offset;
      s.hi = s.lo + it->size;
      s.name = it->name.c_str();
    }
  }
  return s;
}

void found(void* pc, uintptr_t a, size_t n, bool dynamic, const Region& r) {
  const int k = g_count.fetch_add(1, std::memory_order_relaxed);
  if (k >= kMaxFindings) return;
  Finding f{Kind::Unwritten, pc, a, n, dynamic, a - r.lo, blockIdx, threadIdx};
  f.span = span_of(a, r, dynamic);
  // The run of never-written bytes around the read, inside its array: what the kernel
  // should have written (a loop bound, a branch, a warp that skipped its part).
  const uintptr_t lo = std::max(f.span.lo, r.lo), hi = std::min(f.span.hi, r.hi);
  uintptr_t g = a;
  while (g > lo && !r.written[g - 1 - r.lo]) --g;
  f.gap_lo = g;
  g = a;
  while (g < hi && !r.written[g - r.lo]) ++g;
  f.gap_hi = g;
  for (uintptr_t b = lo; b < hi && !f.span_written; ++b) f.span_written = r.written[b - r.lo];
  g_findings[k] = f;
  if (tl_mine.size() < tl_mine.capacity()) tl_mine.push_back(k);  // never allocates here
}

// A read of bytes that a cp.async copy has not landed in yet.
void found_in_flight(void* pc, uintptr_t a, size_t n, bool dynamic, const Region& r, int thread) {
  const emu::Block* b = emu::current_block();
  const emu::AsyncCopies& copies = b->copies_of(thread);
  const emu::InFlightCopy* c = nullptr;
  for (uintptr_t x = a; !c && x < a + n; x = (x | 15) + 1) c = copies.find(x);
  if (!c) return;
  const int k = g_count.fetch_add(1, std::memory_order_relaxed);
  if (k >= kMaxFindings) return;
  Finding f{Kind::InFlight, pc, a, n, dynamic, a - r.lo, blockIdx, threadIdx};
  f.span = span_of(a, r, dynamic);
  f.copy = *c;
  f.issuer = b->thread_idx(thread);
  f.issuer_is_reader = thread == b->thread_index();
  f.wait = copies.last_wait();
  f.committed = copies.committed();
  g_findings[k] = f;
}

// A read of a bulk load's destination before its phase completed, or a write of a bulk
// store's source before its wait_group.read: the first such chunk of [a, a + n).
bool found_async(void* pc, uintptr_t a, size_t n, const Region& r, bool write) {
  const uintptr_t end = std::min<uintptr_t>(a + n, r.hi);
  for (uintptr_t c = a; c < end; c = (c | 15) + 1) {
    const uint16_t v = r.flight[r.chunk(c)];
    if (!(v & kAsyncFlag) || (v & ~kAsyncFlag) >= tl_async.size()) continue;
    const AsyncCopy& copy = tl_async[v & ~kAsyncFlag];
    const bool store = copy.kind == AsyncKind::TensorStore || copy.kind == AsyncKind::BulkStore ||
                       copy.kind == AsyncKind::WgmmaRead;
    if (store != write) continue;
    const int k = g_count.fetch_add(1, std::memory_order_relaxed);
    if (k >= kMaxFindings) return true;
    Finding f{write ? Kind::AsyncWrite : Kind::AsyncRead, pc, a, n, true, a - r.lo, blockIdx,
              threadIdx};
    f.span = span_of(a, r, true);
    f.async = copy;
    g_findings[k] = f;
    return true;
  }
  return false;
}

// An ordinary access of registers that an in-flight wgmma owns.
bool found_acc(void* pc, uintptr_t a, size_t n, bool write) {
  const emu::Block* b = emu::current_block();
  if (!b || b->thread_index() < 0 || size_t(b->thread_index()) >= tl_acc.size()) return false;
  const int t = b->thread_index();
  for (const AccWatch& w : tl_acc[size_t(t)]) {
    if (a >= w.hi || a + n <= w.lo) continue;
    const int k = g_count.fetch_add(1, std::memory_order_relaxed);
    if (k >= kMaxFindings) return true;
    Finding f{write ? Kind::AccWrite : Kind::AccRead, pc, a, n, false, 0, blockIdx, threadIdx};
    f.acc = w.info;
    f.acc_index = int((std::max(a, w.lo) - w.lo) / 4);
    const emu::ThreadHopper& th = const_cast<emu::Block*>(b)->hopper().threads[size_t(t)];
    f.acc_committed = th.wg_committed;
    f.wait_file = th.wg_wait.file;
    f.wait_line = th.wg_wait.line;
    f.wait_n = th.wg_wait_n;
    f.wait_committed = th.wg_wait_committed;
    g_findings[k] = f;
    return true;
  }
  return false;
}

inline void on_read(void* pc, const void* p, size_t n) {
  if (!tl_active) return;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (tl_acc_count && found_acc(pc, a, n, false)) return;
  if (a + n > tl_dynamic.hi && a < tl_slack_end && emu::current_block()->in_kernel_thread())
    fault_in_slack(pc, std::max(a, tl_dynamic.hi));
  for (Region* r : {&tl_dynamic, &tl_static}) {
    if (a < r->lo || a >= r->hi) continue;
    if (const int t = r->in_flight(a, n)) {
      if (!(t & kAsyncFlag)) return found_in_flight(pc, a, n, r == &tl_dynamic, *r, t - 1);
      if (found_async(pc, a, n, *r, false)) return;
    }
    const size_t len = std::min<size_t>(n, r->hi - a);
    for (size_t i = 0; i < len; ++i)
      if (!r->written[a - r->lo + i]) return found(pc, a, n, r == &tl_dynamic, *r);
    return;
  }
}

inline void on_write(void* pc, const void* p, size_t n) {
  if (!tl_active) return;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (tl_acc_count && found_acc(pc, a, n, true)) return;
  if (a + n > tl_dynamic.hi && a < tl_slack_end && emu::current_block()->in_kernel_thread())
    fault_in_slack(pc, std::max(a, tl_dynamic.hi));
  tl_dynamic.mark(a, n);
  tl_static.mark(a, n);
  Region& r = tl_dynamic;
  if (a < r.lo || a >= r.hi) return;
  if (r.flying && r.in_flight(a, n) & kAsyncFlag) found_async(pc, a, n, r, true);
  if (r.track_writers) {
    const emu::Block* b = emu::current_block();
    if (!b || b->thread_index() < 0) return;
    const int t = b->thread_index();
    const unsigned fences = b->fences_of(t);
    const uintptr_t end = std::min<uintptr_t>(a + n, r.hi);
    for (uintptr_t c = a; c < end; c = (c | 15) + 1) {
      const size_t i = r.chunk(c);
      r.writer[i] = uint16_t(t + 1);
      r.writer_fences[i] = fences;
      r.writer_pc[i] = pc;
    }
  }
}

template <typename F>
F real(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

}  // namespace

void begin_block(void* dynamic_shared, size_t bytes, size_t slack) {
  thread_local uintptr_t lo = 0, hi = 0;  // this worker's TLS does not move: look once
  if (!hi) {
    program_tls(&lo, &hi);
    static std::once_flag once;
    std::call_once(once, load_tls_symbols);
    tl_tls_base = reinterpret_cast<uintptr_t>(&threadIdx) - g_threadidx_offset;
  }
  tl_named.clear();
  tl_mine.clear();
  tl_mine.reserve(kMaxFindings);
  tl_static.reset(lo, hi);
  // The built-in variables are written by the emulator, which TSan does not see.
  for (const void* v : {static_cast<const void*>(&threadIdx), static_cast<const void*>(&blockIdx),
                        static_cast<const void*>(&blockDim), static_cast<const void*>(&gridDim)})
    tl_static.mark(reinterpret_cast<uintptr_t>(v), sizeof(dim3));
  const uintptr_t d = reinterpret_cast<uintptr_t>(dynamic_shared);
  tl_dynamic.reset(d, d + bytes, true);
  tl_async.clear();
  tl_acc.clear();
  tl_acc_count = 0;
  tl_slack_end = d + bytes + slack;
  tl_active = true;
}

void end_block() {
  // Was what each read found unwritten written later in the block? Then the read came
  // before the write (a missing barrier), rather than no thread writing it at all.
  for (int k : tl_mine) {
    Finding& f = g_findings[k];
    if (f.kind != Kind::Unwritten) continue;
    const Region& r = f.dynamic ? tl_dynamic : tl_static;
    bool all = f.address >= r.lo && f.address + f.bytes <= r.hi;
    for (size_t i = 0; all && i < f.bytes; ++i) all = r.written[f.address + i - r.lo];
    f.written_later = all;
  }
  tl_mine.clear();
  tl_active = false;
}

namespace {
// "q_s[72]", "p_s[1][3]" for a registered array; "s_m, bytes 4-7 of its 16" for a static
// one known by name only; "byte 288 of 1024" for unnamed dynamic shared memory.
std::string element(const Span& s, uintptr_t a) {
  if (s.name && s.elem) {
    size_t i = (a - s.lo) / s.elem;
    std::string idx;
    for (int d = s.rank - 1; d >= 0; --d) {
      const size_t extent = s.dims[d] ? s.dims[d] : 1;
      idx = "[" + std::to_string(d == 0 ? i : i % extent) + "]" + idx;
      i /= extent;
    }
    return s.name + (s.rank ? idx : "[" + std::to_string((a - s.lo) / s.elem) + "]");
  }
  return "";
}

std::string where_in(const Span& s, uintptr_t a, size_t n) {
  if (s.name && s.elem) return element(s, a);
  const std::string bytes = n > 1 ? "bytes " + std::to_string(a - s.lo) + "-" +
                                        std::to_string(a - s.lo + n - 1)
                                  : "byte " + std::to_string(a - s.lo);
  if (s.name) return std::string(s.name) + ", " + bytes + " of its " + std::to_string(s.hi - s.lo);
  return bytes + " of " + std::to_string(s.hi - s.lo);
}

std::string unwritten(const Finding& f, bool later) {
  const Span& s = f.span;
  const std::string whole =
      s.name ? std::string(s.name) + (s.elem ? " (" + std::to_string((s.hi - s.lo) / s.elem) +
                                                   " elements)"
                                             : " (" + std::to_string(s.hi - s.lo) + " bytes)")
             : "the block's dynamic shared memory (" + std::to_string(s.hi - s.lo) + " bytes)";
  if (!f.span_written)
    return later ? "no thread of this block had written any of " + whole + " yet"
                 : "no thread of this block wrote any of " + whole;
  std::string run;
  if (s.name && s.elem) {
    const std::string first = element(s, f.gap_lo), last = element(s, f.gap_hi - 1);
    run = first == last ? first : first + " to " + last;
  } else {
    run = (s.name ? std::string(s.name) + " " : std::string()) + "bytes " +
          std::to_string(f.gap_lo - s.lo) + "-" + std::to_string(f.gap_hi - s.lo - 1);
  }
  return run + " (the rest of " + whole + (later ? " had been written)" : " was written)");
}

const std::string in_flight_tag = "in flight|";

std::string place(const char* file, int line) {
  return course_path(file ? file : "?") + ":" + std::to_string(line);
}

std::string groups(int first, int last) {
  return first == last ? "group " + std::to_string(first)
                       : "groups " + std::to_string(first) + "-" + std::to_string(last);
}

// A read of bytes whose cp.async copy has not landed: the read, the copy (its issue, its
// group, the commit), and the issuing thread's last wait, which should have covered it.
std::string in_flight_report(const Finding& f, const std::string& what, const std::string& kernel,
                             const std::string& line, const char* who) {
  const emu::InFlightCopy& c = f.copy;
  char issuer[80];
  std::snprintf(issuer, sizeof issuer, "thread (%u,%u,%u)", f.issuer.x, f.issuer.y, f.issuer.z);
  std::string out = "emulator cp.async check: read of " + std::to_string(f.bytes) + " bytes of " +
                    (f.dynamic ? "dynamic shared memory" : "__shared__ memory") +
                    " before the cp.async copy into it has landed: " + what +
                    (f.dynamic && f.span.name ? " (byte " + std::to_string(f.offset) + ")" : "") +
                    "\n  in kernel " + kernel + "\n" + line + "\n  by " + who + "\n";
  out += "  The copy: issued at " + place(c.file, c.line) + " by " +
         (f.issuer_is_reader ? std::string("this thread") : std::string(issuer)) +
         ", in its commit group " + std::to_string(c.group) +
         (c.commit_file ? " (committed at " + place(c.commit_file, c.commit_line) + ")"
                        : " (not committed yet: a wait covers only committed groups)") +
         ".\n";
  const emu::CopyWait& w = f.wait;
  const std::string thread = f.issuer_is_reader ? "This thread" : "That thread";
  if (!c.commit_file) {
    out += "  Commit the group (cp_async_commit) and wait for it before anyone reads it.\n";
  } else if (w.file && w.committed > c.group) {
    const int newest = w.committed - 1, oldest_left = std::max(0, w.committed - w.n);
    out += "  " + thread + "'s last wait, the cp_async_wait<" + std::to_string(w.n) + "> at " +
           place(w.file, w.line) + ", left its newest " + std::to_string(w.n) +
           (w.n == 1 ? " group" : " groups") + " in flight (" + groups(oldest_left, newest) +
           " of 0-" + std::to_string(newest) + "), group " + std::to_string(c.group) +
           " among them. For group " + std::to_string(c.group) +
           " to land there, that wait leaves at most " + std::to_string(newest - c.group) +
           " in flight: cp_async_wait<" + std::to_string(newest - c.group) + ">.\n";
  } else {
    out += "  " + thread + " has not waited since it committed group " + std::to_string(c.group) +
           ": no cp_async_wait covers it yet.\n";
  }
  if (!f.issuer_is_reader)
    out += "  Another thread's copy is visible to this one only after that thread's wait covers "
           "it and a barrier (__syncthreads(), or __syncwarp() within a warp) follows the wait.\n";
  out += "  A cp.async copy lands at the cp_async_wait<N> that covers its group (N: how many of "
         "the thread's newest groups may still be in flight); until then its destination holds "
         "garbage (here 0xFF bytes, NaN in every float type).\n";
  return out;
}

const std::string async_read_tag = "async read|";
const std::string async_write_tag = "async write|";
const std::string acc_tag = "acc|";

// An ordinary read or write of accumulator registers between the wgmma that owns them and the
// wait that covers it.
std::string acc_report(const Finding& f, const std::string& kernel, const std::string& line,
                       const char* who) {
  const bool write = f.kind == Kind::AccWrite;
  const AccInFlight& c = f.acc;
  std::string out = "emulator wgmma check: " + std::string(write ? "write" : "read") +
                    " of accumulator registers in flight: d[" + std::to_string(f.acc_index) +
                    "] of a wgmma's accumulators\n  in kernel " + kernel + "\n" + line +
                    "\n  by " + who + "\n";
  out += "  The wgmma: wgmma_mma_async issued at " + place(c.file, c.line) + " by warpgroup " +
         std::to_string(c.warpgroup) + ", in this thread's wgmma group " +
         std::to_string(c.group) +
         (f.acc_committed > c.group ? "" : " (not committed yet: a wait covers only committed "
                                           "groups; wgmma_commit_group() closes it)") +
         ".\n";
  if (f.acc_committed > c.group) {
    if (f.wait_file && f.wait_committed > c.group) {
      const int newest = f.wait_committed - 1, oldest_left = std::max(0, f.wait_committed - f.wait_n);
      out += "  This thread's last wait, the wgmma_wait_group<" + std::to_string(f.wait_n) +
             "> at " + place(f.wait_file, f.wait_line) + ", left its newest " +
             std::to_string(f.wait_n) + (f.wait_n == 1 ? " group" : " groups") + " pending (" +
             groups(oldest_left, newest) + " of 0-" + std::to_string(newest) + "), group " +
             std::to_string(c.group) + " among them. For group " + std::to_string(c.group) +
             " to be done there, that wait leaves at most " + std::to_string(newest - c.group) +
             " pending: wgmma_wait_group<" + std::to_string(newest - c.group) + ">.\n";
    } else {
      out += "  This thread has not waited since it committed group " + std::to_string(c.group) +
             ": no wgmma_wait_group covers it yet.\n";
    }
  }
  out += "  A wgmma owns its accumulators from wgmma_mma_async to the wgmma_wait_group<N> that "
         "covers its group: until then they hold garbage (here NaN), and a write to them is "
         "lost or corrupts the sum.\n";
  return out;
}

const char* async_name(AsyncKind k) {
  switch (k) {
    case AsyncKind::TensorLoad: return "tma_load (cp.async.bulk.tensor, global to shared)";
    case AsyncKind::BulkLoad: return "bulk_load (cp.async.bulk, global to shared)";
    case AsyncKind::TensorStore: return "tma_store (cp.async.bulk.tensor, shared to global)";
    case AsyncKind::BulkStore: return "bulk_store (cp.async.bulk, shared to global)";
  }
  return "";
}

// A read of a bulk load's destination before the barrier phase its bytes complete on, or a
// write of a bulk store's source before the wait_group.read that covers it.
std::string async_report(const Finding& f, const std::string& what, const std::string& kernel,
                         const std::string& line, const char* who) {
  const AsyncCopy& c = f.async;
  const bool write = f.kind == Kind::AsyncWrite;
  if (c.kind == AsyncKind::WgmmaRead)
    return "emulator wgmma check: write of " + std::to_string(f.bytes) +
           " bytes of dynamic shared memory that an in-flight wgmma still reads: " + what +
           (f.span.name ? " (byte " + std::to_string(f.offset) + ")" : "") + "\n  in kernel " +
           kernel + "\n" + line + "\n  by " + who + "\n  The wgmma: wgmma_mma_async issued at " +
           place(c.file, c.line) + " by warpgroup " + std::to_string(c.thread) +
           ", in its wgmma group " + std::to_string(c.group) +
           ".\n  A wgmma may read its shared-memory operands until the wgmma_wait_group<N> that "
           "covers its group returns: release a stage (write it, or hand it back to the "
           "producer) only after that wait, not one wait too early.\n";
  std::string out = "emulator TMA check: " + std::string(write ? "write" : "read") + " of " +
                    std::to_string(f.bytes) + " bytes of dynamic shared memory " +
                    (write ? "that a bulk store has not read yet: "
                           : "before the mbarrier phase that its copy completes on: ") +
                    what + (f.span.name ? " (byte " + std::to_string(f.offset) + ")" : "") +
                    "\n  in kernel " + kernel + "\n" + line + "\n  by " + who + "\n";
  out += "  The copy: " + std::string(async_name(c.kind)) + " issued at " +
         place(c.file, c.line) + " by thread " + std::to_string(c.thread);
  if (write) {
    out += ", in its bulk group " + std::to_string(c.group) +
           ".\n  A bulk store may read its source until the issuing thread's "
           "bulk_wait_group_read<N> covers that group; write the source again only after it "
           "(and a barrier, if another thread writes it).\n";
  } else {
    char bar[16];
    std::snprintf(bar, sizeof bar, "0x%04x", c.barrier);
    out += ", completing its bytes on the mbarrier at shared " + std::string(bar) +
           " (initialised at " + place(c.init_file, c.init_line) + ") in its phase " +
           std::to_string(c.phase) + " (parity " + std::to_string(c.phase & 1) +
           ").\n  Its bytes are in shared memory only once that phase completes: wait for it "
           "first (mbarrier_wait_parity(bar, " + std::to_string(c.phase & 1) +
           ")). Until then the destination holds garbage (here 0xFF bytes, NaN in every "
           "float type).\n";
  }
  return out;
}

}  // namespace

void name_region(const char* name, const void* p, size_t bytes, size_t elem, const size_t* dims,
                 int rank) {
  if (!tl_active || !name || !bytes) return;
  const uintptr_t lo = reinterpret_cast<uintptr_t>(p);
  for (const Span& s : tl_named)
    if (s.lo == lo && s.hi == lo + bytes) return;  // every thread of the block names it
  Span s;
  s.lo = lo;
  s.hi = lo + bytes;
  s.name = name;
  s.elem = elem;
  s.rank = std::min(rank, 3);
  for (int d = 0; d < s.rank; ++d) s.dims[d] = dims[d];
  tl_named.push_back(s);
}

void copy_started(const void* dst, int thread) {
  if (!tl_active) return;
  const uintptr_t a = reinterpret_cast<uintptr_t>(dst);
  for (Region* r : {&tl_dynamic, &tl_static}) {
    if (a < r->lo || a >= r->hi) continue;
    if (r->flight.empty()) r->flight.assign(r->chunk(r->hi - 1) + 1, 0);
    uint16_t& slot = r->flight[r->chunk(a)];
    if (!slot) ++r->flying;
    slot = uint16_t(thread + 1);
    return;
  }
}

void copy_landed(const void* dst) {
  if (!tl_active) return;
  const uintptr_t a = reinterpret_cast<uintptr_t>(dst);
  for (Region* r : {&tl_dynamic, &tl_static}) {
    if (a < r->lo || a >= r->hi || r->flight.empty()) continue;
    uint16_t& slot = r->flight[r->chunk(a)];
    if (slot) --r->flying;
    slot = 0;
    return;
  }
}

int async_started(const void* dst, size_t bytes, const AsyncCopy& copy, int handle) {
  if (!tl_active || (handle < 0 && tl_async.size() >= kAsyncFlag - 1)) return -1;
  Region& r = tl_dynamic;
  const uintptr_t a = reinterpret_cast<uintptr_t>(dst);
  if (a < r.lo || a >= r.hi) return handle;
  if (r.flight.empty()) r.flight.assign(r.chunk(r.hi - 1) + 1, 0);
  if (handle < 0) {
    handle = int(tl_async.size());
    tl_async.push_back(copy);
  }
  const uint16_t v = uint16_t(kAsyncFlag | handle);
  const uintptr_t end = std::min<uintptr_t>(a + bytes, r.hi);
  for (uintptr_t c = a; c < end; c += 16) {
    uint16_t& slot = r.flight[r.chunk(c)];
    if (!slot) ++r.flying;
    slot = v;
  }
  return int(v & ~kAsyncFlag);
}

void async_release(const void* dst, size_t bytes, int handle) {
  Region& r = tl_dynamic;
  const uintptr_t a = reinterpret_cast<uintptr_t>(dst);
  if (!tl_active || handle < 0 || a < r.lo || a >= r.hi || r.flight.empty()) return;
  const uint16_t v = uint16_t(kAsyncFlag | handle);
  const uintptr_t end = std::min<uintptr_t>(a + bytes, r.hi);
  for (uintptr_t c = a; c < end; c += 16) {
    uint16_t& slot = r.flight[r.chunk(c)];
    if (slot == v) {
      --r.flying;
      slot = 0;
    }
  }
}

bool async_covering(const void* p, size_t bytes, bool loads, AsyncCopy* out) {
  Region& r = tl_dynamic;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (!tl_active || !r.flying || a < r.lo || a >= r.hi || r.flight.empty()) return false;
  const uintptr_t end = std::min<uintptr_t>(a + bytes, r.hi);
  for (uintptr_t c = a; c < end; c = (c | 15) + 1) {
    const uint16_t v = r.flight[r.chunk(c)];
    if (!(v & kAsyncFlag) || (v & ~kAsyncFlag) >= tl_async.size()) continue;
    const AsyncCopy& copy = tl_async[v & ~kAsyncFlag];
    const bool load = copy.kind == AsyncKind::TensorLoad || copy.kind == AsyncKind::BulkLoad;
    if (loads ? load : copy.kind == AsyncKind::WgmmaRead) {
      *out = copy;
      return true;
    }
  }
  return false;
}

void acc_watch(int thread, const void* p, size_t bytes, const AccInFlight& info) {
  if (!tl_active || thread < 0) return;
  if (tl_acc.size() <= size_t(thread)) tl_acc.resize(size_t(thread) + 1);
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  tl_acc[size_t(thread)].push_back(AccWatch{a, a + bytes, info});
  ++tl_acc_count;
}

void acc_unwatch(int thread, const void* p) {
  if (!tl_active || thread < 0 || size_t(thread) >= tl_acc.size()) return;
  std::vector<AccWatch>& w = tl_acc[size_t(thread)];
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  for (size_t i = 0; i < w.size(); ++i)
    if (w[i].lo == a) {
      w.erase(w.begin() + long(i));
      --tl_acc_count;
      return;
    }
}

void async_landed(const void* dst, size_t bytes) {
  if (!tl_active) return;
  Region& r = tl_dynamic;
  const uintptr_t a = reinterpret_cast<uintptr_t>(dst);
  if (a < r.lo || a >= r.hi) return;
  r.mark(a, bytes);  // what a load brings is written (a store's source already was)
  if (r.flight.empty()) return;
  const uintptr_t end = std::min<uintptr_t>(a + bytes, r.hi);
  for (uintptr_t c = a; c < end; c += 16) {
    uint16_t& slot = r.flight[r.chunk(c)];
    if (slot & kAsyncFlag) {
      --r.flying;
      slot = 0;
    }
  }
}

bool unfenced_write(const void* src, size_t bytes, const unsigned* fences, int* thread, void** pc) {
  Region& r = tl_dynamic;
  if (!tl_active || !r.track_writers) return false;
  const uintptr_t a = reinterpret_cast<uintptr_t>(src);
  if (a < r.lo || a >= r.hi) return false;
  const uintptr_t end = std::min<uintptr_t>(a + bytes, r.hi);
  for (uintptr_t c = a; c < end; c = (c | 15) + 1) {
    const size_t i = r.chunk(c);
    if (r.writer[i] && r.writer_fences[i] == fences[r.writer[i] - 1]) {
      *thread = r.writer[i] - 1;
      *pc = r.writer_pc[i];
      return true;
    }
  }
  return false;
}

std::string take_report(const void* kernel_address) {
  // Called after the launch, when the workers are idle. One report per source line, with
  // the count of the others like it.
  std::vector<std::pair<Finding, std::string>> findings;
  std::map<std::string, int> more;
  const int count = std::min(g_count.exchange(0), kMaxFindings);
  std::vector<void*> pcs;
  for (int i = 0; i < count; ++i) pcs.push_back(static_cast<char*>(g_findings[i].pc) - 1);
  const std::vector<std::string> lines = source_lines(pcs);
  for (int i = 0; i < count; ++i) {
    std::string line = lines[i].empty() ? "  at (unknown line)" : lines[i];
    if (g_findings[i].kind == Kind::InFlight) line = in_flight_tag + line;
    if (g_findings[i].kind == Kind::AsyncRead) line = async_read_tag + line;
    if (g_findings[i].kind == Kind::AsyncWrite) line = async_write_tag + line;
    if (g_findings[i].kind == Kind::AccRead || g_findings[i].kind == Kind::AccWrite)
      line = acc_tag + (g_findings[i].kind == Kind::AccWrite ? "w|" : "r|") + line;
    if (more.count(line)) ++more[line];
    else more[line] = 0, findings.emplace_back(g_findings[i], line);
  }
  std::string out;
  const std::string kernel = findings.empty() ? "" : kernel_name(kernel_address);
  for (size_t i = 0; i < findings.size() && i < 2; ++i) {
    const Finding& f = findings[i].first;
    std::string line = findings[i].second;
    const bool in_flight = line.rfind(in_flight_tag, 0) == 0;
    if (in_flight) line.erase(0, in_flight_tag.size());
    const bool async = f.kind == Kind::AsyncRead || f.kind == Kind::AsyncWrite;
    if (async) line.erase(0, (f.kind == Kind::AsyncRead ? async_read_tag : async_write_tag).size());
    const bool acc = f.kind == Kind::AccRead || f.kind == Kind::AccWrite;
    if (acc) line.erase(0, acc_tag.size() + 2);
    char who[160];
    std::snprintf(who, sizeof who, "block (%u,%u,%u), thread (%u,%u,%u)", f.block.x, f.block.y,
                  f.block.z, f.thread.x, f.thread.y, f.thread.z);
    const std::string what = where_in(f.span, f.address, f.bytes);
    if (acc) {
      out += acc_report(f, kernel, line, who);
    } else if (async) {
      out += async_report(f, what, kernel, line, who);
    } else if (in_flight) {
      out += in_flight_report(f, what, kernel, line, who);
    } else {
    out += "emulator initcheck: read of " + std::to_string(f.bytes) + " bytes of " +
           (f.dynamic ? "dynamic shared memory" : "__shared__ memory") +
           " that no thread of this block has written: " + what +
           (f.dynamic && f.span.name ? " (byte " + std::to_string(f.offset) + ")" : "") +
           "\n  in kernel " + kernel + "\n" + line + "\n  by " + who +
           (f.written_later
                ? "\n  Not yet written when read: " + unwritten(f, true) +
                      ".\n  A thread of this block wrote it later: the read came before the write. "
                      "A __syncthreads() between them (or a __syncwarp(), if the writer and the "
                      "reader are lanes of one warp) orders them."
                : "\n  Never written in this block: " + unwritten(f, false) +
                      ".\n  No thread of this block wrote it, before or after the read: look for "
                      "the write that should cover it (a loop bound, a branch, a warp that skips "
                      "its part).") +
           (f.dynamic && !f.span.name
                ? "\n  (PA_SHARED_REGION(ptr, count) in the kernel names the arrays carved from "
                  "this buffer, for reports like \"q_s[72]\".)"
                : "") +
           "\n  Shared memory starts as garbage in every block: write it, and __syncthreads()"
           " (or __syncwarp() within a warp), before any thread reads it.\n";
    }
    if (more[findings[i].second] > 0)
      out += "  (and " + std::to_string(more[findings[i].second]) +
             (more[findings[i].second] == 1 ? " more read" : " more reads") + " like it at this line)\n";
  }
  if (findings.size() > 2)
    out += "  (" + std::to_string(findings.size() - 2) +
           (findings.size() == 3 ? " more such read" : " more such reads") +
           " in this launch, at other lines)\n";
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
    emu::initcheck::on_write(__builtin_return_address(0), p, n);         \
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
  emu::initcheck::on_write(__builtin_return_address(0), p, n);
  return next().write_range(p, n);
}

#else  // plain build: nothing to check

namespace emu::initcheck {
void begin_block(void*, size_t, size_t) {}
void end_block() {}
std::string take_report(const void*) { return ""; }
void name_region(const char*, const void*, size_t, size_t, const size_t*, int) {}
void copy_started(const void*, int) {}
void copy_landed(const void*) {}
int async_started(const void*, size_t, const AsyncCopy&, int) { return -1; }
void async_release(const void*, size_t, int) {}
bool async_covering(const void*, size_t, bool, AsyncCopy*) { return false; }
void acc_watch(int, const void*, size_t, const AccInFlight&) {}
void acc_unwatch(int, const void*) {}
void async_landed(const void*, size_t) {}
bool unfenced_write(const void*, size_t, const unsigned*, int*, void**) { return false; }
}  // namespace emu::initcheck

#endif
