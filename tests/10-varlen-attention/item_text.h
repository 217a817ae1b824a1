// Chapter 10's tests: a work item as text, for failure messages (test_plan.cpp,
// test_plan_exact.cpp).
#pragma once

#include <sstream>
#include <string>

#include "pa/ch10_varlen.h"

namespace pa::test {

inline std::string item_text(const pa::ch10::WorkItem& w) {
  std::ostringstream os;
  os << "{seq " << w.seq << ", kv_head " << w.kv_head << ", row0 " << w.row0 << ", kv ["
     << w.kv_begin << ", " << w.kv_end << "), split " << w.split << "/" << w.num_splits
     << ", partial_base " << w.partial_base << ", counter " << w.counter
     << (w.by_warp ? ", by_warp" : "") << "}";
  return os.str();
}

}  // namespace pa::test
