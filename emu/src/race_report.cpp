// Checked mode's race reports. ThreadSanitizer writes its reports to a file of ours; after
// each launch we read what it added and say it the way compute-sanitizer's racecheck
// would: the memory (shared or global), the two source lines, the two threads (block,
// thread, warp, lane) and the barrier interval they share.
#include "race_check.h"

#include <dlfcn.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "block.h"
#include "crash_report.h"
#include "memory_map.h"

#if defined(PA_EMU_CHECK)
extern "C" {
void* __tsan_get_current_fiber(void);
void* __tsan_create_fiber(unsigned flags);
void __tsan_destroy_fiber(void* fiber);
void __tsan_set_fiber_name(void* fiber, const char* name);
void __tsan_switch_to_fiber(void* fiber, unsigned flags);
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
void __tsan_ignore_thread_begin(void);
void __tsan_ignore_thread_end(void);
void __sanitizer_set_report_path(const char* path);
// Defaults for our runs; TSAN_OPTIONS still overrides them. exitcode=0: a race in a
// kernel already fails its launch (and so its test), with the report as the message;
// the emulator's own tests plant races on purpose and must be able to pass.
const char* __tsan_default_options() { return "history_size=4:halt_on_error=0:exitcode=0:suppress_equal_addresses=0"; }
}
#endif

namespace emu::race {
namespace {

// What the block of the racing thread was doing when TSan found the race. Filled inside
// TSan's report hook (below), so it is plain data: no allocation there.
struct Moment {
  int interval;
  const char* file;
  int line;
};
constexpr int kMaxMoments = 4096;
Moment g_moments[kMaxMoments];
int g_moment_count = 0;   // written under TSan's report lock
int g_moments_taken = 0;  // how many take_report() has paired with a report

std::mutex g_mutex;
std::string g_log_path;  // TSan appends ".PID"
std::streamoff g_log_offset = 0;

std::string base_path() {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/pa-emu-racecheck";
}

bool is_course_code(const std::string& path) {
  return path.find("/usr/") != 0 && path.find("/emu/src/") == std::string::npos &&
         path.find("include/pa/launch.h") == std::string::npos &&
         path.find("/boost/") == std::string::npos;
}

struct Access {
  std::string kind;  // "write", "read", "atomic write", ...
  int size = 0;
  uintptr_t address = 0;
  std::string thread;  // "T12"
  std::vector<std::string> frames;  // "file:line (function)", course code only (3 at most)
  std::string outermost;            // the course function the fiber started in: the kernel
  bool stack_lost = false;
};

struct Race {
  Access now, before;
  std::string location;  // TSan's "Location is ..." line
  std::map<std::string, std::string> names;  // "T12" -> fiber name
};

// A frame TSan could not place ("#0 kernel(...) <null> (test_ch05_solution+0x9582c)"):
// ask addr2line, which reads the line tables TSan's own symbolizer sometimes misses.
std::string place_by_offset(const std::string& line) {
  static const std::regex unplaced(R"(^\s+#\d+ .* <null> \(([^+ ]+)\+(0x[0-9a-f]+)\)$)");
  std::smatch m;
  Dl_info self;
  if (!std::regex_match(line, m, unplaced) || !dladdr(reinterpret_cast<void*>(&place_by_offset), &self))
    return "";
  const std::string exe = self.dli_fname ? self.dli_fname : "";
  if (exe.size() < m[1].length() || exe.compare(exe.size() - m[1].length(), m[1].length(), m[1].str()))
    return "";  // not in the program itself
  void* pc = static_cast<char*>(self.dli_fbase) + std::stoull(m[2].str(), nullptr, 16) - 1;
  return emu::source_line(pc);  // "  at file:line (in f)\n     inlined into ..."
}

// "    #0 func(args) /path/file.cu:12:5 (exe+0x1234)" -> "file.cu:12 (func)". The path may be
// relative ("../tree-1/solutions/..."): ccache with CCACHE_BASEDIR writes relative paths
// into the debug information.
bool parse_frame(const std::string& line, std::string* out, bool* course) {
  static const std::regex frame(R"(^\s+#\d+ (.*) ([^ :]+):(\d+)(?::\d+)? \(.*\)$)");
  std::smatch m;
  if (!std::regex_match(line, m, frame)) {
    std::string placed = place_by_offset(line);
    if (placed.empty()) return false;
    placed = placed.substr(5, placed.find('\n') == std::string::npos ? std::string::npos
                                                                     : placed.find('\n') - 5);
    *course = false;  // the course's own code only: the emulator's frames stay out
    for (const char* root : {"solutions/", "chapters/", "tests/", "include/"})
      if (placed.rfind(root, 0) == 0) *course = true;
    *out = placed;
    return true;
  }
  *course = is_course_code(m[2].str());
  *out = course_path(m[2].str()) + ":" + m[3].str() + " (in " + function_name(m[1].str()) + ")";
  return true;
}

std::vector<Race> parse(const std::string& text) {
  static const std::regex access(
      R"(^  (Previous )?([A-Za-z ]+?) of size (\d+) at (0x[0-9a-f]+) by (thread (T\d+)|main thread).*:$)");
  static const std::regex thread_name(R"(^  Thread (T\d+) '([^']*)')");
  std::vector<Race> races;
  std::istringstream in(text);
  std::string line;
  Race* race = nullptr;
  Access* acc = nullptr;
  while (std::getline(in, line)) {
    std::smatch m;
    if (line.rfind("WARNING: ThreadSanitizer: data race", 0) == 0) {
      races.emplace_back();
      race = &races.back();
      acc = nullptr;
    } else if (!race) {
      continue;
    } else if (std::regex_match(line, m, access)) {
      acc = m[1].matched ? &race->before : &race->now;
      std::string kind = m[2].str();
      for (char& c : kind) c = char(std::tolower(c));
      acc->kind = kind;
      acc->size = std::stoi(m[3].str());
      acc->address = std::stoull(m[4].str(), nullptr, 16);
      acc->thread = m[6].matched ? m[6].str() : "main";
    } else if (acc && line.find("[failed to restore the stack]") != std::string::npos) {
      acc->stack_lost = true;
    } else if (acc && line.rfind("    #", 0) == 0) {
      std::string frame;
      bool course = false;
      if (parse_frame(line, &frame, &course) && course) {
        if (acc->frames.size() < 3) acc->frames.push_back(frame);
        acc->outermost = frame.substr(frame.rfind("(in ") + 4);
        acc->outermost.pop_back();
      }
    } else if (line.rfind("  Location is ", 0) == 0) {
      race->location = line.substr(2);
      acc = nullptr;
    } else if (std::regex_search(line, m, thread_name)) {
      race->names[m[1].str()] = m[2].str();
      acc = nullptr;
    } else if (line.empty()) {
      acc = nullptr;
    }
  }
  return races;
}

std::string who(const Race& r, const Access& a) {
  auto it = r.names.find(a.thread);
  if (it != r.names.end()) return it->second;
  return a.thread == "main" ? "the host thread" : "thread " + a.thread;
}

// "block (1,0,0), thread (33,0,0), warp 1 lane 1" -> the block part, and the warp.
std::string block_of(const std::string& name) { return name.substr(0, name.find("), ") + 1); }
std::string warp_of(const std::string& name) {
  const size_t at = name.find("warp ");
  return at == std::string::npos ? "" : name.substr(at, name.find(' ', at + 5) - at);
}

std::string where_line(const Access& a) {
  if (!a.frames.empty()) {
    std::string s = a.frames[0];
    for (size_t i = 1; i < a.frames.size(); ++i) s += "\n        called from " + a.frames[i];
    return s;
  }
  if (a.stack_lost)
    return "(line lost: TSan keeps a short history; rerun with TSAN_OPTIONS=history_size=7)";
  return "(outside the course's code)";
}

std::string describe(const Race& r, const char* kernel, const Moment* moment) {
  const std::string memory = describe_address(r.now.address, r.location);
  const std::string a = who(r, r.now), b = who(r, r.before);
  std::ostringstream os;
  os << "emulator racecheck: data race on " << memory << "\n"
     << "  in kernel "
     << (std::strcmp(kernel, "(unknown kernel)") == 0 && !r.now.outermost.empty()
             ? r.now.outermost.c_str()
             : kernel)
     << "\n"
     << "  " << r.now.kind << " of " << r.now.size << " bytes at " << where_line(r.now) << "\n"
     << "      by " << a << "\n"
     << "  " << r.before.kind << " of " << r.before.size << " bytes at " << where_line(r.before)
     << "\n"
     << "      by " << b << "\n";
  if (block_of(a) != block_of(b)) {
    os << "  The two threads are in different blocks: nothing orders blocks within one launch\n"
          "  (no barrier spans blocks). Give each block its own output, or order them as a\n"
          "  ticket counter does: an atomic orders only its own word, so the writer needs a\n"
          "  __threadfence() between its writes and its atomic, and the reader one between\n"
          "  its atomic and its reads.\n";
  } else {
    if (moment && moment->interval > 0)
      os << "  Both fall in barrier interval " << moment->interval << " of the block (after the "
         << "__syncthreads at " << course_path(moment->file) << ":" << moment->line
         << "), so no barrier separates them.\n";
    else if (moment)
      os << "  Both fall before the block's first __syncthreads, so no barrier separates them.\n";
    if (warp_of(a) == warp_of(b))
      // The report shows two lanes of one warp, but not whether other warps use this memory
      // too: both fixes fit what we know, so name both.
      os << "  Both threads are in " << warp_of(a) << ", and lanes do not run in lockstep: "
         << "something must order\n"
         << "  the two accesses. Which barrier depends on who else uses this memory: a\n"
         << "  __syncwarp() if only lanes of this warp write or read it here; a __syncthreads()\n"
         << "  (reached by every thread of the block) if other warps do too, as when each warp\n"
         << "  writes its own slot and one warp reads them all.\n";
    else
      os << "  Put a __syncthreads() between them, reached by every thread of the block.\n";
  }
  return os.str();
}

// TSan's reports other than races, as it wrote them, but each distinct one once: reports
// that differ only in addresses, thread ids or PIDs are one, with a count.
std::string dedup_reports(const std::string& text) {
  static const std::regex numbers(R"(0x[0-9a-f]+|\bT\d+\b|==\d+==|\(pid=\d+\))");
  std::vector<std::string> reports(1);  // TSan puts a line of '=' before and after each
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of('=') == std::string::npos && line.size() >= 10) {
      if (!reports.back().empty()) reports.emplace_back();
      continue;
    }
    reports.back() += line + "\n";
  }
  if (reports.back().empty()) reports.pop_back();
  std::vector<std::pair<std::string, int>> seen;  // normalised text -> copies after the first
  std::string out;
  std::vector<std::string> firsts;
  for (const std::string& r : reports) {
    const std::string key = std::regex_replace(r, numbers, "#");
    auto it = std::find_if(seen.begin(), seen.end(), [&](const auto& s) { return s.first == key; });
    if (it != seen.end()) {
      ++it->second;
      continue;
    }
    seen.emplace_back(key, 0);
    firsts.push_back(r);
  }
  for (size_t i = 0; i < firsts.size(); ++i) {
    out += firsts[i];
    if (seen[i].second > 0)
      out += "  (and " + std::to_string(seen[i].second) + " more like it)\n";
  }
  return out;
}

}  // namespace

#if defined(PA_EMU_CHECK)
void* current_fiber() { return __tsan_get_current_fiber(); }
void* create_fiber() { return __tsan_create_fiber(0); }
void destroy_fiber(void* fiber) { __tsan_destroy_fiber(fiber); }
void set_fiber_name(void* fiber, const char* name) { __tsan_set_fiber_name(fiber, name); }
void switch_to(void* fiber) { __tsan_switch_to_fiber(fiber, 1 /* no sync */); }
void acquire(const void* token) { __tsan_acquire(const_cast<void*>(token)); }
void release(const void* token) { __tsan_release(const_cast<void*>(token)); }
Quiet::Quiet() { __tsan_ignore_thread_begin(); }
Quiet::~Quiet() { __tsan_ignore_thread_end(); }
#endif

std::string take_report(const void* kernel_address) {
  if (!kEnabled) return "";
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_log_path.empty()) return "";
  std::ifstream in(g_log_path, std::ios::binary);
  if (!in) return "";
  in.seekg(g_log_offset);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  g_log_offset += std::streamoff(text.size());
  if (text.empty()) return "";
  const std::string found = report_from_log(text, kernel_name(kernel_address), true);
  return found + "  (ThreadSanitizer's full report: " + g_log_path + ")";
}

std::string report_from_log(const std::string& text, const std::string& name, bool live) {
  const std::vector<Race> races = parse(text);
  const char* kernel = name.c_str();
  // Races that differ only in the threads, the address or the callers (the same two
  // access lines, the same kind of memory) are one bug: say it once, with a count.
  struct Group {
    std::string text;
    int more = 0;
  };
  std::vector<std::pair<std::string, Group>> groups;
  auto first_line = [](const Access& a) { return a.frames.empty() ? where_line(a) : a.frames[0]; };
  for (size_t i = 0; i < races.size(); ++i) {
    const Moment* moment = nullptr;
    if (live) {
      const int k = g_moments_taken++;
      if (k < g_moment_count && k < kMaxMoments && g_moments[k].interval >= 0) moment = &g_moments[k];
    }
    const Race& r = races[i];
    const std::string memory = describe_address(r.now.address, r.location);
    static const std::regex hex("0x[0-9a-f]+");
    const std::string key = std::regex_replace(memory.substr(0, memory.find(" (")), hex, "#") +
                            "|" + r.now.kind + "|" +
                            first_line(r.now) + "|" + r.before.kind + "|" + first_line(r.before) +
                            "|" + std::to_string(block_of(who(r, r.now)) == block_of(who(r, r.before)));
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == key; });
    if (it != groups.end()) ++it->second.more;
    else groups.push_back({key, Group{describe(r, kernel, moment), 0}});
  }
  std::string out;
  for (size_t i = 0; i < groups.size() && i < 2; ++i) {
    out += groups[i].second.text;
    if (groups[i].second.more > 0)
      out += "  (and " + std::to_string(groups[i].second.more) +
             " more like it: the same two lines, other threads, addresses or callers)\n";
  }
  if (groups.size() > 2) {
    int rest = 0;
    for (size_t i = 2; i < groups.size(); ++i) rest += 1 + groups[i].second.more;
    out += "  (" + std::to_string(rest) + (rest == 1 ? " more race" : " more races") +
           " in this launch, at other lines)\n";
  }
  if (races.empty()) out = "emulator racecheck: ThreadSanitizer reported a problem:\n" + dedup_reports(text);
  return out;
}

// Called at start-up in checked mode: TSan's reports go to our file, not to stderr.
void start_reporting() {
  if (!kEnabled) return;
#if defined(PA_EMU_CHECK)
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_log_path.empty()) return;
  const std::string base = base_path();
  __sanitizer_set_report_path(base.c_str());
  g_log_path = base + "." + std::to_string(getpid());
  std::remove(g_log_path.c_str());
  g_log_offset = 0;
#endif
}

}  // namespace emu::race

#if defined(PA_EMU_CHECK)
// TSan calls this, synchronously, for every report it is about to write: the racing thread
// is the fiber running now, so its block's barrier interval is the one to report.
namespace __tsan {
struct ReportDesc;
bool OnReport(const ReportDesc*, bool suppressed) {
  using namespace emu::race;
  if (g_moment_count < kMaxMoments) {
    Moment& m = g_moments[g_moment_count];
    m = Moment{-1, "", 0};
    if (const emu::Block* b = emu::current_block())
      m = Moment{b->interval(), b->interval_file() ? b->interval_file() : "", b->interval_line()};
  }
  ++g_moment_count;
  return suppressed;
}
}  // namespace __tsan
#endif
