#include "model/weights.h"

#include <cstring>
#include <vector>

#include "kernels/dequantize.h"
#include "kernels/interleaved_rows.h"
#include "kernels/matmul.h"
#include "kernels/stored_matmul.h"

namespace tq {

void apply_linear(const LinearWeights& lw, const float* x, int64_t n, float* y) {
  if (lw.dtype == DType::F32) {
    linear(x, n, lw.in, lw.w.data(), lw.out, lw.bias_or_null(), y);
  } else {
    const StoredProduct product{lw.dtype, lw.packed.data(), lw.out, lw.bias_or_null(), y, lw.group_rows};
    linear_stored_many(x, n, lw.in, &product, 1);
  }
}

void apply_linears(std::initializer_list<LinearOutput> outputs, const float* x, int64_t n) {
  const int64_t in = outputs.begin()->lw.in;
  bool stored = true;
  for (const LinearOutput& o : outputs) stored = stored && o.lw.dtype != DType::F32 && o.lw.in == in;
  if (!stored) {
    for (const LinearOutput& o : outputs) apply_linear(o.lw, x, n, o.y);
    return;
  }
  std::vector<StoredProduct> products;  // [outputs.size()]
  for (const LinearOutput& o : outputs) products.push_back({o.lw.dtype, o.lw.packed.data(), o.lw.out, o.lw.bias_or_null(), o.y, o.lw.group_rows});
  linear_stored_many(x, n, in, products.data(), static_cast<int>(products.size()));
}

void linear_row(const LinearWeights& lw, int64_t index, float* dst) {
  if (lw.dtype == DType::F32) {
    std::memcpy(dst, lw.w.data() + index * lw.in, sizeof(float) * lw.in);
  } else if (lw.group_rows > 0) {
    std::vector<uint8_t> row(dtype_row_bytes(lw.dtype, lw.in));  // [row bytes]
    deinterleave_row(lw.dtype, lw.packed.data(), lw.in, lw.group_rows, index, row.data());
    dequantize_row(lw.dtype, row.data(), dst, lw.in);
  } else {
    const size_t row_bytes = dtype_row_bytes(lw.dtype, lw.in);
    dequantize_row(lw.dtype, lw.packed.data() + index * row_bytes, dst, lw.in);
  }
}

}  // namespace tq
