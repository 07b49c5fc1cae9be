// Element types of weight tensors, numbered as ggml numbers them (GGUF stores these ids).
// Block-quantized types pack `block_elems` values into `block_bytes` bytes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tq {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
};

struct DTypeTraits {
  std::string_view name;  // "f32", "q4_k", ...
  int block_elems;        // values per block (1 for plain types)
  int block_bytes;        // bytes per block
  bool supported;         // can be converted to f32 by dequantize_row()
};

// Traits of a ggml type id; nullopt when the id is unknown.
std::optional<DTypeTraits> dtype_traits(uint32_t ggml_type_id);
const DTypeTraits& dtype_traits(DType type);

// Bytes needed for `n` elements (n must be a multiple of block_elems).
size_t dtype_row_bytes(DType type, int64_t n);

}  // namespace tq
