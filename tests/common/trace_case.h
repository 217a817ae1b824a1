// The KVConfig a golden trace case was computed for (its case.txt keys).
#pragma once

#include "golden.h"
#include "pa/trace.h"

namespace pa::test {

inline KVConfig kv_config_of(const GoldenCase& c) {
  KVConfig cfg;
  cfg.num_layers = int(c.param_int("num_layers"));
  cfg.num_kv_heads = int(c.param_int("num_kv_heads"));
  cfg.head_size = int(c.param_int("head_size"));
  cfg.dtype_bytes = int(c.param_int("dtype_bytes"));
  cfg.max_seq_len = int(c.param_int("max_seq_len"));
  return cfg;
}

}  // namespace pa::test
