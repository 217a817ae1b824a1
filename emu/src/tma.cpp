// Hopper's bulk copies on the emulator: cp.async.bulk.tensor (TMA) loads and stores through a
// tensor map, and cp.async.bulk for contiguous rows.
//
// A load stages its box at the issue (out-of-bounds elements as zeros, the swizzle applied to
// the destination's shared addresses), and its bytes land when a waiter polls the barrier it
// completes on (mbarrier.cpp); the wrapper poisons the destination in between. A store reads
// its source, and writes global memory, at the issuing thread's wait_group that covers its
// group: so a source written again before bulk_wait_group_read stores the new bytes, as it may
// on the GPU.
#include <cstring>
#include <string>

#include "../../include/pa/hopper/swizzle.h"
#include "block.h"
#include "crash_report.h"
#include "init_check.h"
#include "memory_map.h"
#include "race_check.h"

namespace emu {

namespace {

// Calls f(smem_offset, global_byte_pointer or nullptr when out of bounds) for every element
// of the box at `coords`, in the box's dense order. Offsets are before the swizzle.
template <typename F>
void walk_box(const hopper::TensorMapDesc& m, const int32_t* coords, F f) {
  uint32_t n[5] = {1, 1, 1, 1, 1};
  for (int d = 0; d < m.rank; ++d)
    n[d] = d == 0 ? m.box[0] : (m.box[d] + m.elem_strides[d] - 1) / m.elem_strides[d];
  uint32_t offset = 0;
  for (uint32_t i4 = 0; i4 < n[4]; ++i4)
    for (uint32_t i3 = 0; i3 < n[3]; ++i3)
      for (uint32_t i2 = 0; i2 < n[2]; ++i2)
        for (uint32_t i1 = 0; i1 < n[1]; ++i1)
          for (uint32_t i0 = 0; i0 < n[0]; ++i0, offset += m.elem_bytes) {
            const uint32_t idx[5] = {i0, i1, i2, i3, i4};
            bool inside = true;
            uint64_t byte = 0;
            for (int d = 0; d < m.rank; ++d) {
              const int64_t g = int64_t(coords[d]) + int64_t(idx[d]) * (d ? m.elem_strides[d] : 1);
              if (g < 0 || uint64_t(g) >= m.dims[d]) inside = false;
              else byte += uint64_t(g) * m.strides[d];
            }
            f(offset, inside ? m.global + byte : nullptr);
          }
}

uint32_t box_bytes(const hopper::TensorMapDesc& m) {
  uint64_t n = m.elem_bytes;
  for (int d = 0; d < m.rank; ++d)
    n *= d == 0 ? m.box[0] : (m.box[d] + m.elem_strides[d] - 1) / m.elem_strides[d];
  return uint32_t(n);
}

const hopper::TensorMapDesc& checked_map(Block* b, const hopper::TensorMapDesc* map, int rank,
                                         const char* what, const Site& at) {
  if (!map || map->magic != hopper::kTensorMapMagic)
    b->fail_here(std::string(what) + " at " + place(at) +
                 " was given a tensor map that pa::encode_tensor_map did not make");
  if (map->rank != rank)
    b->fail_here(std::string(what) + " at " + place(at) + " passes " + std::to_string(rank) +
                 " coordinates to a tensor map of rank " + std::to_string(map->rank));
  return *map;
}

// Where the box's bytes go in shared memory: `dst` (shared address a) plus the swizzled
// offsets. The swizzle moves chunks within a 128-byte row; the box must cover whole rows of
// its span, or a chunk would leave it: the emulator refuses that rather than guess.
uint32_t swizzled(uint32_t a, uint32_t offset, uint32_t swizzle, uint32_t bytes, Block* b,
                  const char* what, const Site& at) {
  const uint32_t s = pa::swizzle_address(a + offset, swizzle) - a;
  if (s >= bytes)
    b->fail_here(std::string(what) + " at " + place(at) + ": with a " + std::to_string(swizzle) +
                 "-byte swizzle, the box's byte " + std::to_string(offset) +
                 " moves outside its " + std::to_string(bytes) +
                 " bytes (the box is not a whole number of swizzle rows from an aligned "
                 "start): the emulator does not model that; align the destination to the "
                 "swizzle's atom and make the box's inner extent the swizzle span");
  return s;
}

void require_aligned(Block* b, uint32_t a, uint32_t align, const char* what, const char* role,
                     const Site& at) {
  if (a % align)
    b->fail_here(std::string(what) + " at " + place(at) + ": its " + role + " at shared " +
                 hex_address(a) + " is not " + std::to_string(align) +
                 "-byte aligned, as the PTX ISA requires (the GPU faults on it)");
}

void require_global(Block* b, const void* p, size_t bytes, const char* what, const char* role,
                    const Site& at) {
  if (reinterpret_cast<uintptr_t>(p) & 15)
    b->fail_here(std::string(what) + " at " + place(at) + ": its " + role +
                 " in global memory is not 16-byte aligned");
  // (Plain mode: checked mode's allocations end at guard pages, and its lock would order
  // blocks for the race detector.)
  if (race::kEnabled) return;
  const std::string problem = check_device_range(p, bytes, role);
  if (!problem.empty()) b->fail_here(std::string(what) + " at " + place(at) + ": " + problem);
}

PendingLoad& start_load(Block* b, Mbarrier& m, void* dst, uint32_t bytes, bool tensor,
                        const Site& at) {
  Hopper& h = b->hopper();
  if (race::kEnabled)
    if (const WgmmaOp* w = h.wgmma_reading(static_cast<const char*>(dst), bytes)) {
      const uint32_t d = hopper::kDynamicSharedBase + uint32_t(static_cast<char*>(dst) - shared_window().lo);
      b->fail_here("emulator wgmma check: " + std::string(tensor ? "tma_load" : "bulk_load") +
                   " at " + place(at) + " writes shared memory (" + std::to_string(bytes) +
                   " bytes at shared " + hex_address(d) + ") that the wgmma_mma_async issued at " +
                   place(w->at) + " by warpgroup " + std::to_string(w->warpgroup) +
                   " still reads: its wgmma group " + std::to_string(w->group) +
                   " is not covered by a wgmma_wait_group yet. The stage was released one wait "
                   "too early: a consumer hands a stage back to the producer only after the "
                   "wgmma_wait_group<N> that covers the wgmmas reading it.");
    }
  h.land(m);  // a phase whose arrivals are in completes before this copy joins the next
  async_view_poison(static_cast<char*>(dst), bytes);
  m.flying.push_back(PendingLoad{static_cast<char*>(dst), std::vector<unsigned char>(bytes), at,
                                 b->thread_index(), tensor});
  m.completed_bytes += bytes;
  ++h.progress;
  initcheck::async_started(dst, bytes,
                           initcheck::AsyncCopy{tensor ? initcheck::AsyncKind::TensorLoad
                                                       : initcheck::AsyncKind::BulkLoad,
                                                at.file, at.line, b->thread_index(), m.address,
                                                m.phase, m.init.file, m.init.line, 0});
  return m.flying.back();
}

// A store's source at its issue: checked mode names an ordinary write that no
// fence.proxy.async followed, and watches the source for writes until the store reads it.
void start_store(Block* b, const char* src, uint32_t bytes, bool tensor, int group,
                 const char* what, const Site& at) {
  if (!race::kEnabled) return;
  std::vector<unsigned> fences;
  for (const Thread& t : b->threads()) fences.push_back(t.proxy_fences);
  int writer = -1;
  void* pc = nullptr;
  if (initcheck::unfenced_write(src, bytes, fences.data(), &writer, &pc)) {
    const uint3 w = b->threads()[size_t(writer)].idx;
    const std::string line = source_line(static_cast<char*>(pc) - 1);
    b->fail_here("emulator TMA check: " + std::string(what) + " at " + place(at) +
                 " reads shared memory that thread (" + std::to_string(w.x) + "," +
                 std::to_string(w.y) + "," + std::to_string(w.z) +
                 ") wrote with an ordinary store, and that thread has not called "
                 "fence_proxy_async since:\n" + (line.empty() ? "  at (unknown line)" : line) +
                 "\n  A bulk store reads through the async proxy, which sees an ordinary "
                 "(generic-proxy) write only after the writer's fence.proxy.async (and then a "
                 "barrier, if the writer is another thread): without it the store may read "
                 "stale bytes.");
  }
  initcheck::async_started(src, bytes,
                           initcheck::AsyncCopy{tensor ? initcheck::AsyncKind::TensorStore
                                                       : initcheck::AsyncKind::BulkStore,
                                                at.file, at.line, b->thread_index(), 0, 0,
                                                nullptr, 0, group});
}

}  // namespace

void Hopper::perform(PendingStore& s) {
  std::vector<char> src(s.bytes);  // the source as the async proxy reads it now
  async_read(s.src, s.at_issue.data(), s.bytes, src.data());
  if (s.tensor) {
    const uint32_t a = hopper::kDynamicSharedBase + uint32_t(s.src - shared_window().lo);
    const uint32_t bytes = box_bytes(s.map);
    walk_box(s.map, s.coords, [&](uint32_t offset, const char* g) {
      if (!g) return;  // out of bounds: the store writes nothing there
      const uint32_t from = pa::swizzle_address(a + offset, s.map.swizzle_bytes) - a;
      if (from < bytes) std::memcpy(const_cast<char*>(g), src.data() + from, s.map.elem_bytes);
    });
  } else {
    std::memcpy(s.dst, src.data(), s.bytes);
  }
  initcheck::async_landed(s.src, s.bytes);
}

void Hopper::thread_exited(int thread) {
  // Bulk stores complete even if their thread never waits: write them now.
  if (size_t(thread) >= threads.size()) return;
  for (PendingStore& s : threads[size_t(thread)].stores) perform(s);
  threads[size_t(thread)].stores.clear();
}

namespace hopper {

uint32_t tma_load(const TensorMapDesc* map, void* dst, const int32_t* coords, int rank, void* bar,
                  const char* file, int line) {
  race::Quiet quiet;
  Block* b = current_block();
  const Site at{file, line};
  const char* what = "tma_load";
  const TensorMapDesc& m = checked_map(b, map, rank, what, at);
  const uint32_t a = shared_address(dst, what, file, line);
  require_aligned(b, a, 128, what, "destination", at);
  Mbarrier& bm = b->hopper().barrier(bar, what, at);
  const uint32_t bytes = box_bytes(m);
  if (a - kDynamicSharedBase + bytes > shared_window().bytes)
    b->fail_here(std::string(what) + " at " + place(at) + ": the box's " + std::to_string(bytes) +
                 " bytes at shared " + hex_address(a) +
                 " run past the end of the block's dynamic shared memory");
  PendingLoad& c = start_load(b, bm, dst, bytes, true, at);
  walk_box(m, coords, [&](uint32_t offset, const char* g) {
    const uint32_t to = swizzled(a, offset, m.swizzle_bytes, bytes, b, what, at);
    if (g) std::memcpy(c.image.data() + to, g, m.elem_bytes);
    else std::memset(c.image.data() + to, 0, m.elem_bytes);  // out of bounds: zeros
  });
  return bytes;
}

uint32_t bulk_load(void* dst, const void* src, uint32_t bytes, void* bar, const char* file,
                   int line) {
  race::Quiet quiet;
  Block* b = current_block();
  const Site at{file, line};
  const char* what = "bulk_load";
  const uint32_t a = shared_address(dst, what, file, line);
  require_aligned(b, a, 16, what, "destination", at);
  if (bytes == 0 || bytes % 16)
    b->fail_here(std::string(what) + " at " + place(at) + ": " + std::to_string(bytes) +
                 " bytes; cp.async.bulk copies a nonzero multiple of 16 bytes");
  if (a - kDynamicSharedBase + bytes > shared_window().bytes)
    b->fail_here(std::string(what) + " at " + place(at) + ": " + std::to_string(bytes) +
                 " bytes at shared " + hex_address(a) +
                 " run past the end of the block's dynamic shared memory");
  require_global(b, src, bytes, what, "source", at);
  Mbarrier& bm = b->hopper().barrier(bar, what, at);
  PendingLoad& c = start_load(b, bm, dst, bytes, false, at);
  std::memcpy(c.image.data(), src, bytes);
  return bytes;
}

void async_issued(void* bar) {
  race::Quiet quiet;
  Block* b = current_block();
  const uint32_t a = shared_address(bar, "async copy", "?", 0);
  race::release(&b->hopper().barriers[a].token);
}

void tma_store(const TensorMapDesc* map, const void* src, const int32_t* coords, int rank,
               const char* file, int line) {
  race::Quiet quiet;
  Block* b = current_block();
  const Site at{file, line};
  const char* what = "tma_store";
  Hopper& h = b->hopper();
  h.use();
  const TensorMapDesc& m = checked_map(b, map, rank, what, at);
  const uint32_t a = shared_address(src, what, file, line);
  require_aligned(b, a, 128, what, "source", at);
  const uint32_t bytes = box_bytes(m);
  walk_box(m, coords, [&](uint32_t offset, const char*) {
    swizzled(a, offset, m.swizzle_bytes, bytes, b, what, at);
  });
  ThreadHopper& t = h.threads[size_t(b->thread_index())];
  start_store(b, static_cast<const char*>(src), bytes, true, t.committed, what, at);
  PendingStore s{t.committed, at, static_cast<const char*>(src), bytes, true, m, {}, nullptr,
                 std::vector<char>(static_cast<const char*>(src), static_cast<const char*>(src) + bytes)};
  for (int d = 0; d < rank; ++d) s.coords[d] = coords[d];
  t.stores.push_back(s);
  ++h.progress;
}

void bulk_store(void* dst, const void* src, uint32_t bytes, const char* file, int line) {
  race::Quiet quiet;
  Block* b = current_block();
  const Site at{file, line};
  const char* what = "bulk_store";
  Hopper& h = b->hopper();
  h.use();
  const uint32_t a = shared_address(src, what, file, line);
  require_aligned(b, a, 16, what, "source", at);
  if (bytes == 0 || bytes % 16)
    b->fail_here(std::string(what) + " at " + place(at) + ": " + std::to_string(bytes) +
                 " bytes; cp.async.bulk copies a nonzero multiple of 16 bytes");
  require_global(b, dst, bytes, what, "destination", at);
  ThreadHopper& t = h.threads[size_t(b->thread_index())];
  start_store(b, static_cast<const char*>(src), bytes, false, t.committed, what, at);
  t.stores.push_back(PendingStore{t.committed, at, static_cast<const char*>(src), bytes, false,
                                  TensorMapDesc{}, {}, static_cast<char*>(dst),
                                  std::vector<char>(static_cast<const char*>(src),
                                                    static_cast<const char*>(src) + bytes)});
  ++h.progress;
}

void bulk_commit(const char*, int) {
  race::Quiet quiet;
  Block* b = current_block();
  Hopper& h = b->hopper();
  h.use();
  ++h.threads[size_t(b->thread_index())].committed;
}

void bulk_wait(int n, bool, const char*, int) {
  race::Quiet quiet;
  Block* b = current_block();
  Hopper& h = b->hopper();
  h.use();
  ThreadHopper& t = h.threads[size_t(b->thread_index())];
  bool any = false;
  for (const PendingStore& s : t.stores) any |= s.group < t.committed - n;
  if (!any) return;
  b->let_others_run();  // a scheduling point, as cp_async_wait is
  ThreadHopper& u = h.threads[size_t(b->thread_index())];
  size_t kept = 0;
  for (PendingStore& s : u.stores) {
    if (s.group < u.committed - n) h.perform(s);  // its source is read, and global written, now
    else u.stores[kept++] = s;
  }
  u.stores.resize(kept);
}

}  // namespace hopper
}  // namespace emu
