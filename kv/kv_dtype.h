// Element formats of KV cache pages (`--kv-cache-dtype`, `--kv-cache-dtype-k/-v`).
//
//   f32, bf16, f16   full precision (the FP path: stored and read exactly as before TurboQuant)
//   q8_0, q4_0       llama.cpp's block formats (baselines)
//   q4_0h            q4_0 of the row after a per-layer randomized Hadamard rotation, what
//                    llama.cpp does for quantized caches; attention runs in the rotated space
//   tq4, tq3, tq2    TurboQuant: fp32 norm + b-bit Lloyd-Max codes of the rotated unit row
//   tq4h, tq3h, tq2h the same with an fp16 norm (2 bytes a row fewer: 0.25 bits at head_dim 64)
//   tq4c, tq3c, tq2c TurboQuant with channel bits (quant/channel_bits.h): the row in a calibrated
//                    per-head basis, bits per coordinate by reverse water-filling, fp16 scale;
//                    the bytes of tq<b>h
//   tq4p             TurboQuant with 4 bits per coordinate coded in pairs: one byte per pair of
//                    rotated coordinates, the nearest of 256 points (quant/pair_codebook.h), and an
//                    fp16 scale; the bytes of tq4h
//   tq3o, tq2o       TurboQuant with orthant codes: one sign bit per rotated coordinate and one
//                    byte per group of 4 (3 bits) or 8 (2 bits) coordinates' magnitudes, the
//                    nearest of 256 patterns (quant/orthant_codebook.h), and an fp16 scale; the
//                    bytes of tq3h / tq2h
//   tq3.5, tq2.5     TurboQuant split: the row's outlier half (chosen per layer and KV head by
//                    calibration, engine/kv_calibration.h) at 4 (3) bits, the rest at 3 (2) bits
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace tq {

enum class KvDtype { F32, BF16, F16, Q8_0, Q4_0, Q4_0H, TQ4, TQ3, TQ2, TQ3_5, TQ2_5, TQ4H, TQ3H, TQ2H, TQ4C, TQ3C, TQ2C, TQ4P, TQ3O, TQ2O };

std::optional<KvDtype> parse_kv_dtype(std::string_view name);
std::string_view kv_dtype_name(KvDtype dtype);
std::string kv_dtype_choices();  // "f32, bf16, f16, q8_0, ..." for error messages

bool kv_dtype_is_fp(KvDtype dtype);        // f32, bf16, f16
bool kv_dtype_is_tq(KvDtype dtype);        // tq*
bool kv_dtype_is_split(KvDtype dtype);     // tq3.5, tq2.5
bool kv_dtype_has_f16_norm(KvDtype dtype);  // tq4h, tq3h, tq2h
bool kv_dtype_is_channel_bits(KvDtype dtype);  // tq4c, tq3c, tq2c
bool kv_dtype_is_pairs(KvDtype dtype);     // tq4p
bool kv_dtype_is_orthant(KvDtype dtype);   // tq3o, tq2o
bool kv_dtype_is_rotated(KvDtype dtype);   // q4_0h and tq*
// TurboQuant bit widths: {b, b} for tq<b>, {hi, lo} for split modes; {0, 0} otherwise.
std::pair<int, int> kv_dtype_tq_bits(KvDtype dtype);

// Fails, naming the dtype and listing what is valid, when head_dim cannot be stored as `dtype`
// (q8_0/q4_0/q4_0h: multiple of 32; q4_0h: power of two; tq: packing; split: halves too;
// hadamard rotation for tq: power of two).
void check_kv_dtype(KvDtype dtype, int head_dim, bool hadamard_rotation);

// Bytes of one cached row (one KV head at one position) of `head_dim` values.
size_t kv_row_bytes(KvDtype dtype, int head_dim);
// Stored bits per element, norms and scales included.
double kv_bits_per_element(KvDtype dtype, int head_dim);

// FP dtypes only. Store one row: src [head_dim] fp32 → dst [kv_row_bytes].
void kv_encode_row(KvDtype dtype, const float* src, int head_dim, void* dst);
// FP dtypes only. Read one row back: src [kv_row_bytes] → dst [head_dim] fp32.
void kv_decode_row(KvDtype dtype, const void* src, int head_dim, float* dst);

}  // namespace tq
