// Device memory and dynamic shared memory on the CPU, with the bookkeeping that lets the
// emulator say which buffer an address belongs to.
#include "memory_map.h"

#include <cxxabi.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <vector>

#include "crash_report.h"

namespace emu {
namespace {

#if defined(PA_EMU_CHECK)
constexpr bool kGuarded = true;
#else
constexpr bool kGuarded = false;
#endif

struct Allocation {
  size_t bytes;
  char* mapping;  // checked mode: the whole mapping, guard page included; plain: the whole
  size_t mapping_bytes;  // block, redzones included
  unsigned char fill;    // plain mode: the redzones' byte
};
std::mutex g_mutex;
std::map<uintptr_t, Allocation> g_allocs;  // start -> allocation
struct Range {
  uintptr_t start;
  size_t bytes;
};
std::vector<Range> g_shared;  // every worker's dynamic shared memory buffer

size_t page_size() { return size_t(sysconf(_SC_PAGESIZE)); }
size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// A buffer of `bytes` (rounded up to 16, the widest access) that ends exactly where an
// inaccessible page begins.
char* guarded_map(size_t bytes, char** mapping, size_t* mapping_bytes) {
  const size_t page = page_size();
  const size_t data = round_up(round_up(bytes ? bytes : 16, 16), page);
  void* m = mmap(nullptr, data + page, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  char* base = static_cast<char*>(m);
  mprotect(base + data, page, PROT_NONE);
  *mapping = base;
  *mapping_bytes = data + page;
  return base + data - round_up(bytes ? bytes : 16, 16);
}

// Plain mode: an allocation is [kRedzoneBytes of redzone | its bytes | redzone to its end
// rounded up to 256, then kRedzoneBytes more], the redzones filled with one byte. A write a
// little outside the allocation lands in memory that is its own, not the heap's, and the
// next check_redzones() sees it. The byte is none that kernels and tests write a lot (0,
// 0xFF), and it changes from one allocation to the next: a copy one past the end of two
// buffers (out[n] = in[n]) moves a byte that differs from the one it overwrites.
constexpr unsigned char kRedzoneFills[] = {0xA5, 0xB6, 0xC7, 0xD8, 0xE9, 0x96, 0x87, 0x5A,
                                           0x6B, 0x4D, 0x2E, 0x1F, 0x93, 0xA1, 0xB2, 0xC4};
unsigned g_allocations = 0;  // how many so far, for the next fill

char* redzoned_alloc(size_t bytes, unsigned char fill, char** block, size_t* block_bytes) {
  if (bytes > (size_t(1) << 48)) return nullptr;  // no such memory; and the sum below must not wrap
  const size_t total = kRedzoneBytes + round_up(bytes, 256) + kRedzoneBytes;
  char* base = static_cast<char*>(std::aligned_alloc(256, total));
  if (!base) return nullptr;
  char* p = base + kRedzoneBytes;
  std::memset(base, fill, kRedzoneBytes);
  std::memset(p + bytes, fill, total - kRedzoneBytes - bytes);
  *block = base;
  *block_bytes = total;
  return p;
}

const std::pair<const uintptr_t, Allocation>* find_near(uintptr_t a) {
  auto it = g_allocs.upper_bound(a);
  if (it == g_allocs.begin()) return nullptr;
  --it;
  return &*it;
}

}  // namespace

void* device_alloc(size_t bytes) {
  Allocation a{bytes, nullptr, 0, 0};
  char* p;
  if (kGuarded) {
    p = guarded_map(bytes, &a.mapping, &a.mapping_bytes);
  } else {
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      a.fill = kRedzoneFills[g_allocations++ % std::size(kRedzoneFills)];
    }
    p = redzoned_alloc(bytes, a.fill, &a.mapping, &a.mapping_bytes);
  }
  if (!p) return nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_allocs[uintptr_t(p)] = a;
  return p;
}

bool device_free(void* p) {
  Allocation a;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_allocs.find(uintptr_t(p));
    if (it == g_allocs.end()) return false;
    a = it->second;
    g_allocs.erase(it);
  }
  if (kGuarded) munmap(a.mapping, a.mapping_bytes);
  else std::free(a.mapping);
  return true;
}

std::string check_device_range(const void* p, size_t n, const char* role) {
  const uintptr_t c = uintptr_t(p);
  std::lock_guard<std::mutex> lock(g_mutex);
  const auto* near = find_near(c);
  if (!near) return std::string(role) + " is not device memory";
  const size_t offset = size_t(c - near->first), size = near->second.bytes;
  if (offset >= size && !(offset == size && n == 0))
    return std::string(role) + " is not device memory";
  if (offset + n > size)
    return std::string(role) + " range of " + std::to_string(n) + " bytes at offset " +
           std::to_string(offset) + " overruns its allocation of " + std::to_string(size) +
           " bytes";
  return "";
}

size_t device_bytes_after(const void* p) {
  const uintptr_t c = uintptr_t(p);
  std::lock_guard<std::mutex> lock(g_mutex);
  const auto* near = find_near(c);
  if (!near || c - near->first >= near->second.bytes) return 0;
  return near->second.bytes - size_t(c - near->first);
}

namespace {

// The arguments of the launch in progress, as pa::launch noted them.
struct LaunchArguments {
  const void* kernel = nullptr;
  int count = 0;
  const void* const* values = nullptr;
  const size_t* sizes = nullptr;
  const char* const* types = nullptr;
  const size_t* elem_sizes = nullptr;
};
thread_local LaunchArguments tl_arguments;

// A redzone that a kernel wrote: bytes first..last of the allocation (negative: before its
// start) changed, `changed` of them.
struct Overrun {
  uintptr_t start;
  size_t bytes;
  long first, last;
  size_t changed;
  // Before the start: the allocation just before it in memory, when its redzone ends less
  // than kRedzoneBytes before this one begins (a write far past its end lands here too).
  uintptr_t prev_start = 0;
  size_t prev_bytes = 0;
};

// Whether all n bytes at `zone` are `fill`: the common case, every redzone of every
// allocation after every launch, so 32 bytes at a time (GCC's vector extension; with AVX2
// where the CPU has it). About 5x faster than a loop of 8-byte words at -O2.
#if defined(__x86_64__) && defined(__linux__)
__attribute__((target_clones("avx2", "default")))
#endif
bool holds(const unsigned char* zone, size_t n, unsigned char fill) {
  typedef uint64_t Words __attribute__((vector_size(32)));
  const uint64_t p = 0x0101010101010101ull * fill;
  const Words pattern = {p, p, p, p};
  Words diff = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    Words w;
    std::memcpy(&w, zone + i, 32);
    diff |= w ^ pattern;
  }
  uint64_t rest = diff[0] | diff[1] | diff[2] | diff[3];
  for (; i < n; ++i) rest |= zone[i] ^ fill;
  return rest == 0;
}

// Looks at one redzone, [zone, zone + n), `offset` bytes from the allocation's start; puts
// the fill back when it was written.
void check_zone(unsigned char* zone, size_t n, long offset, uintptr_t start,
                const Allocation& a, std::vector<Overrun>* found) {
  if (holds(zone, n, a.fill)) return;
  Overrun o{start, a.bytes, 0, 0, 0, 0, 0};
  for (size_t i = 0; i < n; ++i) {
    if (zone[i] == a.fill) continue;
    if (o.changed++ == 0) o.first = offset + long(i);
    o.last = offset + long(i);
  }
  std::memset(zone, a.fill, n);
  found->push_back(o);
}

std::string demangled_type(const char* mangled) {
  int status = 0;
  char* pretty = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && pretty ? pretty : mangled;
  std::free(pretty);
  const std::string anon = "(anonymous namespace)::";  // as kernel_name() drops it
  for (size_t at; (at = name.find(anon)) != std::string::npos;) name.erase(at, anon.size());
  return name;
}

std::string ordinal(int n) {
  const char* suffix = (n % 100 >= 11 && n % 100 <= 13) ? "th"
                       : n % 10 == 1                     ? "st"
                       : n % 10 == 2                     ? "nd"
                       : n % 10 == 3                     ? "rd"
                                                         : "th";
  return std::to_string(n) + suffix;
}

std::string range(long first, long last) {
  return first == last ? std::to_string(first)
                       : std::to_string(first) + ".." + std::to_string(last);
}

long floor_div(long a, long b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

// Which of the kernel's arguments points into the overrun allocation, and which of its
// elements the kernel wrote: "  its 3rd argument (of 4, a __half*) points to it (18432
// elements): the kernel wrote its elements 18432..19007". A pointer inside an argument
// (a struct of pointers) is named too.
std::string name_arguments(const void* kernel, const Overrun& o, bool say_none = true) {
  const LaunchArguments& a = tl_arguments;
  if (a.kernel != kernel || a.count == 0)
    return "";  // launched without pa::launch: the arguments are not known
  std::string out;
  const int total = a.count;
  auto which = [&](int i) {
    return "its " + ordinal(i + 1) + " argument (of " + std::to_string(total) + ", a " +
           demangled_type(a.types[i]) + ")";
  };
  for (int i = 0; i < a.count; ++i) {
    for (size_t at = 0; at + sizeof(void*) <= a.sizes[i]; at += sizeof(void*)) {
      uintptr_t v;
      std::memcpy(&v, static_cast<const char*>(a.values[i]) + at, sizeof v);
      if (v < o.start || v > o.start + o.bytes) continue;
      const long k = long(v - o.start);  // the byte of the allocation it points to
      const std::string to = k == 0 ? "to it" : "to its byte " + std::to_string(k);
      if (a.elem_sizes[i] == 0) {  // a pointer inside an argument (a struct)
        out += "  " + which(i) + " holds a pointer " + to + ", at byte " + std::to_string(at) +
               " of the argument\n";
        continue;
      }
      const long e = long(a.elem_sizes[i]);
      const long first = floor_div(o.first - k, e), last = floor_div(o.last - k, e);
      out += "  " + which(i) + " points " + to + " (" +
             std::to_string((long(o.bytes) - k) / e) + " elements" +
             (k == 0 ? "" : " before the end") + "): the kernel wrote its element" +
             (first == last ? " " : "s ") + range(first, last) + "\n";
    }
  }
  if (out.empty() && say_none)
    out = "  none of the kernel's " + std::to_string(total) +
          " arguments points into it: the kernel read the pointer from\n"
          "  memory, or computed it from another buffer's\n";
  return out;
}

}  // namespace

void note_launch_arguments(const void* kernel, int count, const void* const* values,
                           const size_t* sizes, const char* const* types,
                           const size_t* elem_sizes) {
  tl_arguments = LaunchArguments{kernel, count, values, sizes, types, elem_sizes};
}

std::string check_redzones(const void* kernel) {
  if (kGuarded) return "";
  std::vector<Overrun> found;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    const std::pair<const uintptr_t, Allocation>* prev = nullptr;  // the one before in memory
    for (const auto& entry : g_allocs) {
      const auto& [start, a] = entry;
      unsigned char* p = reinterpret_cast<unsigned char*>(start);
      check_zone(p - kRedzoneBytes, kRedzoneBytes, -long(kRedzoneBytes), start, a, &found);
      if (!found.empty() && found.back().start == start && prev &&
          uintptr_t(a.mapping) - uintptr_t(prev->second.mapping + prev->second.mapping_bytes) <
              kRedzoneBytes) {
        found.back().prev_start = prev->first;
        found.back().prev_bytes = prev->second.bytes;
      }
      prev = &entry;
      check_zone(p + a.bytes, a.mapping_bytes - kRedzoneBytes - a.bytes, long(a.bytes), start, a,
                 &found);
    }
  }
  if (found.empty()) return "";
  std::string msg;
  bool past_end = false;  // checked mode would stop the write (its guard page is after)
  for (const Overrun& o : found) past_end |= o.first >= 0 || o.prev_start != 0;
  constexpr size_t kShown = 4;  // allocations named in full; the others are counted
  for (size_t i = 0; i < found.size() && i < kShown; ++i) {
    const Overrun& o = found[i];
    const bool before = o.first < 0;
    const std::string span =
        before ? "from " + std::to_string(-o.first) + " to " + std::to_string(-o.last) +
                     " bytes before its start"
               : "from " + std::to_string(o.first - long(o.bytes)) + " to " +
                     std::to_string(o.last - long(o.bytes)) + " bytes past its end";
    msg += std::string(msg.empty() ? "emulator: " : "\nemulator: ") + "kernel " +
           kernel_name(kernel) + " wrote " + (before ? "before the start" : "past the end") +
           " of a " + std::to_string(o.bytes) + "-byte device allocation (cudaMalloc)\n" +
           "  bytes " + range(o.first, o.last) + " of it were written: " + span + " (" +
           std::to_string(o.changed) + " byte" + (o.changed == 1 ? "" : "s") + " changed)\n" +
           name_arguments(kernel, o);
    if (before && o.prev_start) {
      // The same bytes, seen from the allocation before: a write past its end and its redzone.
      Overrun p{o.prev_start, o.prev_bytes, 0, 0, o.changed};
      p.first = long(o.start - o.prev_start) + o.first;
      p.last = long(o.start - o.prev_start) + o.last;
      msg += "  or, if the kernel meant the " + std::to_string(p.bytes) +
             "-byte device allocation just before it in memory, it wrote\n  past that one's "
             "end and redzone: its bytes " + range(p.first, p.last) + ", from " +
             std::to_string(p.first - long(p.bytes)) + " to " +
             std::to_string(p.last - long(p.bytes)) + " bytes past its end\n" +
             name_arguments(kernel, p, false);
    }
  }
  if (found.size() > kShown)
    msg += "  (and " + std::to_string(found.size() - kShown) +
           " more redzones of device allocations were written)\n";
  const std::string command = check_command();
  msg += "  The plain emulator looks at the " + std::to_string(kRedzoneBytes / 1024) +
         " KiB before and after each device allocation when a launch\n"
         "  ends: it cannot say which thread wrote, or at which line.";
  if (past_end)
    msg += " Checked mode stops the kernel at a\n  write past the end and names both: " +
           (command.empty() ? std::string("make check-chapter-N (N: the chapter)") : command);
  return msg + "\n";
}

void* dynamic_shared_buffer(size_t bytes, size_t* slack) {
  // One buffer per worker, grown when a launch asks for more; real shared memory starts as
  // garbage, so it is poisoned with 0xFF (NaN in every float type) for each block. It starts
  // on a 1,024-byte boundary, as dynamic shared memory does on Hopper (where its shared
  // address is 0x400): the low ten bits of a pointer into it are those of its shared address,
  // so swizzle atoms (1,024 bytes) line up on both (emu/src/smem_window.cpp).
  thread_local char* buffer = nullptr;
  thread_local size_t capacity = 0;
  thread_local std::vector<char> plain;
  thread_local char* mapping = nullptr;
  thread_local size_t mapping_bytes = 0;
  constexpr size_t kAlign = 1024;
  if (!kGuarded) {
    plain.assign(bytes + kAlign, char(0xFF));
    *slack = 0;
    const uintptr_t p = (reinterpret_cast<uintptr_t>(plain.data()) + kAlign - 1) & ~(kAlign - 1);
    return reinterpret_cast<char*>(p);
  }
  // Checked mode: the guard page follows the buffer rounded up to 1,024 bytes; the few bytes
  // between its end and the guard (`slack`) are reported by the access hook
  // (init_check.cpp) as the guard page would.
  if (bytes != capacity || !buffer) {
    if (mapping) {
      munmap(mapping, mapping_bytes);
      std::lock_guard<std::mutex> lock(g_mutex);
      for (Range& r : g_shared)
        if (r.start == uintptr_t(buffer)) r = g_shared.back(), g_shared.pop_back();
    }
    const size_t whole = round_up(bytes ? bytes : 16, kAlign);
    char* end = guarded_map(whole, &mapping, &mapping_bytes) + whole;
    buffer = end - whole;
    capacity = bytes;
    std::lock_guard<std::mutex> lock(g_mutex);
    g_shared.push_back(Range{uintptr_t(buffer), bytes});
  }
  *slack = round_up(bytes ? bytes : 16, kAlign) - bytes;
  std::fill(buffer, buffer + round_up(bytes ? bytes : 16, 16), char(0xFF));
  return buffer;
}

std::string describe_address(uintptr_t a, const std::string& tsan_location) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (const auto* near = find_near(a); near && a - near->first < near->second.bytes)
      return "global memory (byte " + std::to_string(a - near->first) + " of a " +
             std::to_string(near->second.bytes) + "-byte device allocation)";
    for (const Range& r : g_shared)
      if (a >= r.start && a - r.start < r.bytes)
        return "dynamic shared memory (byte " + std::to_string(a - r.start) + " of " +
               std::to_string(r.bytes) + ")";
  }
  if (tsan_location.find("TLS") != std::string::npos)
    return "__shared__ memory (a static __shared__ array of the block)";
  char buf[64];
  std::snprintf(buf, sizeof buf, "memory at %#lx", static_cast<unsigned long>(a));
  return buf;
}

std::string describe_fault(uintptr_t a) {
  // No lock: the process is dying, and the faulting thread may hold it.
  for (const Range& r : g_shared)
    if (a >= r.start + r.bytes && a < r.start + round_up(r.bytes, page_size()) + page_size())
      return "dynamic shared memory: byte " + std::to_string(a - r.start) +
             " of a block's " + std::to_string(r.bytes) + " bytes, " +
             std::to_string(a - r.start - r.bytes) + " bytes past the end";
  if (const auto* near = find_near(a)) {
    const uintptr_t end = near->first + near->second.bytes;
    if (a >= end && a < end + page_size() + 16)
      return "global memory: " + std::to_string(a - end) + " bytes past the end of a " +
             std::to_string(near->second.bytes) + "-byte device allocation (cudaMalloc)";
  }
  return "";
}

}  // namespace emu
