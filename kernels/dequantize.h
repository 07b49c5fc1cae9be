// Conversion of one row of a stored weight tensor to fp32. Layouts follow ggml exactly
// (ggml-common.h block structs); golden data from the `gguf` Python package checks them.
#pragma once
#include <cstdint>

#include "kernels/dtype.h"

namespace tq {

// src: n elements of `type` (n a multiple of the block size); dst: [n] fp32.
void dequantize_row(DType type, const void* src, float* dst, int64_t n);

float fp16_to_fp32(uint16_t h);
float fp16_at(const uint8_t* p);  // the fp16 value stored at p (any alignment), as fp32
uint16_t fp32_to_fp16(float f);   // round to nearest even
// fp32_to_fp16 over n values, bit for bit (F16C's conversion where the CPU has it, 8 at a time).
void fp32_to_fp16_row(const float* src, uint16_t* dst, int64_t n);
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);   // round to nearest even, NaN kept NaN

}  // namespace tq
