// One thread block in flight on one OS worker: its fibers, warps and barrier state.
#pragma once

#include <boost/context/fiber.hpp>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "async_copy.h"
#include "hopper.h"
#include "emu/cuda_emu.h"

namespace emu {

enum class Order { Forward, Reverse, Random, Greedy };
struct Schedule {
  Order order = Order::Forward;
  uint64_t seed = 1;
};
// Parses "forward", "reverse", "random[:SEED]" or "greedy"; returns false if it can't.
bool parse_schedule(const char* text, Schedule* out);

enum class Wait { None, Block, Warp, Mbarrier, Named, Warpgroup, Done };

struct Thread {  // one CUDA thread is one fiber
  boost::context::fiber fiber;
  uint3 idx{};
  Wait wait = Wait::None;
  const char* what = nullptr;  // the primitive it waits in, for messages
  const char* file = nullptr;
  int line = 0;
  uint64_t value = 0;  // what it published to a warp exchange
  int src = 0;         // the lane it reads from
  uint64_t result = 0;
  unsigned ballot = 0;
  bool abandoned = false;  // left at a fault (checked mode): its fiber is never resumed
  AsyncCopies copies;      // its cp.async copies in flight
  int atomics_at_fence = 0;  // checked mode: the block's atomics when it last fenced
  unsigned char turn = 0;    // emu::detail::next_turn()'s next answer
  // Hopper (hopper.h): the mbarrier it waits on (shared address) and the parity; blocking:
  // the wait loop (else try_wait, which may time out); timed_out: its try_wait gave up.
  uint32_t mbar = 0;
  unsigned parity = 0;
  bool blocking = false;
  bool timed_out = false;
  unsigned named = 0;  // the named barrier it waits at
  unsigned proxy_fences = 0;  // its fence.proxy.async calls so far (checked mode's bookkeeping)
};

struct WarpGroup {  // lanes that met (or are meeting) at one warp-level primitive
  unsigned mask = 0;
  unsigned arrived = 0;
  const char* what = nullptr;
  const char* file = nullptr;
  int line = 0;
};

struct Warp {
  unsigned existing = 0;  // lanes that exist (the last warp of a block may be partial)
  unsigned exited = 0;
  std::vector<WarpGroup> pending;
};

class Block {
 public:
  ~Block();
  // Runs every thread of block `block_idx` to completion; returns "" or an error.
  std::string run(const std::function<void()>& body, uint3 block_idx, dim3 block_dim,
                  const Schedule& schedule, size_t stack_bytes);

  // Called from inside fibers, through emu::detail.
  void syncthreads(int contribution, const char* file, int line);
  int barrier_count() const { return barrier_result_; }
  uint64_t warp_exchange(unsigned mask, uint64_t value, int src_lane, unsigned* ballot,
                         const char* what, const char* file, int line);
  unsigned active_mask() const;
  int lane() const { return current_ % 32; }
  int next_turn() { return (threads_[current_].turn ^= 1) ^ 1; }
  int thread_index() const { return current_; }
  const void* fence_token() const { return &fence_token_; }
  // Checked mode (atomics.cpp): an atomic of this block; has one come since the running
  // thread's last fence? (Then its fence is an acquire: it may read what others published.)
  void note_atomic() { ++atomics_; }
  bool atomic_since_fence() {
    Thread& t = threads_[current_];
    const bool since = atomics_ > t.atomics_at_fence;
    t.atomics_at_fence = atomics_;
    return since;
  }
  // cp.async (async_copy.cpp): the running thread's copies, or thread i's.
  AsyncCopies& copies() { return threads_[current_].copies; }
  const AsyncCopies& copies_of(int thread) const { return threads_[thread].copies; }
  uint3 thread_idx(int thread) const { return threads_[thread].idx; }
  // A scheduling point that waits for nobody: the running thread stays runnable, and the
  // schedule order picks who runs next (cp_async_wait, before its copies land).
  void let_others_run();
  // The block fails with `message`, said of the running thread ("block (..), thread (..): ").
  [[noreturn]] void fail_here(const std::string& message) { fail(where() + ": " + message); }
  // Hopper (hopper.h): the block's state, its threads, and a wait of the running thread
  // until another thread sets its wait back to Wait::None.
  Hopper& hopper() { return hopper_; }
  std::vector<Thread>& threads() { return threads_; }
  const std::vector<Thread>& threads() const { return threads_; }
  unsigned fences_of(int thread) const { return threads_[thread].proxy_fences; }
  void park(Wait wait, const char* what, const char* file, int line);
  uint3 block_idx() const { return block_idx_; }
  // "block (x,y,z), thread (x,y,z)" of the thread running now, for diagnoses.
  std::string where() const;
  std::string where(int thread) const;
  // Checked mode (crash_report.cpp): a kernel thread faulted at `pc` on `address`; its
  // fiber leaves for good (its stack is never unwound: the kernel code there cannot throw),
  // and the block fails with the memcheck report. Runs on the worker's landing stack.
  [[noreturn]] void abandon_after_fault(int sig, uintptr_t address, void* pc);
  bool in_kernel_thread() const { return current_ >= 0 && fault_thread_ < 0; }
  // The fiber stacks' range, so that a fault there reads as a stack overflow.
  bool is_stack_guard(uintptr_t address) const;
  // The block's completed __syncthreads so far, and the last one's place (for reports).
  int interval() const { return interval_; }
  const char* interval_file() const { return interval_file_; }
  int interval_line() const { return interval_line_; }

 private:
  void start_fibers(const std::function<void()>& body, size_t stack_bytes);
  void resume(int i);
  void yield();
  [[noreturn]] void fail(const std::string& message);
  void thread_exited(int i);
  bool release_block_barrier();
  std::string describe_waiters() const;

  std::vector<Thread> threads_;
  std::vector<Warp> warps_;
  Hopper hopper_;
  boost::context::fiber scheduler_;  // the way back to run(), held while a fiber runs
  int current_ = -1;
  int live_ = 0;
  int barrier_accum_ = 0;
  int barrier_result_ = 0;
  int interval_ = 0;
  const char* interval_file_ = nullptr;
  int interval_line_ = 0;
  // Checked mode (race_check.h): one TSan fiber per thread slot, made once per worker and
  // reused by every block it runs; the scheduler's own fiber; the tokens that the CUDA
  // primitives release and acquire. Consecutive blocks on one worker are ordered (the
  // scheduler acquires end_token_ after a block and releases start_token_ before the next),
  // as if each started after the last one ended; the threads of one block are not.
  std::vector<void*> race_fibers_;
  void* race_scheduler_ = nullptr;
  char start_token_ = 0;
  char end_token_ = 0;
  char barrier_token_ = 0;
  char fence_token_ = 0;  // __threadfence_block's, in checked mode
  int atomics_ = 0;       // the atomics its threads did so far (checked mode)
  char warp_tokens_[32] = {};
  uint3 block_idx_{};
  std::string error_;
  int fault_thread_ = -1;  // the thread that faulted (checked mode), or -1
  int fault_sig_ = 0;
  uintptr_t fault_address_ = 0;
  void* fault_pc_ = nullptr;
  // Fiber stacks, one slot per thread with a guard page below it, mapped once per
  // worker and reused by every block it runs.
  char* stacks_ = nullptr;
  size_t stack_slots_ = 0;
  size_t slot_bytes_ = 0;
};

// The block currently running on this OS worker (set by Block::run).
Block* current_block();

}  // namespace emu
