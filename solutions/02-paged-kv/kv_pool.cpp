// The checked pieces of chapter 2 that are given: shape validation and the pool buffers.
#include "pa/ch02_paged.h"
#include "pa/dtype.h"

namespace pa::ch02 {

void check_pool_shape(const PoolShape& s, int x) {
  PA_REQUIRE(s.num_blocks > 0, "num_blocks must be positive, got " << s.num_blocks);
  PA_REQUIRE(s.block_size == 8 || s.block_size == 16 || s.block_size == 32,
             "block_size " << s.block_size << " is not supported (8, 16 or 32)");
  PA_REQUIRE(s.num_kv_heads > 0, "num_kv_heads must be positive, got " << s.num_kv_heads);
  PA_REQUIRE(s.head_size == 64 || s.head_size == 80 || s.head_size == 96 ||
                 s.head_size == 112 || s.head_size == 128 || s.head_size == 256,
             "head_size " << s.head_size << " is not supported (64, 80, 96, 112, 128, 256)");
  PA_REQUIRE(s.head_size % x == 0,
             "head_size " << s.head_size << " is not a multiple of x = " << x);
}

template <typename T>
KVPool<T>::KVPool(const PoolShape& s) : shape(s) {
  check_pool_shape(s, pack_x<T>());
  k = DeviceBuffer<T>(size_t(pool_elems(s)));
  v = DeviceBuffer<T>(size_t(pool_elems(s)));
  k.fill_bytes(0xFF);  // NaN: a read of a slot nobody wrote shows up in the output
  v.fill_bytes(0xFF);
}

template struct KVPool<float>;
template struct KVPool<half>;
template struct KVPool<bf16>;

}  // namespace pa::ch02
