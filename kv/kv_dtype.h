// Element formats of KV cache pages (`--kv-cache-dtype`). Full precision for now; the
// TurboQuant issue adds quantized formats beside these without changing how FP rows are stored.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "kernels/attention_fp.h"

namespace tq {

enum class KvDtype { F32, BF16, F16 };

std::optional<KvDtype> parse_kv_dtype(std::string_view name);
std::string_view kv_dtype_name(KvDtype dtype);
std::string kv_dtype_choices();  // "f32, bf16, f16" for error messages

// Bytes of one cached row (one KV head at one position) of `head_dim` values.
size_t kv_row_bytes(KvDtype dtype, int head_dim);

// The element type the FP attention kernel reads.
FpElem kv_fp_elem(KvDtype dtype);

// Store one row: src [head_dim] fp32 → dst [kv_row_bytes].
void kv_encode_row(KvDtype dtype, const float* src, int head_dim, void* dst);
// Read one row back: src [kv_row_bytes] → dst [head_dim] fp32.
void kv_decode_row(KvDtype dtype, const void* src, int head_dim, float* dst);

}  // namespace tq
