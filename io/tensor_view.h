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
  const uint8_t* data = nullptr;  // valid while the file object that produced it lives
  size_t nbytes = 0;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
};

}  // namespace tq
