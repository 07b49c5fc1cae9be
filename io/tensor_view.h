// A tensor as it lies in a model file: no copy, points into a memory-mapped file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/dtype.h"

namespace tq {

struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  // Outermost dimension first (PyTorch order): a Linear weight is {out_features, in_features}.
  // GGUF stores ne[] innermost first; its reader reverses them into this order.
  std::vector<int64_t> dims;
  // Valid while the file object that produced it lives. Aligned only as the file aligns it:
  // GGUF to general.alignment (32 unless the file says otherwise, possibly less than the element
  // size), safetensors to the element size when the header is padded to 8 bytes as the
  // safetensors library writes it. Readers accept unaligned files; code that casts `data` to
  // float* / uint16_t* must check alignment or copy.
  const uint8_t* data = nullptr;
  size_t nbytes = 0;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
};

}  // namespace tq
