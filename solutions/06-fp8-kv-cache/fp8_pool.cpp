// The given host side of chapter 6: the fp8 pools and their scales.
#include <cmath>

#include "pa/ch06_fp8.h"

namespace pa::ch06 {

Fp8Pool::Fp8Pool(const PoolShape& s, float ks, float vs) : shape(s) {
  ch02::check_pool_shape(s, kFp8X);
  PA_REQUIRE(ks > 0.f && vs > 0.f && std::isfinite(ks) && std::isfinite(vs),
             "fp8 scales must be positive and finite, got k_scale " << ks << ", v_scale " << vs);
  k = DeviceBuffer<uint8_t>(size_t(ch02::pool_elems(s)));
  v = DeviceBuffer<uint8_t>(size_t(ch02::pool_elems(s)));
  k.fill_bytes(0xFF);  // an e4m3 NaN: a read of a slot nobody wrote shows up
  v.fill_bytes(0xFF);
  k_scale = DeviceBuffer<float>(std::vector<float>{ks});
  v_scale = DeviceBuffer<float>(std::vector<float>{vs});
}

}  // namespace pa::ch06
