// Hopper's other synchronisation on the emulator: fence.proxy.async (recorded per thread, for
// checked mode's proxy check), named barriers (bar.sync id, count: a subset of the block's
// warps meets, as two warpgroups taking turns do), and setmaxnreg (nothing to do on a CPU,
// but its rules are checked: a multiple of 8 from 24 to 256, the same in a whole warpgroup).
#include <string>

#include "block.h"
#include "race_check.h"

namespace emu {
namespace {
char g_named_tokens[16];  // checked mode: a named barrier's arrivals release, its waiters acquire
}

namespace hopper {

void fence_proxy_async(const char*, int) {
  race::Quiet quiet;
  Block* b = current_block();
  ++b->threads()[size_t(b->thread_index())].proxy_fences;
  async_view_fence();
}

void named_barrier(unsigned id, unsigned count, bool arrive_only, const char* file, int line) {
  race::Quiet quiet;
  Block* b = current_block();
  Hopper& h = b->hopper();
  h.use();
  const Site at{file, line};
  const char* what = arrive_only ? "named_barrier_arrive" : "named_barrier_sync";
  const unsigned threads = unsigned(b->threads().size());
  const std::string call = std::string(what) + "(" + std::to_string(id) + ", " +
                           std::to_string(count) + ") at " + place(at);
  if (id == 0 || id > 15)
    b->fail_here(call + ": barrier " + std::to_string(id) +
                 " is not one of 1-15 (barrier 0 is __syncthreads()'s)");
  if (count == 0 || count % 32 || count > (threads + 31) / 32 * 32)
    b->fail_here(call + ": a named barrier's count is a nonzero multiple of 32 (whole warps), "
                 "at most the block's " + std::to_string(threads) + " threads");
  NamedBarrier& n = h.named[id];
  if (n.count && n.count != count)
    b->fail_here(call + ": barrier " + std::to_string(id) + " is already waited on with count " +
                 std::to_string(n.count) + " (first at " + place(n.first) +
                 "); every thread of one round must pass the same count");
  if (!n.count) {
    n.count = count;
    n.first = at;
  }
  ++n.arrived;
  race::release(&g_named_tokens[id]);
  const int me = b->thread_index();
  if (n.arrived == n.count) {
    for (int t : n.waiting) b->threads()[size_t(t)].wait = Wait::None;
    n = NamedBarrier{};
    ++h.progress;
  } else if (!arrive_only) {
    n.waiting.push_back(me);
    b->threads()[size_t(me)].named = id;
    b->park(Wait::Named, "named_barrier_sync", file, line);
  }
  if (!arrive_only) race::acquire(&g_named_tokens[id]);
}

void setmaxnreg(bool increase, unsigned registers, const char* file, int line) {
  race::Quiet quiet;
  Block* b = current_block();
  Hopper& h = b->hopper();
  h.use();
  const Site at{file, line};
  const std::string call = std::string(increase ? "setmaxnreg_inc<" : "setmaxnreg_dec<") +
                           std::to_string(registers) + "> at " + place(at);
  if (registers % 8 || registers < 24 || registers > 256)
    b->fail_here(call + ": the register count must be a multiple of 8 from 24 to 256");
  if (b->threads().size() % 128)
    b->fail_here(call + ": setmaxnreg acts on a whole warpgroup (4 warps, 128 threads), and "
                 "this block's " + std::to_string(b->threads().size()) +
                 " threads are not a whole number of warpgroups");
  const int me = b->thread_index();
  std::vector<RegisterCall>& calls = h.registers[size_t(me / 128)];
  unsigned& mine = h.threads[size_t(me)].register_calls;
  if (mine == calls.size()) {
    calls.push_back(RegisterCall{increase, registers, at});
  } else {
    const RegisterCall& first = calls[mine];
    if (first.increase != increase || first.registers != registers)
      b->fail_here(call + ": warpgroup " + std::to_string(me / 128) + "'s call number " +
                   std::to_string(mine + 1) + " of setmaxnreg was " +
                   (first.increase ? "setmaxnreg_inc<" : "setmaxnreg_dec<") +
                   std::to_string(first.registers) + "> at " + place(first.at) +
                   " in another of its threads: setmaxnreg is .sync.aligned, the same "
                   "instruction in every thread of the warpgroup");
  }
  ++mine;
}

}  // namespace hopper
}  // namespace emu
