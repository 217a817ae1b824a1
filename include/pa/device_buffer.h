// An owning, move-only array in device memory (host memory on the emulator).
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "pa/check.h"

namespace pa {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) : count_(count) {
    if (count_) PA_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), bytes()));
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) {
    upload(host);
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(count_, o.count_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() { return ptr_; }
  const T* get() const { return ptr_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }

  void upload(const std::vector<T>& host) {
    PA_REQUIRE(host.size() == count_, "upload of " << host.size()
                                                   << " elements into a buffer of " << count_);
    if (count_) PA_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), bytes(), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    if (count_) PA_CUDA_CHECK(cudaMemcpy(host.data(), ptr_, bytes(), cudaMemcpyDeviceToHost));
    return host;
  }
  // Grows to hold at least n (at least 1), filled with fill_byte; never shrinks, so the
  // address stays while what is asked for fits (a captured CUDA graph keeps it).
  void reserve(size_t n, int fill_byte) {
    if (count_ >= n && count_ > 0) return;
    *this = DeviceBuffer(n > 0 ? n : 1);
    fill_bytes(fill_byte);
  }
  // Copies host into the first host.size() elements, growing first as reserve() does (a
  // step's metadata: the buffer keeps its address while the batch fits).
  void upload_prefix(const std::vector<T>& host) {
    reserve(host.size(), 0);
    if (!host.empty())
      PA_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  // Fills every byte (0xFF poisons floats and halves with NaN).
  void fill_bytes(int byte) {
    if (count_) PA_CUDA_CHECK(cudaMemset(ptr_, byte, bytes()));
  }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

}  // namespace pa
