#include "kernels/cuda/cublas_linear.h"

#include <library_types.h>

#include "errors/error.h"
#include "kernels/cuda/cuda_status.h"

namespace tq::cuda {
namespace {

cudaDataType_t data_type(Element e) {
  switch (e) {
    case Element::F32: return CUDA_R_32F;
    case Element::F16: return CUDA_R_16F;
    case Element::BF16: return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

}  // namespace

Blas::Blas(cudaStream_t stream) : stream_(stream) {
  check_cublas(cublasCreate(&handle_), "cublasCreate");
  check_cublas(cublasSetStream(handle_, stream), "cublasSetStream");
  // The default math mode keeps at least the requested precision: fp32 products are not rounded
  // to TF32, and bf16/f16 ones use the tensor cores with fp32 accumulation.
  check_cublas(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
}

Blas::~Blas() {
  if (handle_) cublasDestroy(handle_);
}

void upload_rows(DeviceMatrix& m, int64_t first, int64_t count, const float* host_rows, DeviceArray<float>& staging,
                 cudaStream_t stream) {
  if (first < 0 || count < 0 || first + count > m.rows) fail("cuda::upload_rows: rows {}+{} of {}", first, count, m.rows);
  const int64_t n = count * m.cols;
  staging.upload(host_rows, static_cast<size_t>(n), stream);
  uint8_t* dst = m.data.data() + static_cast<size_t>(first * m.cols) * element_bytes(m.element);
  convert_floats(staging.data(), n, m.element, dst, stream);
  // The staging buffer is reused by the next call: its copy must be done first.
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (upload_rows)");
}

void linear(Blas& blas, const DeviceMatrix& m, const float* x, int64_t n, float* y, DeviceArray<uint8_t>& scratch) {
  if (n == 0) return;
  if (n > INT32_MAX || m.rows > INT32_MAX || m.cols > INT32_MAX) fail("cuda::linear: {} × {} × {}", n, m.rows, m.cols);
  const void* b = x;
  if (m.element != Element::F32) {
    scratch.reserve(static_cast<size_t>(n * m.cols) * element_bytes(m.element));
    convert_floats(x, n * m.cols, m.element, scratch.data(), blas.stream());
    b = scratch.data();
  }
  // Row-major y[n, out] is column-major yᵀ [out, n] = W [out, in] · xᵀ [in, n], and row-major
  // W [out, in] is column-major Wᵀ, hence OP_T on it.
  const float alpha = 1.0f, beta = 0.0f;
  const int rows = static_cast<int>(m.rows), cols = static_cast<int>(m.cols), tokens = static_cast<int>(n);
  check_cublas(cublasGemmEx(blas.handle(), CUBLAS_OP_T, CUBLAS_OP_N, rows, tokens, cols, &alpha, m.data.data(),
                            data_type(m.element), cols, b, data_type(m.element), cols, &beta, y, CUDA_R_32F, rows,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
  if (m.bias.size() > 0) add_bias(y, m.bias.data(), n, m.rows, blas.stream());
}

}  // namespace tq::cuda
