// mbarrier on the emulator: phases, pending arrivals and transaction bytes, as the PTX ISA
// defines them. A phase completes when its arrivals are all in and its transaction count is
// back to zero; the count may go below zero first (a copy's bytes completing before their
// expect_tx), which is why copies land only once the arrivals are in. A copy that completes
// bytes on a barrier (tma.cpp) lands when a waiter polls that barrier: the latest point the
// hardware allows, so a read of its destination before the wait meets the poison.
//
// A wait is a scheduling point (PA_EMU_SCHEDULE picks who runs next); a thread whose phase
// has not completed parks until an arrival or a landing completes it. When no thread can
// move, the block fails with the barriers' state: which barrier, which phase, how many
// arrivals are missing, the bytes expected and arrived, and who waits where.
#include <algorithm>
#include <cstring>
#include <string>

#include "block.h"
#include "init_check.h"
#include "race_check.h"

namespace emu {

namespace {
constexpr int64_t kTxLimit = (int64_t(1) << 20) - 1;  // the PTX ISA's range of tx-count

std::string barrier_name(const Mbarrier& m) {
  return "the mbarrier at shared " + hex_address(m.address) + " (initialised at " + place(m.init) +
         " for " + std::to_string(m.count) + (m.count == 1 ? " arrival" : " arrivals") +
         " a phase)";
}

std::string thread_ranges(const std::vector<int>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (i) out += ", ";
    out += std::to_string(ids[i]);
    if (j > i) out += "-" + std::to_string(ids[j]);
    i = j + 1;
  }
  return out;
}
}  // namespace

void Hopper::begin_block(Block* b) {
  block = b;
  if (!used) return;
  used = false;
  barriers.clear();
  threads.clear();
  for (NamedBarrier& n : named) n = NamedBarrier{};
  registers.clear();
  meets.clear();
  progress = 0;
  progress_at_timeout = ~0ull;
  idle_timeouts = 0;
}

void Hopper::use() {
  if (used) return;
  used = true;
  const size_t n = block->threads().size();
  threads.assign(n, ThreadHopper{});
  registers.assign((n + 127) / 128, {});
  meets.assign((n + 127) / 128, WgmmaMeet{});
}

Mbarrier& Hopper::barrier(void* bar, const char* what, const Site& at) {
  use();
  const uint32_t a = hopper::shared_address(bar, what, at.file, at.line);
  auto it = barriers.find(a);
  if (it == barriers.end())
    block->fail_here(std::string(what) + " at " + place(at) + " uses the mbarrier at shared " +
                     hex_address(a) +
                     ", which no thread of this block has initialised (mbarrier_init, then "
                     "fence_mbarrier_init and a __syncthreads() before any other thread uses it)");
  return it->second;
}

void Hopper::settle(Mbarrier& m) {
  if (m.pending != 0 || m.tx != 0) return;
  ++m.phase;
  m.pending = m.count;
  m.expected_bytes = m.completed_bytes = 0;
  ++progress;
  const unsigned parity = unsigned(m.phase & 1);
  for (Thread& t : block->threads())
    if (t.wait == Wait::Mbarrier && t.mbar == m.address && t.parity != parity) t.wait = Wait::None;
}

void Hopper::land(Mbarrier& m) {
  if (m.pending != 0 || m.flying.empty()) return;
  size_t n = 0;
  while (n < m.flying.size() && m.tx > 0) {
    PendingLoad& c = m.flying[n++];
    std::memcpy(c.dst, c.image.data(), c.image.size());
    async_view_landed(c.dst, c.image.size());
    initcheck::async_landed(c.dst, c.image.size());
    m.tx -= int64_t(c.image.size());
  }
  m.flying.erase(m.flying.begin(), m.flying.begin() + long(n));
  ++progress;
  settle(m);
}

bool Hopper::unstick() {
  // The scheduler's own context, not a fiber's: a copy landed here is the async proxy's
  // write, ordered by the barrier, not a write of the scheduler for ThreadSanitizer to see.
  race::Quiet quiet;
  for (auto& [address, m] : barriers) {
    bool waited = false;
    for (const Thread& t : block->threads())
      waited |= t.wait == Wait::Mbarrier && t.mbar == address;
    if (waited) land(m);
  }
  for (const Thread& t : block->threads())
    if (t.wait == Wait::None) {
      idle_timeouts = 0;
      return true;
    }
  // try_wait may give up (its time limit): let the spinning ones go round again, unless
  // nothing has moved on any barrier since the last time they did.
  bool spinning = false;
  for (const Thread& t : block->threads()) spinning |= t.wait == Wait::Mbarrier && !t.blocking;
  if (!spinning) return false;
  if (progress == progress_at_timeout) {
    if (++idle_timeouts >= 3) return false;
  } else {
    idle_timeouts = 0;
    progress_at_timeout = progress;
  }
  for (Thread& t : block->threads())
    if (t.wait == Wait::Mbarrier && !t.blocking) {
      t.timed_out = true;
      t.wait = Wait::None;
    }
  return true;
}

std::string Hopper::describe_stuck() const {
  std::string out;
  const std::vector<Thread>& ts = block->threads();
  for (const auto& [address, m] : barriers) {
    std::vector<int> waiters;
    for (size_t i = 0; i < ts.size(); ++i)
      if (ts[i].wait == Wait::Mbarrier && ts[i].mbar == address) waiters.push_back(int(i));
    if (waiters.empty()) continue;
    const uint64_t expected = m.expected_bytes;
    out += "  " + barrier_name(m) + ": phase " + std::to_string(m.phase) + " (parity " +
           std::to_string(m.phase & 1) + ") is not complete: " + std::to_string(m.pending) +
           " of " + std::to_string(m.count) + " arrivals missing; " + std::to_string(expected) +
           " bytes expected (expect_tx), " + std::to_string(m.completed_bytes) +
           " bytes arrived (complete_tx of its copies)";
    if (m.tx < 0)
      out += "; its copies brought " + std::to_string(-m.tx) +
             " bytes more than the phase expects: the expect_tx is short";
    else if (m.pending == 0 && m.tx > 0)
      out += "; the " + std::to_string(m.tx) +
             " bytes missing were never issued: no copy is on its way to complete them";
    out += "\n";
    // Threads that arrived on it once and are gone without arrive_drop.
    std::vector<int> gone;
    for (size_t i = 0; i < ts.size() && i < m.arrived.size(); ++i)
      if (m.arrived[i] && !m.dropped[i] && ts[i].wait == Wait::Done) gone.push_back(int(i));
    if (!gone.empty() && m.pending > 0) {
      std::string warps;
      for (size_t i = 0; i < gone.size(); ++i)
        if (i == 0 || gone[i] / 32 != gone[i - 1] / 32)
          warps += (warps.empty() ? "" : ", ") + std::to_string(gone[i] / 32);
      out += "    threads " + thread_ranges(gone) + " (warp" +
             (warps.find(',') == std::string::npos ? " " : "s ") + warps +
             ") arrived on it in an earlier phase and exited without mbarrier_arrive_drop: "
             "the barrier still counts their arrivals, so its phase never completes (on the "
             "GPU, a hang). A thread that leaves early drops out with mbarrier_arrive_drop.\n";
    }
    // A first wait that no arrival can ever complete: the producer's parity.
    bool any_arrived = false;
    for (unsigned char a : m.arrived) any_arrived |= a != 0;
    for (int w : waiters)
      if (m.phase == 0 && !any_arrived && ts[w].parity == 0) {
        out += "    thread " + std::to_string(w) +
               " waits with parity 0, for phase 0 of this barrier to complete. If it is a "
               "producer waiting for an empty stage that no consumer has released yet, its "
               "first wait takes parity 1: the phase before phase 0 counts as complete.\n";
        break;
      }
    for (const PendingLoad& c : m.flying)
      out += "    in flight on it: " + std::to_string(c.image.size()) + " bytes of " +
             (c.tensor ? "cp.async.bulk.tensor" : "cp.async.bulk") + " issued at " +
             place(c.issued) + " by thread " + std::to_string(c.thread) + "\n";
  }
  for (size_t w = 0; w < meets.size(); ++w)
    if (meets[w].arrived) {
      std::vector<int> missing;
      for (int t = int(w) * 128; t < int(w + 1) * 128 && t < int(ts.size()); ++t)
        if (!(ts[t].wait == Wait::Warpgroup)) missing.push_back(t);
      out += "  warpgroup " + std::to_string(w) + ": " + std::to_string(meets[w].arrived) +
             " of its 128 threads arrived at the wgmma_mma_async at " + place(meets[w].at) +
             "; threads " + thread_ranges(missing) +
             " have not (wgmma is .sync.aligned: all 128 threads of a warpgroup issue it)\n";
    }
  for (unsigned id = 1; id < 16; ++id)
    if (named[id].count)
      out += "  named barrier " + std::to_string(id) + ": " + std::to_string(named[id].arrived) +
             " of " + std::to_string(named[id].count) + " threads arrived (the first at " +
             place(named[id].first) + ")\n";
  return out;
}

namespace hopper {

void mbarrier_init(void* bar, unsigned count, const char* file, int line) {
  race::Quiet quiet;
  Block* b = current_block();
  Hopper& h = b->hopper();
  h.use();
  const uint32_t a = shared_address(bar, "mbarrier_init", file, line);
  if (a & 7)
    b->fail_here("mbarrier_init at " + place(Site{file, line}) + ": the mbarrier at shared " +
                 hex_address(a) + " is not 8-byte aligned (an mbarrier is a .b64 object)");
  if (count < 1 || count > kTxLimit)
    b->fail_here("mbarrier_init at " + place(Site{file, line}) + ": " + std::to_string(count) +
                 " arrivals a phase; the count must be from 1 to 2^20 - 1");
  Mbarrier& m = h.barriers[a];
  m = Mbarrier{};
  m.address = a;
  m.init = Site{file, line};
  m.count = m.pending = count;
  m.arrived.assign(b->threads().size(), 0);
  m.dropped.assign(b->threads().size(), 0);
  ++h.progress;
  race::release(&m.token);
}

void fence_mbarrier_init(const char*, int) {}

uint64_t mbarrier_arrive(void* bar, unsigned count, uint32_t expect, bool drop, const char* what,
                         const char* file, int line) {
  race::Quiet quiet;
  Block* b = current_block();
  Hopper& h = b->hopper();
  const Site at{file, line};
  Mbarrier& m = h.barrier(bar, what, at);
  h.land(m);  // copies of a phase whose arrivals are in land before the next phase starts
  if (expect) {
    m.tx += expect;
    m.expected_bytes += expect;
    if (m.tx > kTxLimit)
      b->fail_here(std::string(what) + " at " + place(at) + " raises the transaction count of " +
                   barrier_name(m) + " to " + std::to_string(m.tx) +
                   " bytes, over the PTX limit of 2^20 - 1");
  }
  if (count == 0 || count > m.pending)
    b->fail_here(std::string(what) + " at " + place(at) + " arrives " + std::to_string(count) +
                 " times on " + barrier_name(m) + ", whose phase " + std::to_string(m.phase) +
                 " has " + std::to_string(m.pending) +
                 " arrivals left: more arrivals than the barrier was initialised for (is a "
                 "thread arriving twice, or did mbarrier_init count fewer threads?)");
  const uint64_t state = m.phase;
  const int me = b->thread_index();
  m.pending -= count;
  m.arrived[me] = 1;
  if (drop) {
    m.count -= count;
    m.dropped[me] = 1;
  }
  ++h.progress;
  race::release(&m.token);
  h.settle(m);
  return state;
}

void mbarrier_expect_tx(void* bar, uint32_t bytes, const char* file, int line) {
  race::Quiet quiet;
  Block* b = current_block();
  Hopper& h = b->hopper();
  const Site at{file, line};
  Mbarrier& m = h.barrier(bar, "mbarrier_expect_tx", at);
  h.land(m);
  m.tx += bytes;
  m.expected_bytes += bytes;
  if (m.tx > kTxLimit)
    b->fail_here("mbarrier_expect_tx at " + place(at) + " raises the transaction count of " +
                 barrier_name(m) + " to " + std::to_string(m.tx) +
                 " bytes, over the PTX limit of 2^20 - 1");
  ++h.progress;
}

bool mbarrier_wait(void* bar, unsigned parity, bool blocking, const char* file, int line) {
  race::Quiet quiet;
  Block* b = current_block();
  Hopper& h = b->hopper();
  const Site at{file, line};
  const char* what = blocking ? "mbarrier_wait_parity" : "mbarrier_try_wait_parity";
  Mbarrier* m = &h.barrier(bar, what, at);
  if (parity > 1)
    b->fail_here(std::string(what) + " at " + place(at) + ": parity " + std::to_string(parity) +
                 " (a phase parity is 0 or 1)");
  const int me = b->thread_index();
  b->let_others_run();  // a scheduling point, as a wait on the GPU is
  for (;;) {
    if ((m->phase & 1) != parity) break;
    h.land(*m);  // the poll: copies whose arrivals are in land now
    if ((m->phase & 1) != parity) break;
    Thread& t = b->threads()[me];
    t.mbar = m->address;
    t.parity = parity;
    t.blocking = blocking;
    t.timed_out = false;
    b->park(Wait::Mbarrier, what, file, line);
    if (b->threads()[me].timed_out) {
      b->threads()[me].timed_out = false;
      return false;
    }
  }
  // The wait succeeded. Parity names a phase only up to two: a thread two or more phases
  // behind the barrier cannot tell which phase it saw complete.
  uint64_t& seen = h.threads[me].seen[m->address];
  if (m->phase >= seen + 2)
    b->fail_here(
        "emulator mbarrier check: " + std::string(what) + " at " + place(at) + " (parity " +
        std::to_string(parity) + ") succeeded on " + barrier_name(*m) + " with " +
        std::to_string(m->phase) + " phases complete, but this thread's last wait on it saw " +
        std::to_string(seen) + " complete: phase" +
        (m->phase - 1 - seen == 1 ? " " + std::to_string(seen)
                                  : "s " + std::to_string(seen) + " to " + std::to_string(m->phase - 2)) +
        " completed unseen. A wait tells phases apart by parity only, so this one cannot tell "
        "phase " + std::to_string(m->phase - 1) + " from the phase two before it (a skipped "
        "wait, or a parity flipped at the wrong time); what the phases it missed guarded (a "
        "stage's data) may have been overwritten since.");
  seen = m->phase;
  race::acquire(&m->token);
  return true;
}

}  // namespace hopper
}  // namespace emu
