// Runs one thread block as fibers, and implements the block- and warp-level
// synchronisation that kernels call. Everything here runs on one OS thread.
#include "block.h"

#include <cstring>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>
#include <sstream>

#include "crash_report.h"
#include "race_check.h"

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

namespace emu {
namespace ctx = boost::context;

namespace {
thread_local Block* tl_block = nullptr;

// Hands Boost.Context a stack we already own; nothing to free per fiber.
struct SlotStack {
  void* top;
  size_t size;
  ctx::stack_context allocate() {
    ctx::stack_context sc;
    sc.sp = top;
    sc.size = size;
    return sc;
  }
  void deallocate(ctx::stack_context&) noexcept {}
};

struct AbortBlock {};  // unwinds a fiber whose block failed

std::string hex_mask(unsigned m) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", m);
  return buf;
}

// "0-31, 40, 42-45" for a sorted list of thread indices.
std::string ranges(const std::vector<int>& ids) {
  std::ostringstream os;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (i) os << ", ";
    os << ids[i];
    if (j > i) os << "-" << ids[j];
    i = j + 1;
  }
  return os.str();
}
}  // namespace

Block* current_block() { return tl_block; }

bool parse_schedule(const char* text, Schedule* out) {
  std::string s = text ? text : "forward";
  if (s.empty() || s == "forward") { out->order = Order::Forward; return true; }
  if (s == "reverse") { out->order = Order::Reverse; return true; }
  if (s == "greedy") { out->order = Order::Greedy; return true; }
  if (s.rfind("random", 0) == 0) {
    out->order = Order::Random;
    out->seed = 1;
    if (s.size() == 6) return true;
    if (s[6] != ':' || s.size() == 7) return false;
    char* end = nullptr;
    out->seed = std::strtoull(s.c_str() + 7, &end, 10);
    return *end == '\0';
  }
  return false;
}

Block::~Block() {
  if (stacks_) munmap(stacks_, stack_slots_ * slot_bytes_);
}

std::string Block::where() const { return where(current_); }

std::string Block::where(int thread) const {
  std::ostringstream os;
  os << "block (" << block_idx_.x << "," << block_idx_.y << "," << block_idx_.z << ")";
  if (thread >= 0) {
    const uint3 t = threads_[thread].idx;
    os << ", thread (" << t.x << "," << t.y << "," << t.z << ")";
  }
  return os.str();
}

bool Block::is_stack_guard(uintptr_t a) const {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t lo = reinterpret_cast<uintptr_t>(stacks_);
  if (!stacks_ || a < lo || a >= lo + stack_slots_ * slot_bytes_) return false;
  return (a - lo) % slot_bytes_ < page;
}

void Block::abandon_after_fault(int sig, uintptr_t address, void* pc) {
  Thread& t = threads_[current_];
  t.abandoned = true;
  t.wait = Wait::Done;
  fault_thread_ = current_;
  fault_sig_ = sig;
  fault_address_ = address;
  fault_pc_ = pc;
  race::release(&end_token_);  // what it did before the fault is ordered, as at an exit
  race::switch_to(race_scheduler_);
  scheduler_ = std::move(scheduler_).resume();  // run() never resumes this fiber
  std::abort();
}

void Block::start_fibers(const std::function<void()>& body, size_t stack_bytes) {
  const size_t n = threads_.size();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t slot = (stack_bytes + page - 1) / page * page + page;
  if (n > stack_slots_ || slot != slot_bytes_) {
    if (stacks_) munmap(stacks_, stack_slots_ * slot_bytes_);
    void* p = mmap(nullptr, n * slot, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("emulator: cannot map fiber stacks");
    stacks_ = static_cast<char*>(p);
    stack_slots_ = n;
    slot_bytes_ = slot;
    for (size_t i = 0; i < n; ++i) mprotect(stacks_ + i * slot, page, PROT_NONE);
  }
  while (race_fibers_.size() < n) race_fibers_.push_back(race::create_fiber());
  if (race::kEnabled) {
    for (size_t i = 0; i < n; ++i) {
      const uint3 b = block_idx_, t = threads_[i].idx;
      char name[64];
      std::snprintf(name, sizeof name, "block (%u,%u,%u), thread (%u,%u,%u), warp %zu lane %zu",
                    b.x, b.y, b.z, t.x, t.y, t.z, i / 32, i % 32);
      race::set_fiber_name(race_fibers_[i], name);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    SlotStack stack{stacks_ + (i + 1) * slot_bytes_, slot_bytes_ - page};
    threads_[i].fiber = ctx::fiber(std::allocator_arg, stack,
                                   [this, i, &body](ctx::fiber&& sched) -> ctx::fiber {
      scheduler_ = std::move(sched);
      race::acquire(&start_token_);  // what the launch and earlier blocks wrote is visible
      try {
        if (error_.empty()) body();  // a thread never started before a failure stays so
      } catch (const AbortBlock&) {
        race::Quiet quiet;
        // the block failed while this thread waited: just leave
      } catch (const std::exception& e) {
        race::Quiet quiet;
        if (error_.empty()) error_ = where() + ": the kernel threw: " + e.what();
      }
      {
        race::Quiet quiet;
        thread_exited(static_cast<int>(i));
      }
      race::release(&end_token_);
      race::switch_to(race_scheduler_);
      return std::move(scheduler_);
    });
  }
}

void Block::resume(int i) {
  current_ = i;
  threadIdx = threads_[i].idx;
  race::switch_to(race_fibers_[i]);
  threads_[i].fiber = std::move(threads_[i].fiber).resume();
  current_ = -1;
}

void Block::yield() {
  race::switch_to(race_scheduler_);
  scheduler_ = std::move(scheduler_).resume();
  if (!error_.empty()) throw AbortBlock{};  // resumed only to unwind
}

void Block::park(Wait wait, const char* what, const char* file, int line) {
  race::Quiet quiet;
  Thread& t = threads_[current_];
  t.wait = wait;
  t.what = what;
  t.file = file;
  t.line = line;
  yield();
}

void Block::let_others_run() {
  race::Quiet quiet;
  yield();
}

void Block::fail(const std::string& message) {
  race::Quiet quiet;
  if (error_.empty()) error_ = message;
  Thread& t = threads_[current_];
  t.wait = Wait::Block;  // parked for good; run() unwinds it
  yield();
  throw AbortBlock{};
}

std::string Block::run(const std::function<void()>& body, uint3 block_idx, dim3 block_dim,
                       const Schedule& schedule, size_t stack_bytes) {
  tl_block = this;
  block_idx_ = block_idx;
  error_.clear();
  fault_thread_ = -1;
  const int n = static_cast<int>(block_dim.x * block_dim.y * block_dim.z);
  threads_.clear();
  threads_.resize(n);
  for (int i = 0; i < n; ++i) {
    const unsigned x = i % block_dim.x, y = (i / block_dim.x) % block_dim.y,
                   z = i / (block_dim.x * block_dim.y);
    threads_[i].idx = make_uint3(x, y, z);
  }
  warps_.assign((n + 31) / 32, Warp{});
  for (int w = 0; w < static_cast<int>(warps_.size()); ++w) {
    const int lanes = std::min(32, n - 32 * w);
    warps_[w].existing = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1);
  }
  live_ = n;
  hopper_.begin_block(this);
  barrier_accum_ = barrier_result_ = 0;
  atomics_ = 0;
  interval_ = 0;
  interval_file_ = nullptr;
  interval_line_ = 0;
  race_scheduler_ = race::current_fiber();
  race::release(&start_token_);
  start_fibers(body, stack_bytes);

  std::mt19937_64 rng(schedule.seed * 0x9E3779B97F4A7C15ull + block_idx.x +
                      (uint64_t(block_idx.y) << 20) + (uint64_t(block_idx.z) << 40));
  std::vector<int> order(n);
  while (live_ > 0 && error_.empty() && fault_thread_ < 0) {
    bool ran = false;
    if (schedule.order == Order::Greedy) {
      // Always the lowest-numbered runnable thread: warp 0 runs ahead of the others.
      for (int i = 0; i < n && error_.empty() && fault_thread_ < 0; ++i) {
        if (threads_[i].wait == Wait::None) {
          resume(i);
          ran = true;
          i = -1;  // start the scan again from thread 0
        }
      }
    } else {
      std::iota(order.begin(), order.end(), 0);
      if (schedule.order == Order::Reverse) std::reverse(order.begin(), order.end());
      if (schedule.order == Order::Random) std::shuffle(order.begin(), order.end(), rng);
      for (int i : order) {
        if (!error_.empty() || fault_thread_ >= 0) break;
        if (threads_[i].wait == Wait::None) {
          resume(i);
          ran = true;
        }
      }
    }
    if (!ran && live_ > 0 && error_.empty() && fault_thread_ < 0 && !release_block_barrier() &&
        !(hopper_.used && error_.empty() && hopper_.unstick()) && error_.empty()) {
      error_ = "deadlock in block (" + std::to_string(block_idx.x) + "," +
               std::to_string(block_idx.y) + "," + std::to_string(block_idx.z) +
               "): no thread can move.\n" + describe_waiters() +
               (hopper_.used ? hopper_.describe_stuck() : std::string());
    }
  }
  if (fault_thread_ >= 0) {
    // A memcheck finding (checked mode): the faulting access never happened, so memory is
    // as the kernel left it; the block fails with the report, and the launch with it.
    error_ = fault_report(fault_sig_, fault_address_, fault_pc_, where(fault_thread_),
                          is_stack_guard(fault_address_));
    // Its fiber stops where it faulted: kernel code there has no way to unwind (a load is
    // not a call that may throw), so the fiber is dropped, never destroyed (destroying it
    // would unwind it), and its stack slot is reused by the next block. Its TSan fiber
    // goes too: the next thread in that slot starts with a clean history.
    new ctx::fiber(std::move(threads_[fault_thread_].fiber));
    race::destroy_fiber(race_fibers_[fault_thread_]);
    race_fibers_[fault_thread_] = race::create_fiber();
  }
  // Unwind every fiber still parked (only after an error): resuming it makes yield() throw.
  for (int i = 0; i < n; ++i)
    if (threads_[i].fiber) resume(i);
  race::acquire(&end_token_);  // the next block on this worker starts after this one
  tl_block = nullptr;
  return error_;
}

std::string Block::describe_waiters() const {
  std::map<std::string, std::vector<int>> groups;
  for (size_t i = 0; i < threads_.size(); ++i) {
    const Thread& t = threads_[i];
    if (t.wait == Wait::Block)
      groups[std::string("__syncthreads at ") + t.file + ":" + std::to_string(t.line)]
          .push_back(static_cast<int>(i));
    if (t.wait == Wait::Warp)
      groups[std::string(t.what) + " at " + t.file + ":" + std::to_string(t.line)]
          .push_back(static_cast<int>(i));
    if (t.wait == Wait::Mbarrier)
      groups[std::string(t.what) + " (parity " + std::to_string(t.parity) +
             ") on the mbarrier at shared " + hex_address(t.mbar) + " at " +
             place(Site{t.file, t.line})]
          .push_back(static_cast<int>(i));
    if (t.wait == Wait::Named || t.wait == Wait::Warpgroup)
      groups[std::string(t.what) + " at " + place(Site{t.file, t.line})].push_back(static_cast<int>(i));
  }
  std::ostringstream os;
  for (const auto& [where, ids] : groups)
    os << "  threads " << ranges(ids) << " wait in " << where << "\n";
  for (size_t w = 0; w < warps_.size(); ++w)
    for (const WarpGroup& g : warps_[w].pending)
      os << "  warp " << w << ": " << g.what << " at " << g.file << ":" << g.line
         << " waits for lanes " << hex_mask(g.mask & ~g.arrived) << " (mask "
         << hex_mask(g.mask) << ")\n";
  return os.str();
}

bool Block::release_block_barrier() {
  // Every live thread must wait at a __syncthreads, and all at the same one.
  const Thread* first = nullptr;
  bool same_place = true;
  for (const Thread& t : threads_) {
    if (t.wait == Wait::Done) continue;
    if (t.wait != Wait::Block) return false;
    if (!first) first = &t;
    else if (t.line != first->line || std::string(t.file) != first->file) same_place = false;
  }
  if (!first) return false;
  if (!same_place) {
    error_ = "__syncthreads reached at different places in block (" +
             std::to_string(block_idx_.x) + "," + std::to_string(block_idx_.y) + "," +
             std::to_string(block_idx_.z) +
             ") (a barrier inside a branch that not every thread takes):\n" +
             describe_waiters();
    return true;
  }
  barrier_result_ = barrier_accum_;
  barrier_accum_ = 0;
  ++interval_;
  interval_file_ = first->file;
  interval_line_ = first->line;
  for (Thread& t : threads_)
    if (t.wait == Wait::Block) t.wait = Wait::None;
  return true;
}

void Block::syncthreads(int contribution, const char* file, int line) {
  race::Quiet quiet;
  Thread& t = threads_[current_];
  barrier_accum_ += contribution;
  t.wait = Wait::Block;
  t.file = file;
  t.line = line;
  race::release(&barrier_token_);
  yield();
  race::acquire(&barrier_token_);
}

void Block::thread_exited(int i) {
  Thread& t = threads_[i];
  t.wait = Wait::Done;
  --live_;
  if (hopper_.used) hopper_.thread_exited(i);
  Warp& w = warps_[i / 32];
  const unsigned bit = 1u << (i % 32);
  w.exited |= bit;
  for (const WarpGroup& g : w.pending)
    if ((g.mask & bit) && error_.empty())
      error_ = where() + " exited while lanes " + hex_mask(g.arrived) + " of warp " +
               std::to_string(i / 32) + " wait for it in " + g.what + " at " + g.file +
               ":" + std::to_string(g.line) + " (mask " + hex_mask(g.mask) + ")";
}

unsigned Block::active_mask() const {
  const Warp& w = warps_[current_ / 32];
  return w.existing & ~w.exited;
}

uint64_t Block::warp_exchange(unsigned mask, uint64_t value, int src_lane, unsigned* ballot,
                              const char* what, const char* file, int line) {
  race::Quiet quiet;
  const int me = current_, lane = me % 32, base = me - lane;
  Thread& t = threads_[me];
  Warp& w = warps_[me / 32];
  const unsigned need = mask & w.existing;  // lanes past the end of the block don't exist
  // The call site, for the messages below: built only when one is (every shuffle of every
  // lane comes here; a string built each time cost ~10% of an engine test's time).
  const auto here = [&] { return std::string(what) + " at " + file + ":" + std::to_string(line); };
  if (!(need & (1u << lane)))
    fail(where() + ": " + here() + " passes mask " + hex_mask(mask) +
         ", which does not include the calling lane " + std::to_string(lane));
  if (need & w.exited)
    fail(where() + ": " + here() + " names lanes " + hex_mask(need & w.exited) +
         " in its mask, but they have exited");
  if (src_lane < 0 || src_lane > 31 || !(need & (1u << src_lane)))
    fail(where() + ": " + here() + " reads lane " + std::to_string(src_lane) +
         ", which is not in the mask " + hex_mask(mask));

  WarpGroup* g = nullptr;
  for (WarpGroup& p : w.pending) {
    if (p.mask == need) {
      // One shuffle is one instruction: every lane must reach it from the same line.
      // (The same call site passes the same literals: the pointers first, then the text.)
      if (p.line != line || (p.file != file && std::strcmp(p.file, file) != 0) ||
          (p.what != what && std::strcmp(p.what, what) != 0))
        fail(where() + ": lanes of warp " + std::to_string(me / 32) +
             " meet in different warp primitives: lanes " + hex_mask(p.arrived) + " wait in " +
             p.what + " at " + p.file + ":" + std::to_string(p.line) + ", lane " +
             std::to_string(lane) + " arrives at " + here() + " (mask " + hex_mask(need) +
             "). A shuffle or __syncwarp inside a branch that only some lanes of the mask "
             "take: move it out of the branch, or narrow the mask to the lanes that take it.");
      g = &p;
      break;
    }
    if (p.mask & need)
      fail(where() + ": shuffle mask mismatch: " + here() + " passes mask " +
           hex_mask(need) + ", but lanes " + hex_mask(p.arrived) + " wait in " + p.what +
           " at " + p.file + ":" + std::to_string(p.line) + " with mask " + hex_mask(p.mask));
  }
  if (!g) {
    w.pending.push_back(WarpGroup{need, 0, what, file, line});
    g = &w.pending.back();
  }
  t.value = value;
  t.src = src_lane;
  g->arrived |= 1u << lane;
  race::release(&warp_tokens_[me / 32]);
  if (g->arrived != g->mask) {
    t.wait = Wait::Warp;
    t.what = what;
    t.file = file;
    t.line = line;
    yield();  // the last lane to arrive hands us our result
  } else {
    // Last to arrive: everyone's value is published; deliver and wake the others.
    unsigned votes = 0;
    for (int l = 0; l < 32; ++l)
      if ((need >> l) & 1u && threads_[base + l].value) votes |= 1u << l;
    for (int l = 0; l < 32; ++l) {
      if (!((need >> l) & 1u)) continue;
      Thread& u = threads_[base + l];
      u.result = threads_[base + u.src].value;
      u.ballot = votes;
      if (base + l != me) u.wait = Wait::None;
    }
    w.pending.erase(w.pending.begin() + (g - w.pending.data()));
  }
  race::acquire(&warp_tokens_[me / 32]);
  if (ballot) *ballot = t.ballot;
  return t.result;
}

}  // namespace emu
