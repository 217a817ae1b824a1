// One block's Hopper state on the emulator: its mbarriers with their phases, arrivals and
// transaction bytes, the bulk and tensor copies in flight on them, each thread's bulk store
// groups, the named barriers, and setmaxnreg's calls per warpgroup. Block owns one
// (Block::hopper()); it is cleared at a block's start only if the block before used it, so
// kernels that use none of it pay nothing.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "emu/hopper_emu.h"

namespace emu {
class Block;

// The running worker's shared window: its dynamic shared memory (smem_window.cpp).
struct SharedWindow {
  char* lo = nullptr;
  size_t bytes = 0;
};
SharedWindow& shared_window();
void set_shared_window(void* dynamic, size_t bytes);

// The async proxy's view of the window (plain and checked mode alike): what TMA stores and
// wgmma read. An ordinary store reaches it only at a fence.proxy.async (any thread's: the
// emulator does not know whose bytes are whose, so it copies the whole window), a copy into
// shared memory when it lands; the block starts with it poisoned, as shared memory is. So a
// missing fence shows as stale bytes (0xFF, NaN) in what the async proxy reads.
void async_view_fence();
void async_view_landed(const char* p, size_t n);   // a copy landed at p: both proxies see it
void async_view_poison(const char* p, size_t n);   // a copy is on its way to p: garbage
// What the async proxy reads of [p, p + n), for an operation that found `at_issue` there
// when it was issued: a byte rewritten since (a stage or a store's source reused before its
// wait) as it is now, the late read the hardware allows; any other as the view has it.
void async_read(const char* p, const char* at_issue, size_t n, char* out);

struct Site {
  const char* file = nullptr;
  int line = 0;
};
std::string place(const Site& s);  // "tests/emu/x.cu:12"
std::string hex_address(uint32_t shared_address);  // "0x0410"

// A copy into shared memory that completes bytes on an mbarrier. Its bytes are staged at the
// issue and land when a waiter polls the barrier after all the phase's arrivals are in: the
// latest point the hardware allows. Until then its destination holds the issue's poison.
struct PendingLoad {
  char* dst;
  std::vector<unsigned char> image;
  Site issued;
  int thread;
  bool tensor;  // cp.async.bulk.tensor (else cp.async.bulk)
};

struct Mbarrier {
  uint32_t address = 0;
  Site init;
  unsigned count = 0;    // arrivals each phase expects (arrive_drop lowers it)
  unsigned pending = 0;  // arrivals still missing in the current phase
  int64_t tx = 0;        // transaction bytes expected and not yet completed (may go below 0)
  uint64_t phase = 0;    // phases completed so far; the current phase's parity is phase & 1
  uint64_t expected_bytes = 0, completed_bytes = 0;  // in the current phase, for reports
  std::vector<PendingLoad> flying;
  std::vector<unsigned char> arrived;  // per thread: arrived on it in some phase
  std::vector<unsigned char> dropped;  // per thread: called arrive_drop on it
  char token = 0;  // checked mode: arrivals and copies release it, successful waits acquire it
};

// A bulk store (tensor or not) of one thread: its source is read, and global memory written,
// at the wait_group that covers its group.
struct PendingStore {
  int group;
  Site issued;
  const char* src;
  uint32_t bytes;
  bool tensor;
  hopper::TensorMapDesc map;  // tensor: the map and the box's coordinates
  int32_t coords[5];
  char* dst;                  // not tensor: where it goes
  std::vector<char> at_issue; // the source's bytes at the issue (async_read)
};

// One wgmma.mma_async of a warpgroup (wgmma.cpp). It is computed, its operands read from
// the shared window through its descriptors, at the first wait that covers it in any of the
// warpgroup's threads: the latest point the hardware allows. Each thread's accumulators hold
// NaN from the issue until that thread's covering wait lands its results.
struct WgmmaOp {
  hopper::WgmmaCall call;  // a_regs cleared: the registers are copied into `a`
  Site at;
  int warpgroup = 0;
  int group = 0;                 // the wgmma group it joined (in the warpgroup's first thread)
  std::vector<uint32_t> a;       // A from registers: 128 threads x 4
  std::vector<float*> acc;       // each thread's accumulators
  std::vector<float> in;         // 128 x n/2: D's input per thread, as it was at the issue
  // Per thread: the wgmma in flight on the same accumulators whose result is its input (the
  // hardware chains wgmmas of one shape on one accumulator without a wait).
  std::vector<std::shared_ptr<WgmmaOp>> from;
  std::vector<float> out;        // 128 x n/2, once computed
  bool done = false;
  std::vector<uint32_t> chunks;  // the shared addresses of the 16-byte chunks it reads
  std::vector<char> at_issue;    // those chunks' bytes at the issue (async_read)
  int handle = -1;               // checked mode: initcheck's record of those reads
};

struct WgmmaPending {
  std::shared_ptr<WgmmaOp> op;
  int group;  // the issuing thread's wgmma group
};

// An accumulator handed back to ordinary code by a wait: its values then, and the thread's
// wgmma_fence count, to tell a write without a fence since.
struct WgmmaLanded {
  unsigned fences = 0;
  std::vector<float> values;
  Site wait;
};

struct WgmmaMeet {  // a warpgroup's threads arriving at one wgmma.mma_async
  int arrived = 0;
  int first = -1;
  hopper::WgmmaCall call{};
  Site at;
  std::vector<float*> acc;
  std::vector<uint32_t> a;
  std::vector<const uint32_t*> a_at;  // where each thread's A registers are
  std::vector<int> waiting;
};

struct RsRead {  // A's registers as a wgmma_mma_async_rs read them
  uint32_t a[4] = {};
  unsigned fences = 0;  // the thread's wgmma_fence calls then
  Site at;
};

struct ThreadHopper {
  std::map<uint32_t, uint64_t> seen;  // barrier -> phases complete at its last successful wait
  int committed = 0;                  // its bulk groups committed so far
  std::vector<PendingStore> stores;
  unsigned register_calls = 0;        // its setmaxnreg calls so far
  // wgmma: its groups committed, its wgmma_fence calls, its wgmmas in flight, the
  // accumulators its waits handed back, its last wait, and each set of A's registers (by
  // address) as the last wgmma_mma_async_rs that read it found it.
  int wg_committed = 0;
  unsigned wg_fences = 0;
  std::vector<WgmmaPending> wg_pending;
  std::map<const float*, WgmmaLanded> wg_landed;
  Site wg_wait;
  int wg_wait_n = 0, wg_wait_committed = 0;
  std::map<const uint32_t*, RsRead> rs_read;
};

struct NamedBarrier {
  unsigned count = 0;    // threads the current round waits for (0: no round open)
  unsigned arrived = 0;
  Site first;            // the round's first arrival
  std::vector<int> waiting;
};

struct RegisterCall {
  bool increase;
  unsigned registers;
  Site at;
};

class Hopper {
 public:
  bool used = false;
  Block* block = nullptr;
  std::map<uint32_t, Mbarrier> barriers;
  std::vector<ThreadHopper> threads;
  NamedBarrier named[16];
  std::vector<std::vector<RegisterCall>> registers;  // per warpgroup, in call order
  std::vector<WgmmaMeet> meets;                      // per warpgroup
  uint64_t progress = 0;  // barrier state changes, to tell a spinning try_wait from a stuck one
  uint64_t progress_at_timeout = ~0ull;
  int idle_timeouts = 0;

  // At a block's start; then use() at the first Hopper call of the block.
  void begin_block(Block* b);
  void use();
  Mbarrier& barrier(void* bar, const char* what, const Site& at);
  // A phase whose arrivals and bytes are all in completes; its waiters wake.
  void settle(Mbarrier& m);
  // A waiter polls: once every arrival is in, the copies in flight land (in issue order).
  void land(Mbarrier& m);
  // No thread can run: poll the barriers that have waiters, or let spinning try_waits time
  // out. True if a thread can run again.
  bool unstick();
  // For the deadlock report: each barrier that threads wait on, with its state.
  std::string describe_stuck() const;
  void thread_exited(int thread);
  // wgmma (wgmma.cpp): computes op (and the wgmmas it chains from) if not yet done.
  void compute(WgmmaOp& op);
  // Checked mode: the first in-flight wgmma that reads a chunk of [p, p + bytes), or null.
  const WgmmaOp* wgmma_reading(const char* p, uint32_t bytes) const;
  void perform(PendingStore& s);
};

}  // namespace emu
