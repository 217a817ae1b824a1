// cp.async on the emulator: the copies of a commit group land at the latest point the
// hardware allows, the cp_async_wait that covers the group. Until then the destination
// holds the issue's poison, so a read that comes too early reads NaN on every schedule.
// A wait is also a scheduling point: the thread lets the others run before its copies land
// (on a GPU its warp stalls there), so a read of another thread's copy without the barrier
// after the wait meets the poison under forward, reverse, greedy or random order alike.
#include "async_copy.h"

#include <cstdio>
#include <string>

#include "block.h"
#include "init_check.h"
#include "race_check.h"

namespace emu {

void AsyncCopies::issue(void* dst, const uint4& data, const char* file, int line) {
  flying_.push_back(InFlightCopy{{dst, data}, committed_, file, line});
}

void AsyncCopies::commit(const char* file, int line) {
  for (auto it = flying_.rbegin(); it != flying_.rend() && it->group == committed_; ++it) {
    it->commit_file = file;
    it->commit_line = line;
  }
  ++committed_;
}

bool AsyncCopies::must_land(int n) const {
  return !flying_.empty() && flying_.front().group < committed_ - n;
}

const std::vector<detail::LandedCopy>& AsyncCopies::land(int n, const char* file, int line) {
  landing_.clear();
  size_t kept = 0;
  for (const InFlightCopy& c : flying_) {
    if (c.group < committed_ - n) landing_.push_back(c.copy);
    else flying_[kept++] = c;
  }
  flying_.resize(kept);
  wait_ = CopyWait{file, line, n, committed_};
  return landing_;
}

const InFlightCopy* AsyncCopies::find(uintptr_t dst) const {
  for (const InFlightCopy& c : flying_) {
    const uintptr_t lo = reinterpret_cast<uintptr_t>(c.copy.dst);
    if (dst >= lo && dst < lo + 16) return &c;
  }
  return nullptr;
}

namespace detail {

void cp_async_misaligned(const void* dst, const void* src, const char* file, int line) {
  race::Quiet quiet;
  char what[160];
  std::snprintf(what, sizeof what, "destination %p, source %p", dst, src);
  current_block()->fail_here("cp_async16 at " + std::string(file) + ":" + std::to_string(line) +
                             " copies 16 bytes between addresses that are not both 16-byte "
                             "aligned (" + what + "); the GPU faults on it (misaligned address)");
}

// Emulator code on a kernel fiber: ThreadSanitizer must not take its heap for the kernel's.
void cp_async_issue(void* dst, const uint4& data, const char* file, int line) {
  race::Quiet quiet;
  Block* b = current_block();
  b->copies().issue(dst, data, file, line);
  initcheck::copy_started(dst, b->thread_index());
}

void cp_async_commit(const char* file, int line) {
  race::Quiet quiet;
  current_block()->copies().commit(file, line);
}

const LandedCopy* cp_async_wait(int n, const char* file, int line, size_t* count) {
  race::Quiet quiet;
  Block* b = current_block();
  if (b->copies().must_land(n)) b->let_others_run();
  const std::vector<LandedCopy>& landed = b->copies().land(n, file, line);
  for (const LandedCopy& c : landed) initcheck::copy_landed(c.dst);
  *count = landed.size();
  return landed.data();
}

}  // namespace detail
}  // namespace emu
