// Linear layers on the GPU through cuBLAS: y[n, out] = x[n, in] · Wᵀ (+ b) with W held as f32,
// f16 or bf16 and fp32 activations (converted to W's element type first; fp32 accumulation).
// cuBLAS chooses its algorithm by shape, so a product's last bits can depend on n: the GPU path
// is not batch-invariant in its linear layers (docs/CUDA.md). cuBLAS is loaded (dlopen) when the
// first handle is made, not linked: libcublasLt alone is 540 MB, and every process of the CPU
// path (each test, each tqserve run) would otherwise pay ~80 ms to map it at start-up.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_array.h"
#include "kernels/cuda/transformer_ops.h"

namespace tq::cuda {

// Throws tq::Error "<what>: cuBLAS status <n> (<name>)" unless status is CUBLAS_STATUS_SUCCESS.
void check_cublas(int status, const char* what);

// A cuBLAS handle bound to one stream.
class Blas {
 public:
  explicit Blas(cudaStream_t stream);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  cublasHandle_t handle() const { return handle_; }
  cudaStream_t stream() const { return stream_; }

 private:
  cublasHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

struct DeviceMatrix {
  Element element = Element::F32;
  int64_t rows = 0;  // out
  int64_t cols = 0;  // in
  DeviceArray<uint8_t> data;  // [rows, cols] of `element`
  DeviceArray<float> bias;    // [rows] or empty
  size_t bytes() const { return data.bytes() + bias.bytes(); }
};

// Fills m's rows [first, first + count) from fp32 host rows [count, m.cols], rounding them to
// m.element on the device (`staging` holds the fp32 rows on their way).
void upload_rows(DeviceMatrix& m, int64_t first, int64_t count, const float* host_rows, DeviceArray<float>& staging,
                 cudaStream_t stream);

// y[n, m.rows] = x[n, m.cols] · mᵀ (+ bias). `scratch` holds x in m's element type when that is
// not fp32. x, y: device memory.
void linear(Blas& blas, const DeviceMatrix& m, const float* x, int64_t n, float* y, DeviceArray<uint8_t>& scratch);

}  // namespace tq::cuda
