#include "kernels/cuda/cublas_linear.h"

#include <dlfcn.h>
#include <library_types.h>

#include "errors/error.h"
#include "kernels/cuda/cuda_status.h"

namespace tq::cuda {
namespace {

// The cuBLAS functions this file calls, from libcublas.so.13 loaded on first use: by its soname
// (LD_LIBRARY_PATH, the system's paths), else from the toolkit this was built with.
struct CublasApi {
  cublasStatus_t (*create)(cublasHandle_t*);
  cublasStatus_t (*destroy)(cublasHandle_t);
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
  cublasStatus_t (*set_math_mode)(cublasHandle_t, cublasMath_t);
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  const char* (*status_name)(cublasStatus_t);
};

const CublasApi& cublas() {
  static const CublasApi api = [] {
    void* lib = dlopen("libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen(TQ_CUBLAS_FALLBACK, RTLD_NOW | RTLD_LOCAL);
    if (!lib) fail("cannot load cuBLAS (libcublas.so.13, also tried {}): {}", TQ_CUBLAS_FALLBACK, dlerror());
    const auto symbol = [lib](const char* name) {
      void* p = dlsym(lib, name);
      if (!p) fail("libcublas.so.13 has no {}", name);
      return p;
    };
    CublasApi a;
    a.create = reinterpret_cast<decltype(a.create)>(symbol("cublasCreate_v2"));
    a.destroy = reinterpret_cast<decltype(a.destroy)>(symbol("cublasDestroy_v2"));
    a.set_stream = reinterpret_cast<decltype(a.set_stream)>(symbol("cublasSetStream_v2"));
    a.set_math_mode = reinterpret_cast<decltype(a.set_math_mode)>(symbol("cublasSetMathMode"));
    a.gemm_ex = reinterpret_cast<decltype(a.gemm_ex)>(symbol("cublasGemmEx"));
    a.status_name = reinterpret_cast<decltype(a.status_name)>(symbol("cublasGetStatusName"));
    return a;
  }();
  return api;
}

cudaDataType_t data_type(Element e) {
  switch (e) {
    case Element::F32: return CUDA_R_32F;
    case Element::F16: return CUDA_R_16F;
    case Element::BF16: return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

}  // namespace

void check_cublas(int status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    fail("{}: cuBLAS status {} ({})", what, status, cublas().status_name(static_cast<cublasStatus_t>(status)));
}

Blas::Blas(cudaStream_t stream) : stream_(stream) {
  check_cublas(cublas().create(&handle_), "cublasCreate");
  check_cublas(cublas().set_stream(handle_, stream), "cublasSetStream");
  // The default math mode keeps at least the requested precision: fp32 products are not rounded
  // to TF32, and bf16/f16 ones use the tensor cores with fp32 accumulation.
  check_cublas(cublas().set_math_mode(handle_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
}

Blas::~Blas() {
  if (handle_) cublas().destroy(handle_);
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
  check_cublas(cublas().gemm_ex(blas.handle(), CUBLAS_OP_T, CUBLAS_OP_N, rows, tokens, cols, &alpha, m.data.data(),
                            data_type(m.element), cols, b, data_type(m.element), cols, &beta, y, CUDA_R_32F, rows,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
  if (m.bias.size() > 0) add_bias(y, m.bias.data(), n, m.rows, blas.stream());
}

}  // namespace tq::cuda
