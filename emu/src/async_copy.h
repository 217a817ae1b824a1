// One CUDA thread's cp.async copies in flight (pa/async_copy.h): each stays in flight,
// its destination poisoned, until a cp_async_wait covers its commit group.
#pragma once

#include <cstdint>
#include <vector>

#include "emu/cuda_emu.h"

namespace emu {

struct InFlightCopy {
  detail::LandedCopy copy;  // where it goes and the bytes it carries
  int group;                // the thread's commit group: 0, 1, ... (the open one: committed())
  const char* file;         // where it was issued
  int line;
  const char* commit_file = nullptr;  // where its group was committed (nullptr: not yet)
  int commit_line = 0;
};

struct CopyWait {  // a thread's latest cp_async_wait
  const char* file = nullptr;
  int line = 0;
  int n = 0;          // its N
  int committed = 0;  // the groups the thread had committed when it waited
};

class AsyncCopies {
 public:
  void issue(void* dst, const uint4& data, const char* file, int line);
  void commit(const char* file, int line);
  // Do groups older than the newest n still have copies in flight?
  bool must_land(int n) const;
  // Removes the copies of every committed group but the newest n from flight and returns
  // them (valid until the next call); records the wait.
  const std::vector<detail::LandedCopy>& land(int n, const char* file, int line);
  // The copy in flight into [dst, dst + 16), or nullptr.
  const InFlightCopy* find(uintptr_t dst) const;
  int committed() const { return committed_; }
  const CopyWait& last_wait() const { return wait_; }

 private:
  std::vector<InFlightCopy> flying_;  // in issue order
  std::vector<detail::LandedCopy> landing_;
  int committed_ = 0;
  CopyWait wait_;
};

}  // namespace emu
