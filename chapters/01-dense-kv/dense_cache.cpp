// The checked host API of chapter 1: shape validation and the DenseKVCache class.
#include <cmath>
#include <limits>

#include "pa/ch01_dense.h"
#include "pa/check.h"
#include "pa/dtype.h"

namespace pa::ch01 {

bool is_supported_head_size(int d) {
  return d == 64 || d == 80 || d == 96 || d == 112 || d == 128 || d == 256;
}

void check_shape(const DenseShape& s) {
  PA_REQUIRE(s.num_seqs > 0, "num_seqs must be positive, got " << s.num_seqs);
  PA_REQUIRE(s.max_seq_len > 0, "max_seq_len must be positive, got " << s.max_seq_len);
  PA_REQUIRE(s.num_q_heads > 0 && s.num_kv_heads > 0,
             "head counts must be positive, got num_q_heads " << s.num_q_heads
                                                              << ", num_kv_heads "
                                                              << s.num_kv_heads);
  PA_REQUIRE(s.num_q_heads % s.num_kv_heads == 0,
             "num_q_heads (" << s.num_q_heads << ") must be a multiple of num_kv_heads ("
                             << s.num_kv_heads << ")");
  PA_REQUIRE(is_supported_head_size(s.head_size),
             "head_size " << s.head_size << " is not supported (64, 80, 96, 112, 128, 256)");
  PA_REQUIRE(s.num_seqs <= 65535 && s.num_q_heads <= 65535,
             "num_seqs and num_q_heads must be at most 65535 (grid limits)");
}

template <typename T>
DenseKVCache<T>::DenseKVCache(const DenseShape& shape)
    : shape_(shape),
      positions_(static_cast<size_t>(shape.num_seqs)),
      context_lens_(static_cast<size_t>(shape.num_seqs)),
      lengths_(static_cast<size_t>(shape.num_seqs), 0) {
  check_shape(shape);
  const size_t elems = size_t(shape.num_seqs) * shape.max_seq_len * shape.num_kv_heads *
                       shape.head_size;
  k_ = DeviceBuffer<T>(elems);
  v_ = DeviceBuffer<T>(elems);
  // Unwritten slots hold NaN: a kernel that reads past a sequence's end shows it.
  k_.fill_bytes(0xFF);
  v_.fill_bytes(0xFF);
}

template <typename T>
void DenseKVCache<T>::append(const T* k_new, const T* v_new, const std::vector<bool>& active) {
  PA_REQUIRE(active.empty() || active.size() == lengths_.size(),
             "append: active has " << active.size() << " entries for " << lengths_.size()
                                   << " sequences");
  std::vector<int> positions(lengths_.size());
  for (size_t b = 0; b < lengths_.size(); ++b) {
    const bool on = active.empty() || active[b];
    PA_REQUIRE(!on || lengths_[b] < shape_.max_seq_len,
               "append: sequence " << b << " is full (max_seq_len " << shape_.max_seq_len
                                   << "); a dense cache cannot grow");
    positions[b] = on ? lengths_[b] : -1;
  }
  positions_.upload(positions);
  append_kv(shape_, k_.get(), v_.get(), k_new, v_new, positions_.get());
  for (size_t b = 0; b < lengths_.size(); ++b)
    if (positions[b] >= 0) ++lengths_[b];
}

template <typename T>
void DenseKVCache<T>::decode(T* out, const T* q, float scale) {
  if (scale == 0.f) scale = 1.f / std::sqrt(static_cast<float>(shape_.head_size));
  context_lens_.upload(lengths_);
  decode_attention(shape_, out, q, k_.get(), v_.get(), context_lens_.get(), scale);
}

template class DenseKVCache<float>;
template class DenseKVCache<half>;
template class DenseKVCache<bf16>;

}  // namespace pa::ch01
