// A typed array in device memory (cudaMalloc: the backend never asks for managed memory), owned
// like a std::vector without its element-wise operations.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_status.h"

namespace tq::cuda {

template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(size_t n) { resize(n); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  ~DeviceArray() { release(); }

  // Discards the contents; a no-op when the size is already n.
  void resize(size_t n) {
    if (n == size_) return;
    release();
    if (n > 0) check(cudaMalloc(reinterpret_cast<void**>(&data_), n * sizeof(T)), "cudaMalloc");
    size_ = n;
  }
  // Grows (discarding the contents) when fewer than n elements are held.
  void reserve(size_t n) {
    if (n > size_) resize(n);
  }
  void upload(const T* host, size_t n, cudaStream_t stream = nullptr) {
    reserve(n);
    if (n > 0) check(cudaMemcpyAsync(data_, host, n * sizeof(T), cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync (to device)");
  }
  void upload(const std::vector<T>& host, cudaStream_t stream = nullptr) { upload(host.data(), host.size(), stream); }
  // Copies the first n elements to host memory (synchronous on `stream`).
  void download(T* host, size_t n, cudaStream_t stream = nullptr) const {
    if (n == 0) return;
    check(cudaMemcpyAsync(host, data_, n * sizeof(T), cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync (to host)");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }
  std::vector<T> to_host(cudaStream_t stream = nullptr) const {
    std::vector<T> out(size_);
    download(out.data(), size_, stream);
    return out;
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }

 private:
  void release() {
    if (data_) cudaFree(data_);
    data_ = nullptr;
    size_ = 0;
  }
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace tq::cuda
