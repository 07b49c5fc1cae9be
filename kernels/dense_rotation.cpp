// Scalar dense rotations: the reference order the AVX-512 kernels keep (kernels/dense_rotation.h).
#include "kernels/dense_rotation.h"

#include <cstddef>
#include <cstring>
#include <vector>

namespace tq {
namespace {

// A copy of the input, so that the output may overwrite it, without an allocation per call.
const float* input_copy(const float* x, int n) {
  thread_local std::vector<float> buf;
  if (buf.size() < size_t(n)) buf.resize(n);
  std::memcpy(buf.data(), x, sizeof(float) * n);
  return buf.data();
}

}  // namespace

void rotate_dense_scalar(const float* r, const float* x, float* y, int n) {
  const float* in = input_copy(x, n);
  // FP32 accumulation in 8 interleaved partial sums: a fixed order that a vector register holds.
  for (int i = 0; i < n; ++i) {
    const float* row = r + size_t(i) * n;
    float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int j = 0;
    for (; j + 8 <= n; j += 8) {
      for (int k = 0; k < 8; ++k) part[k] += row[j + k] * in[j + k];
    }
    for (; j < n; ++j) part[j & 7] += row[j] * in[j];
    y[i] = ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
  }
}

void rotate_dense_transpose_scalar(const float* r, const float* y, float* x, int n) {
  const float* in = input_copy(y, n);
  // x = sum_i y_i * row_i: contiguous row reads (axpy) instead of strided column reads.
  std::memset(x, 0, sizeof(float) * n);
  for (int i = 0; i < n; ++i) {
    const float* row = r + size_t(i) * n;
    const float yi = in[i];
    for (int j = 0; j < n; ++j) x[j] += yi * row[j];
  }
}

}  // namespace tq
