// wgmma on the emulator (pa/hopper/wgmma.h): wgmma.mma_async issued by a warpgroup, and its
// fence, commit_group and wait_group.
//
// The 128 threads of a warpgroup meet at each wgmma_mma_async (a scheduling point); the last
// to arrive checks that they all issued the same one (.sync.aligned), and issues it for all:
// each thread's accumulators are kept aside and poisoned (NaN), and the wgmma joins each
// thread's current group. It is computed at the first wgmma_wait_group, in any of the
// warpgroup's threads, that covers it: its operands are read from the shared window through
// the descriptors and the swizzle then, the latest point the hardware allows, so a stage
// overwritten before that wait shows in the result. Each thread's own covering wait lands its
// results in its registers.
//
// The hardware chains wgmmas of one shape on the same accumulators without a wait: a wgmma
// whose accumulators are still in flight takes the earlier one's result as its input.
//
// Checked mode names: an ordinary access of accumulators in flight, a write of shared memory
// that an in-flight wgmma reads (init_check.cpp), a wgmma operand written by an ordinary
// store with no fence.proxy.async since, and one that a TMA load has not landed in yet. Both
// modes name a warpgroup whose threads disagree and a missing wgmma_fence.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "../../include/pa/hopper/swizzle.h"
#include "block.h"
#include "crash_report.h"
#include "init_check.h"
#include "race_check.h"

namespace emu {

namespace {

constexpr int kWarpgroup = 128;

const char* type_name(int type) { return type == 0 ? "fp16" : type == 1 ? "bf16" : "fp8 e4m3"; }
int k_of(const hopper::WgmmaCall& c) { return c.type == 2 ? 32 : 16; }
uint32_t elem_bytes(const hopper::WgmmaCall& c) { return c.type == 2 ? 1 : 2; }

std::string hex64(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// "wgmma_mma_async<fp16> m64n64k16 (A: descriptor 0x..., K-major; B: ...)"
std::string describe(const hopper::WgmmaCall& c, bool regs) {
  std::string s = std::string(regs ? "wgmma_mma_async_rs<" : "wgmma_mma_async<") +
                  type_name(c.type) + "> m64n" + std::to_string(c.n) + "k" +
                  std::to_string(k_of(c)) + " (A: ";
  s += regs ? std::string("registers") : "descriptor " + hex64(c.desc_a) + (c.trans_a ? ", MN-major" : ", K-major");
  s += "; B: descriptor " + hex64(c.desc_b) + (c.trans_b ? ", MN-major" : ", K-major");
  s += c.accumulate ? "; D += A * B)" : "; D = A * B)";
  return s;
}

// A tile in shared memory as a descriptor and the instruction's transpose say (pa/hopper/
// wgmma.h gives the canonical layouts).
struct Tile {
  uint32_t start = 0, lbo = 0, sbo = 0, swizzle = 0, base = 0, size = 2;
  bool mn = false;
  uint32_t address(uint32_t r, uint32_t k) const {
    const uint32_t t = 16 / size;
    uint32_t a;
    if (!mn) {
      a = swizzle ? start + (r % 8) * swizzle + (r / 8) * sbo + k * size
                  : start + (r % 8) * 16 + (r / 8) * sbo + (k / t) * lbo + (k % t) * size;
    } else if (!swizzle) {
      a = start + (r % t) * size + (r / t) * sbo + (k % 8) * 16 + (k / 8) * lbo;
    } else {
      const uint32_t per = swizzle / size;  // elements of one swizzled row
      a = start + (r % per) * size + (r / per) * lbo + (k % 8) * swizzle + (k / 8) * sbo;
    }
    return pa::swizzle_address(a, swizzle);
  }
};

Tile decode(uint64_t desc, bool mn, uint32_t size) {
  Tile t;
  t.start = uint32_t(desc & 0x3FFF) << 4;
  t.lbo = uint32_t((desc >> 16) & 0x3FFF) << 4;
  t.sbo = uint32_t((desc >> 32) & 0x3FFF) << 4;
  t.base = uint32_t((desc >> 49) & 7);
  const uint32_t mode = uint32_t(desc >> 62);
  t.swizzle = mode == 1 ? 128 : mode == 2 ? 64 : mode == 3 ? 32 : 0;
  t.mn = mn;
  t.size = size;
  return t;
}

float load(const char* p, int type) {
  if (type == 0) {
    __half h;
    std::memcpy(&h, p, 2);
    return __half2float(h);
  }
  if (type == 1) {
    __nv_bfloat16 h;
    std::memcpy(&h, p, 2);
    return __bfloat162float(h);
  }
  __nv_fp8_e4m3 e;
  std::memcpy(&e, p, 1);
  return float(e);
}

const char* shared_at(uint32_t a) {
  return shared_window().lo + (a - hopper::kDynamicSharedBase);
}

// The 16-byte chunks a tile of `rows` x K reads (sorted, each once); fails the block when
// the tile leaves the dynamic shared memory or its descriptor is one the emulator does not
// model.
std::vector<uint32_t> chunks_of(Block* b, const Tile& t, uint32_t rows, uint32_t k,
                                const char* operand, const std::string& call) {
  if (t.base != 0)
    b->fail_here(call + ": " + operand + "'s descriptor has base offset " + std::to_string(t.base) +
                 "; the emulator models tiles whose swizzle pattern starts on its boundary "
                 "(base offset 0): align the tile to its swizzle atom (1,024 bytes for 128B)");
  std::vector<uint32_t> out;
  out.reserve(rows * k * t.size / 16);
  const uint32_t lo = hopper::kDynamicSharedBase,
                 hi = hopper::kDynamicSharedBase + uint32_t(shared_window().bytes);
  for (uint32_t r = 0; r < rows; ++r)
    for (uint32_t c = 0; c < k; ++c) {
      const uint32_t a = t.address(r, c);
      if (a < lo || a + t.size > hi)
        b->fail_here(call + ": " + operand + "'s element (" + std::to_string(r) + ", " +
                     std::to_string(c) + ") is at shared address " + hex_address(a) +
                     ", outside the block's dynamic shared memory (" + hex_address(lo) + " to " +
                     hex_address(hi) + "): check the descriptor's start address, leading and "
                     "stride byte offsets");
      out.push_back(a & ~15u);
    }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// Runs of consecutive chunks: f(first shared address, bytes).
template <typename F>
void for_runs(const std::vector<uint32_t>& chunks, F f) {
  for (size_t i = 0; i < chunks.size();) {
    size_t j = i;
    while (j + 1 < chunks.size() && chunks[j + 1] == chunks[j] + 16) ++j;
    f(chunks[i], uint32_t(chunks[j] + 16 - chunks[i]));
    i = j + 1;
  }
}

std::string thread_name(Block* b, int thread) {
  const uint3 t = b->thread_idx(thread);
  return "thread (" + std::to_string(t.x) + "," + std::to_string(t.y) + "," + std::to_string(t.z) +
         ")";
}

// Checked mode, at the issue: an operand that an ordinary store wrote with no
// fence.proxy.async since, or that a TMA load has not landed in yet.
void check_operand_writes(Block* b, const std::vector<uint32_t>& chunks, const char* operand,
                          const std::string& call) {
  if (!race::kEnabled) return;
  std::vector<unsigned> fences;
  for (const Thread& t : b->threads()) fences.push_back(t.proxy_fences);
  for_runs(chunks, [&](uint32_t a, uint32_t bytes) {
    int writer = -1;
    void* pc = nullptr;
    if (initcheck::unfenced_write(shared_at(a), bytes, fences.data(), &writer, &pc)) {
      const std::string line = source_line(static_cast<char*>(pc) - 1);
      b->fail_here("emulator wgmma check: " + call + " reads " + operand +
                   " from shared memory that " + thread_name(b, writer) +
                   " wrote with an ordinary store, and that thread has not called "
                   "fence_proxy_async since:\n" + (line.empty() ? "  at (unknown line)" : line) +
                   "\n  wgmma reads shared memory through the async proxy, which sees an "
                   "ordinary (generic-proxy) write only after the writer's fence.proxy.async "
                   "(and then a barrier, if the writer is another thread): without it the "
                   "wgmma may read stale bytes.");
    }
    initcheck::AsyncCopy c{};
    if (initcheck::async_covering(shared_at(a), bytes, true, &c)) {
      b->fail_here("emulator TMA check: " + call + " reads " + operand +
                   " from shared memory that the " +
                   (c.kind == initcheck::AsyncKind::TensorLoad ? "tma_load" : "bulk_load") +
                   " issued at " + place(Site{c.file, c.line}) + " by thread " +
                   std::to_string(c.thread) + " has not landed in yet: its bytes complete on "
                   "the mbarrier at shared " + hex_address(c.barrier) + " (initialised at " +
                   place(Site{c.init_file, c.init_line}) + ") in its phase " +
                   std::to_string(c.phase) + " (parity " + std::to_string(c.phase & 1) +
                   "). Wait for that phase (mbarrier_wait_parity(bar, " +
                   std::to_string(c.phase & 1) + ")) before the wgmma that reads the stage.");
    }
  });
}

// The fence rules (PTX ISA, wgmma.fence): before a warpgroup's first wgmma, and between an
// ordinary access of the accumulators (or of A's registers) and the wgmma that uses them,
// except a wgmma on accumulators that the previous wgmma of the same shape wrote.
void check_fence(Block* b, ThreadHopper& th, int thread, const float* acc, int regs,
                 const uint32_t* a, const uint32_t* a_at, const Site& at, const std::string& call,
                 bool chained) {
  const std::string who = thread_name(b, thread) + " (warpgroup " +
                          std::to_string(thread / kWarpgroup) + ")";
  if (th.wg_fences == 0)
    b->fail_here("emulator wgmma check: " + call + ": " + who +
                 " has not called wgmma_fence() before its first wgmma. The PTX ISA requires "
                 "wgmma.fence before a warpgroup's first wgmma.mma_async, and between ordinary "
                 "code's access of the accumulator registers (or of A's registers) and the "
                 "wgmma that uses them: without it the wgmma may read the registers before "
                 "the ordinary writes (zeroed accumulators, a rescale) reach them.");
  if (!chained) {
    const auto it = th.wg_landed.find(acc);
    if (it != th.wg_landed.end() && it->second.fences == th.wg_fences &&
        std::memcmp(it->second.values.data(), acc, size_t(regs) * 4) != 0) {
      int i = 0;
      while (std::memcmp(&it->second.values[size_t(i)], acc + i, 4) == 0) ++i;
      b->fail_here("emulator wgmma check: " + call + " accumulates into registers that " + who +
                   " changed with ordinary code after the wgmma_wait_group at " +
                   place(it->second.wait) + " handed them back (d[" + std::to_string(i) +
                   "] was " + std::to_string(it->second.values[size_t(i)]) + ", is " +
                   std::to_string(acc[i]) +
                   "), with no wgmma_fence() since. The PTX ISA requires wgmma.fence between "
                   "ordinary code's access of the accumulators and the wgmma that uses them: "
                   "without it the wgmma may read them before the write.");
    }
  }
  if (a) {
    const auto it = th.rs_read.find(a_at);
    if (it != th.rs_read.end() && it->second.fences == th.wg_fences &&
        std::memcmp(it->second.a, a, 16) != 0)
      b->fail_here("emulator wgmma check: " + call + ": " + who +
                   " changed A's registers since the wgmma at " + place(it->second.at) +
                   " read them, with no wgmma_fence() in between. The PTX ISA requires "
                   "wgmma.fence between ordinary code's writes of A's registers and the wgmma "
                   "that reads them.");
    RsRead& r = th.rs_read[a_at];
    r.fences = th.wg_fences;
    r.at = at;
    std::memcpy(r.a, a, 16);
  }
}

// The last thread of the warpgroup to arrive issues the wgmma for all 128.
void issue(Block* b, Hopper& h, int wg, WgmmaMeet& m) {
  const hopper::WgmmaCall& c = m.call;
  const bool regs = c.a_regs != nullptr;
  const std::string call = describe(c, regs) + " at " + place(m.at);
  const int rn = c.n / 2, k = k_of(c);
  const uint32_t size = elem_bytes(c);
  auto op = std::make_shared<WgmmaOp>();
  op->call = c;
  op->call.a_regs = nullptr;
  op->at = m.at;
  op->warpgroup = wg;
  op->group = h.threads[size_t(wg * kWarpgroup)].wg_committed;
  // Where its operands are: checked now, read at the wait.
  std::vector<uint32_t> chunks_b = chunks_of(b, decode(c.desc_b, c.trans_b, size), uint32_t(c.n),
                                             uint32_t(k), "B", call);
  check_operand_writes(b, chunks_b, "B", call);
  op->chunks = std::move(chunks_b);
  if (!regs) {
    const std::vector<uint32_t> chunks_a =
        chunks_of(b, decode(c.desc_a, c.trans_a, size), 64, uint32_t(k), "A", call);
    check_operand_writes(b, chunks_a, "A", call);
    op->chunks.insert(op->chunks.end(), chunks_a.begin(), chunks_a.end());
    std::sort(op->chunks.begin(), op->chunks.end());
    op->chunks.erase(std::unique(op->chunks.begin(), op->chunks.end()), op->chunks.end());
  } else {
    op->a = m.a;
  }
  op->at_issue.resize(op->chunks.size() * 16);
  for (size_t i = 0; i < op->chunks.size(); ++i)
    std::memcpy(&op->at_issue[i * 16], shared_at(op->chunks[i]), 16);
  op->acc.assign(kWarpgroup, nullptr);
  op->in.assign(size_t(kWarpgroup) * size_t(rn), 0.f);
  op->from.assign(kWarpgroup, nullptr);
  for (int t = 0; t < kWarpgroup; ++t) {
    const int ti = wg * kWarpgroup + t;
    ThreadHopper& th = h.threads[size_t(ti)];
    float* acc = m.acc[size_t(t)];
    std::shared_ptr<WgmmaOp> prev;
    for (const WgmmaPending& p : th.wg_pending)
      if (p.op->acc[size_t(t)] == acc) prev = p.op;
    check_fence(b, th, ti, acc, rn, regs ? &m.a[size_t(t) * 4] : nullptr,
                regs ? m.a_at[size_t(t)] : nullptr, m.at, call, prev != nullptr);
    op->acc[size_t(t)] = acc;
    if (prev) op->from[size_t(t)] = prev;
    else std::memcpy(&op->in[size_t(t) * size_t(rn)], acc, size_t(rn) * 4);
    std::memset(acc, 0xFF, size_t(rn) * 4);  // in flight: NaN until the wait that covers it
    th.wg_pending.push_back(WgmmaPending{op, th.wg_committed});
    if (race::kEnabled) {
      if (prev) initcheck::acc_unwatch(ti, acc);
      initcheck::acc_watch(ti, acc, size_t(rn) * 4,
                           initcheck::AccInFlight{m.at.file, m.at.line, th.wg_committed, wg});
    }
  }
  if (race::kEnabled) {
    // A write of these chunks before the wait is a stage released too early.
    const int group = h.threads[size_t(wg * kWarpgroup)].wg_committed;
    int handle = -1;
    for_runs(op->chunks, [&](uint32_t a, uint32_t bytes) {
      handle = initcheck::async_started(
          shared_at(a), bytes,
          initcheck::AsyncCopy{initcheck::AsyncKind::WgmmaRead, m.at.file, m.at.line, wg, 0, 0,
                               nullptr, 0, group},
          handle);
    });
    op->handle = handle;
  }
  ++h.progress;
}

}  // namespace

void Hopper::compute(WgmmaOp& op) {
  if (op.done) return;
  const hopper::WgmmaCall& c = op.call;
  const int rn = c.n / 2, k = k_of(c), n = c.n;
  const uint32_t size = elem_bytes(c);
  std::vector<float> a(size_t(64 * k)), bm(size_t(n * k));  // A[m][k], B[n][k]
  // The operands' chunks as the async proxy reads them now, and an element's bytes in them.
  std::vector<char> seen(op.chunks.size() * 16);
  for (size_t i = 0; i < op.chunks.size(); ++i)
    async_read(shared_at(op.chunks[i]), &op.at_issue[i * 16], 16, &seen[i * 16]);
  const auto operand_at = [&](uint32_t address) {
    const size_t i = size_t(std::lower_bound(op.chunks.begin(), op.chunks.end(), address & ~15u) -
                            op.chunks.begin());
    return &seen[i * 16 + (address & 15u)];
  };
  if (!op.a.empty()) {
    // A's fragment: register j of thread t holds row 16 w + g + 8 (j % 2), and its
    // 16-bit halves (8-bit quarters) columns 2 q + 8 (j / 2) + h (4 q + 16 (j / 2) + h).
    const int per = 4 / int(size);
    for (int t = 0; t < kWarpgroup; ++t)
      for (int j = 0; j < 4; ++j)
        for (int e = 0; e < per; ++e) {
          const int row = 16 * (t / 32) + (t % 32) / 4 + 8 * (j % 2);
          const int col = per * (t % 4) + 4 * per * (j / 2) + e;
          const uint32_t word = op.a[size_t(t) * 4 + size_t(j)];
          char bytes[4];
          std::memcpy(bytes, &word, 4);
          a[size_t(row * k + col)] = load(bytes + e * int(size), c.type);
        }
  } else {
    const Tile ta = decode(c.desc_a, c.trans_a, size);
    for (int m = 0; m < 64; ++m)
      for (int kk = 0; kk < k; ++kk)
        a[size_t(m * k + kk)] = load(operand_at(ta.address(uint32_t(m), uint32_t(kk))), c.type);
  }
  const Tile tb = decode(c.desc_b, c.trans_b, size);
  for (int j = 0; j < n; ++j)
    for (int kk = 0; kk < k; ++kk)
      bm[size_t(j * k + kk)] = load(operand_at(tb.address(uint32_t(j), uint32_t(kk))), c.type);
  op.out.assign(size_t(kWarpgroup) * size_t(rn), 0.f);
  for (int t = 0; t < kWarpgroup; ++t) {
    const float* in = &op.in[size_t(t) * size_t(rn)];
    if (op.from[size_t(t)]) {
      compute(*op.from[size_t(t)]);
      in = &op.from[size_t(t)]->out[size_t(t) * size_t(rn)];
    }
    for (int i = 0; i < rn; ++i) {
      const int row = 16 * (t / 32) + (t % 32) / 4 + 8 * ((i / 2) % 2);
      const int col = 8 * (i / 4) + 2 * (t % 4) + i % 2;
      float s = c.accumulate ? in[i] : 0.f;
      for (int kk = 0; kk < k; ++kk) s += a[size_t(row * k + kk)] * bm[size_t(col * k + kk)];
      op.out[size_t(t) * size_t(rn) + size_t(i)] = s;
    }
  }
  for (auto& f : op.from) f.reset();
  op.in.clear();
  op.done = true;
  if (race::kEnabled && op.handle >= 0)
    for_runs(op.chunks, [&](uint32_t a0, uint32_t bytes) {
      initcheck::async_release(shared_at(a0), bytes, op.handle);
    });
}

const WgmmaOp* Hopper::wgmma_reading(const char* p, uint32_t bytes) const {
  const uint32_t lo = hopper::kDynamicSharedBase + uint32_t(p - shared_window().lo);
  for (const ThreadHopper& th : threads)
    for (const WgmmaPending& w : th.wg_pending) {
      if (w.op->done) continue;
      const auto it = std::lower_bound(w.op->chunks.begin(), w.op->chunks.end(), lo & ~15u);
      if (it != w.op->chunks.end() && *it < lo + bytes) return w.op.get();
    }
  return nullptr;
}

namespace hopper {

void wgmma_mma_async(const WgmmaCall& call, float* acc, const char* file, int line) {
  race::Quiet quiet;
  Block* b = current_block();
  Hopper& h = b->hopper();
  h.use();
  const Site at{file, line};
  const int me = b->thread_index(), wg = me / kWarpgroup, n = int(b->threads().size());
  const bool regs = call.a_regs != nullptr;
  if ((wg + 1) * kWarpgroup > n)
    b->fail_here(describe(call, regs) + " at " + place(at) +
                 ": a wgmma is issued by a warpgroup, 4 warps (128 threads) starting at a warp "
                 "index divisible by 4; this thread is in warpgroup " + std::to_string(wg) +
                 " (threads " + std::to_string(wg * kWarpgroup) + "-" +
                 std::to_string(wg * kWarpgroup + kWarpgroup - 1) + "), but the block has " +
                 std::to_string(n) + " threads");
  WgmmaMeet& m = h.meets[size_t(wg)];
  if (m.arrived == 0) {
    m.call = call;
    m.at = at;
    m.first = me;
    m.acc.assign(kWarpgroup, nullptr);
    m.a.assign(regs ? kWarpgroup * 4 : 0, 0);
    m.a_at.assign(regs ? kWarpgroup : 0, nullptr);
  } else {
    const WgmmaCall& f = m.call;
    const bool same = f.type == call.type && f.n == call.n && (f.a_regs != nullptr) == regs &&
                      (regs || f.desc_a == call.desc_a) && f.desc_b == call.desc_b &&
                      f.trans_a == call.trans_a && f.trans_b == call.trans_b &&
                      f.accumulate == call.accumulate && m.at.line == line &&
                      std::strcmp(m.at.file, file) == 0;
    if (!same)
      b->fail_here("emulator wgmma check: wgmma is .sync.aligned: the 128 threads of warpgroup " +
                   std::to_string(wg) + " issue the same one, with the same shape and "
                   "descriptors. This thread called " + describe(call, regs) + " at " +
                   place(at) + ", but " + thread_name(b, m.first) +
                   ", the first of its warpgroup to arrive, " + describe(m.call, m.call.a_regs) +
                   " at " + place(m.at));
  }
  const int t = me - wg * kWarpgroup;
  m.acc[size_t(t)] = acc;
  if (regs) {
    std::memcpy(&m.a[size_t(t) * 4], call.a_regs, 16);
    m.a_at[size_t(t)] = call.a_regs;
  }
  if (++m.arrived < kWarpgroup) {
    m.waiting.push_back(me);
    b->park(Wait::Warpgroup, "wgmma_mma_async", file, line);
    return;
  }
  m.call.a_regs = regs ? m.a.data() : nullptr;  // (its own pointer may be gone: only a flag now)
  issue(b, h, wg, m);
  for (int w : m.waiting) b->threads()[size_t(w)].wait = Wait::None;
  m = WgmmaMeet{};
}

void wgmma_fence(const char*, int) {
  race::Quiet quiet;
  Block* b = current_block();
  Hopper& h = b->hopper();
  h.use();
  ++h.threads[size_t(b->thread_index())].wg_fences;
}

void wgmma_commit(const char*, int) {
  race::Quiet quiet;
  Block* b = current_block();
  Hopper& h = b->hopper();
  h.use();
  ++h.threads[size_t(b->thread_index())].wg_committed;
}

void wgmma_wait(int pending, const char* file, int line) {
  race::Quiet quiet;
  Block* b = current_block();
  Hopper& h = b->hopper();
  h.use();
  const int me = b->thread_index(), t = me % kWarpgroup;
  {
    ThreadHopper& th = h.threads[size_t(me)];
    th.wg_wait = Site{file, line};
    th.wg_wait_n = pending;
    th.wg_wait_committed = th.wg_committed;
    bool any = false;
    for (const WgmmaPending& p : th.wg_pending) any |= p.group < th.wg_committed - pending;
    if (!any) return;
  }
  b->let_others_run();  // a scheduling point, as the GPU's wait is
  ThreadHopper& th = h.threads[size_t(me)];
  std::vector<WgmmaPending> kept;
  for (size_t i = 0; i < th.wg_pending.size(); ++i) {
    WgmmaPending& p = th.wg_pending[i];
    if (p.group >= th.wg_committed - pending) {
      kept.push_back(p);
      continue;
    }
    h.compute(*p.op);
    float* acc = p.op->acc[size_t(t)];
    bool later = false;  // a later wgmma of this thread chains on: its registers stay in flight
    for (size_t j = i + 1; j < th.wg_pending.size(); ++j) later |= th.wg_pending[j].op->acc[size_t(t)] == acc;
    if (later) continue;
    const int rn = p.op->call.n / 2;
    std::memcpy(acc, &p.op->out[size_t(t) * size_t(rn)], size_t(rn) * 4);
    WgmmaLanded& l = th.wg_landed[acc];
    l.fences = th.wg_fences;
    l.values.assign(acc, acc + rn);
    l.wait = Site{file, line};
    if (race::kEnabled) initcheck::acc_unwatch(me, acc);
  }
  th.wg_pending = std::move(kept);
  ++h.progress;
}

}  // namespace hopper
}  // namespace emu
