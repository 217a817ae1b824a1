// Kernel launch on the emulator: validates the launch like the GPU would, then lets a
// small pool of OS workers take block indices from an atomic counter.
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "block.h"
#include "crash_report.h"
#include "memory_map.h"
#include "init_check.h"
#include "race_check.h"
#include "state.h"

namespace emu {
namespace {


thread_local void* tl_dynamic_smem = nullptr;
std::string g_schedule_override;
bool g_has_override = false;
std::mutex g_attr_mutex;
std::unordered_map<const void*, size_t> g_smem_optin;  // kernel -> raised dynamic limit

struct Job {
  const void* kernel;
  const std::function<void()>* body;
  dim3 grid, block;
  size_t smem;
  Schedule schedule;
  size_t stack_bytes;
  std::atomic<uint64_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  std::string error;
};

// Which block a worker runs next. Plain mode: the next free block, for balance. Checked
// mode: the blocks that one worker runs one after another are ordered for the race
// detector, so blocks are dealt to workers by a hash of their index: any two blocks that
// race (say partitions H*S apart) land on different workers most of the time, and a
// launch with several such pairs shows its race. Either way the workers run side by side, so
// which block meets a bug first, and so which block and threads a report names, can differ
// from one run to the next (the book's recorded reports are compared without their numbers:
// tools/compare_recorded.sh).
uint64_t next_block(Job& job, int worker, int workers, uint64_t after) {
  if (!race::kEnabled) return job.next++;
  const uint64_t total = uint64_t(job.grid.x) * job.grid.y * job.grid.z;
  for (uint64_t b = after; b < total; ++b) {
    uint64_t h = (b + 1) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
    if (int(h % uint64_t(workers)) == worker) return b;
  }
  return total;
}

void run_blocks(Job& job, int worker, int workers) {
  thread_local Block block;
  install_crash_report();
  set_current_kernel(job.kernel);
  const uint64_t total = uint64_t(job.grid.x) * job.grid.y * job.grid.z;
  gridDim = job.grid;
  blockDim = job.block;
  for (uint64_t b = next_block(job, worker, workers, 0); !job.failed && b < total;
       b = next_block(job, worker, workers, b + 1)) {
    blockIdx = make_uint3(b % job.grid.x, (b / job.grid.x) % job.grid.y,
                          b / (uint64_t(job.grid.x) * job.grid.y));
    // Real shared memory starts as garbage: poisoned, so a read-before-write shows.
    size_t slack = 0;
    tl_dynamic_smem = dynamic_shared_buffer(job.smem, &slack);
    set_shared_window(tl_dynamic_smem, job.smem);
    initcheck::begin_block(tl_dynamic_smem, job.smem, slack);
    std::string err = block.run(*job.body, blockIdx, job.block, job.schedule, job.stack_bytes);
    initcheck::end_block();
    if (!err.empty()) {
      std::lock_guard<std::mutex> lock(job.error_mutex);
      if (job.error.empty()) job.error = err;
      job.failed = true;
    }
  }
}

// Persistent workers; the launching thread works too. Each worker waits for its jobs on a
// lock of its own and reports back on another: a lock that one worker takes after its
// blocks and another before its blocks would order their blocks for the race detector, and
// a race between them would pass unseen whenever one worker started late (a busy machine).
class Pool {
 public:
  explicit Pool(int workers) : slots_(new Slot[workers - 1]) {
    for (int i = 1; i < workers; ++i) threads_.emplace_back([this, i] { loop(i); });
  }
  ~Pool() {
    for (size_t i = 0; i < threads_.size(); ++i) {
      {
        std::lock_guard<std::mutex> lock(slots_[i].m);
        slots_[i].stop = true;
      }
      slots_[i].cv.notify_one();
    }
    for (auto& t : threads_) t.join();
  }
  void run(Job& job) {
    {
      std::lock_guard<std::mutex> lock(done_m_);
      busy_ = static_cast<int>(threads_.size());
    }
    for (size_t i = 0; i < threads_.size(); ++i) {
      {
        std::lock_guard<std::mutex> lock(slots_[i].m);
        slots_[i].job = &job;
      }
      slots_[i].cv.notify_one();
    }
    run_blocks(job, 0, size());
    std::unique_lock<std::mutex> lock(done_m_);
    done_cv_.wait(lock, [this] { return busy_ == 0; });
  }
  int size() const { return static_cast<int>(threads_.size()) + 1; }

 private:
  struct Slot {
    std::mutex m;
    std::condition_variable cv;
    Job* job = nullptr;
    bool stop = false;
  };
  void loop(int index) {
    Slot& slot = slots_[index - 1];
    for (;;) {
      Job* job;
      {
        std::unique_lock<std::mutex> lock(slot.m);
        slot.cv.wait(lock, [&] { return slot.stop || slot.job; });
        if (slot.stop) return;
        job = std::exchange(slot.job, nullptr);
      }
      run_blocks(*job, index, size());
      std::lock_guard<std::mutex> lock(done_m_);
      if (--busy_ == 0) done_cv_.notify_one();
    }
  }
  std::unique_ptr<Slot[]> slots_;  // worker i's at i - 1
  std::vector<std::thread> threads_;
  std::mutex done_m_;
  std::condition_variable done_cv_;
  int busy_ = 0;
};

int env_int(const char* name, int fallback, int lo, int hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  int x = std::atoi(v);
  return x < lo ? lo : (x > hi ? hi : x);
}

Pool& pool() {
  // Checked mode wants several workers even on a small machine: see next_block().
  const unsigned cores = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  static Pool p(env_int("PA_EMU_WORKERS", int(race::kEnabled ? std::max(4u, cores) : cores), 1, 256));
  return p;
}

std::string dims(dim3 d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}

}  // namespace

int worker_count() { return pool().size(); }

void set_schedule(const char* order) {
  g_has_override = order != nullptr;
  g_schedule_override = order ? order : "";
}

const char* schedule() {
  if (g_has_override) return g_schedule_override.c_str();
  const char* env = std::getenv("PA_EMU_SCHEDULE");
  return env && *env ? env : "forward";
}

void set_max_dynamic_smem(const void* kernel, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_attr_mutex);
  g_smem_optin[kernel] = bytes;
}

cudaError_t launch(const void* kernel, dim3 grid, dim3 block, size_t smem,
                   const std::function<void()>& body) {
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535)
    return set_error(cudaErrorInvalidConfiguration,
                     "kernel launch: invalid grid " + dims(grid));
  if (threads == 0 || threads > 1024 || block.z > 64)
    return set_error(cudaErrorInvalidConfiguration,
                     "kernel launch: invalid block " + dims(block) +
                         " (at most 1024 threads, z at most 64)");
  size_t limit = kDefaultSmemLimit;
  {
    std::lock_guard<std::mutex> lock(g_attr_mutex);
    auto it = g_smem_optin.find(kernel);
    if (it != g_smem_optin.end()) limit = it->second;
  }
  if (smem > limit)
    return set_error(cudaErrorInvalidValue,
                     "kernel launch: " + std::to_string(smem) +
                         " bytes of dynamic shared memory, over the limit of " +
                         std::to_string(limit) +
                         (limit == kDefaultSmemLimit
                              ? " (raise it with cudaFuncSetAttribute("
                                "kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes))"
                              : ""));
  Job job;
  job.kernel = kernel;
  job.body = &body;
  job.grid = grid;
  job.block = block;
  job.smem = smem;
  job.stack_bytes = size_t(env_int("PA_EMU_STACK_KB", 256, 16, 65536)) * 1024;
  if (!parse_schedule(schedule(), &job.schedule))
    return set_error(cudaErrorInvalidValue,
                     std::string("PA_EMU_SCHEDULE=") + schedule() +
                         " is not one of: forward, reverse, random:SEED, greedy");
  race::start_reporting();
  pool().run(job);
  // Plain mode: a write just outside a device allocation, found in its redzone (and the
  // redzone restored, even when the launch fails for another reason, reported alone).
  const std::string overrun = check_redzones(kernel);
  if (job.failed) {
    // A memcheck finding leaves the other checks' findings of this launch unread: drop them.
    initcheck::take_report(kernel);
    race::take_report(kernel);
    return set_error(cudaErrorLaunchFailure, job.error.rfind("emulator ", 0) == 0
                                                 ? job.error
                                                 : "emulator: " + job.error);
  }
  const std::string found =
      overrun + initcheck::take_report(kernel) + race::take_report(kernel);
  if (!found.empty()) return set_error(cudaErrorLaunchFailure, found);
  return cudaSuccess;
}

namespace detail {
void syncthreads(const char* file, int line) { current_block()->syncthreads(0, file, line); }
int syncthreads_count(int predicate, const char* file, int line) {
  current_block()->syncthreads(predicate, file, line);
  return current_block()->barrier_count();
}
void syncwarp(unsigned mask, const char* file, int line) {
  current_block()->warp_exchange(mask, 0, current_block()->lane(), nullptr, "__syncwarp",
                                 file, line);
}
uint64_t warp_exchange(unsigned mask, uint64_t value, int src_lane, unsigned* ballot,
                       const char* what, const char* file, int line) {
  return current_block()->warp_exchange(mask, value, src_lane, ballot, what, file, line);
}
unsigned active_mask() { return current_block()->active_mask(); }
int lane_id() { return current_block()->lane(); }
int next_turn() { return current_block()->next_turn(); }
void* dynamic_shared_memory() { return tl_dynamic_smem; }
void name_shared(const char* name, const void* p, size_t bytes, size_t elem, const size_t* dims,
                 int rank) {
  initcheck::name_region(name, p, bytes, elem, dims, rank);
}
}  // namespace detail

}  // namespace emu
