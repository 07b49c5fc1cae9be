#include "kv/kv_dtype.h"

#include <cstdint>
#include <cstring>
#include <utility>

#include "errors/error.h"
#include "kernels/dequantize.h"
#include "kernels/ggml_blocks.h"
#include "kernels/tq_packing.h"
#include "quant/orthant_codebook.h"
#include "quant/pair_codebook.h"

namespace tq {

namespace {

struct NamedDtype {
  KvDtype dtype;
  std::string_view name;
};
constexpr NamedDtype kDtypes[] = {
    {KvDtype::F32, "f32"},   {KvDtype::BF16, "bf16"},   {KvDtype::F16, "f16"},  {KvDtype::Q8_0, "q8_0"},
    {KvDtype::Q4_0, "q4_0"}, {KvDtype::Q4_0H, "q4_0h"}, {KvDtype::TQ4, "tq4"},  {KvDtype::TQ3, "tq3"},
    {KvDtype::TQ2, "tq2"},   {KvDtype::TQ3_5, "tq3.5"}, {KvDtype::TQ2_5, "tq2.5"}, {KvDtype::TQ4H, "tq4h"},
    {KvDtype::TQ3H, "tq3h"}, {KvDtype::TQ2H, "tq2h"},
    {KvDtype::TQ4C, "tq4c"}, {KvDtype::TQ3C, "tq3c"}, {KvDtype::TQ2C, "tq2c"}, {KvDtype::TQ4P, "tq4p"},
    {KvDtype::TQ3O, "tq3o"}, {KvDtype::TQ2O, "tq2o"},
};

bool power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

void require_fp(KvDtype dtype, const char* what) {
  if (!kv_dtype_is_fp(dtype)) fail("{} is only defined for f32, bf16 and f16 rows, not {}", what, kv_dtype_name(dtype));
}

}  // namespace

std::optional<KvDtype> parse_kv_dtype(std::string_view name) {
  if (name == "float32") return KvDtype::F32;
  if (name == "bfloat16") return KvDtype::BF16;
  if (name == "float16" || name == "fp16") return KvDtype::F16;
  for (const NamedDtype& d : kDtypes)
    if (d.name == name) return d.dtype;
  return std::nullopt;
}

std::string_view kv_dtype_name(KvDtype dtype) {
  for (const NamedDtype& d : kDtypes)
    if (d.dtype == dtype) return d.name;
  return "?";
}

std::string kv_dtype_choices() {
  std::string out;
  for (const NamedDtype& d : kDtypes) {
    if (!out.empty()) out += ", ";
    out += d.name;
  }
  return out;
}

bool kv_dtype_is_fp(KvDtype dtype) { return dtype == KvDtype::F32 || dtype == KvDtype::BF16 || dtype == KvDtype::F16; }

bool kv_dtype_is_tq(KvDtype dtype) { return kv_dtype_tq_bits(dtype).first > 0; }

bool kv_dtype_is_split(KvDtype dtype) { return dtype == KvDtype::TQ3_5 || dtype == KvDtype::TQ2_5; }

bool kv_dtype_has_f16_norm(KvDtype dtype) {
  return dtype == KvDtype::TQ4H || dtype == KvDtype::TQ3H || dtype == KvDtype::TQ2H;
}

bool kv_dtype_is_channel_bits(KvDtype dtype) {
  return dtype == KvDtype::TQ4C || dtype == KvDtype::TQ3C || dtype == KvDtype::TQ2C;
}

bool kv_dtype_is_pairs(KvDtype dtype) { return dtype == KvDtype::TQ4P; }

bool kv_dtype_is_orthant(KvDtype dtype) { return dtype == KvDtype::TQ3O || dtype == KvDtype::TQ2O; }

bool kv_dtype_is_rotated(KvDtype dtype) { return dtype == KvDtype::Q4_0H || kv_dtype_is_tq(dtype); }

std::pair<int, int> kv_dtype_tq_bits(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::TQ4:
    case KvDtype::TQ4H:
    case KvDtype::TQ4C:
    case KvDtype::TQ4P: return {4, 4};
    case KvDtype::TQ3:
    case KvDtype::TQ3H:
    case KvDtype::TQ3C:
    case KvDtype::TQ3O: return {3, 3};
    case KvDtype::TQ2:
    case KvDtype::TQ2H:
    case KvDtype::TQ2C:
    case KvDtype::TQ2O: return {2, 2};
    case KvDtype::TQ3_5: return {4, 3};
    case KvDtype::TQ2_5: return {3, 2};
    default: return {0, 0};
  }
}

void check_kv_dtype(KvDtype dtype, int head_dim, bool hadamard_rotation) {
  const std::string_view name = kv_dtype_name(dtype);
  if (head_dim <= 0 || head_dim > 512) fail("--kv-cache-dtype {}: head_dim {} must be in 1..512", name, head_dim);
  if (kv_dtype_is_fp(dtype)) return;
  const std::string valid_hint = " (f32, bf16 and f16 take any head_dim)";
  if (dtype == KvDtype::Q8_0 || dtype == KvDtype::Q4_0 || dtype == KvDtype::Q4_0H) {
    if (head_dim % 32 != 0) fail("--kv-cache-dtype {} needs head_dim to be a multiple of 32, the model has {}{}", name, head_dim, valid_hint);
    if (dtype == KvDtype::Q4_0H && !power_of_two(head_dim))
      fail("--kv-cache-dtype q4_0h rotates rows with a Hadamard transform, which needs a power-of-two head_dim, "
           "the model has {}; use q4_0 or a tq mode with --tq-rotation dense{}", head_dim, valid_hint);
    return;
  }
  const auto [hi, lo] = kv_dtype_tq_bits(dtype);
  if (kv_dtype_is_channel_bits(dtype)) {
    if (head_dim % 8 != 0)
      fail("--kv-cache-dtype {} codes rows in groups of 8 coordinates and needs head_dim to be a multiple of 8, the model has {}{}",
           name, head_dim, valid_hint);
    return;
  }
  const int rotated_dim = kv_dtype_is_split(dtype) ? head_dim / 2 : head_dim;
  try {
    if (kv_dtype_is_pairs(dtype)) {
      check_tq_pair_row_shape(head_dim);
    } else if (kv_dtype_is_orthant(dtype)) {
      check_tq_orthant_row_shape(head_dim, hi);
    } else if (kv_dtype_is_split(dtype)) {
      check_tq_split_row_shape(head_dim, hi, lo);
    } else {
      check_tq_row_shape(head_dim, hi);
    }
  } catch (const Error& e) {
    fail("--kv-cache-dtype {} cannot store head_dim {}: {}{}", name, head_dim, e.what(), valid_hint);
  }
  if (hadamard_rotation && !power_of_two(rotated_dim))
    fail("--kv-cache-dtype {} with --tq-rotation hadamard needs a power-of-two {} ({}), the model's head_dim is {}; "
         "use --tq-rotation dense", name, kv_dtype_is_split(dtype) ? "head_dim / 2" : "head_dim", rotated_dim, head_dim);
}

size_t kv_row_bytes(KvDtype dtype, int head_dim) {
  const size_t d = static_cast<size_t>(head_dim);
  switch (dtype) {
    case KvDtype::F32: return d * 4;
    case KvDtype::BF16:
    case KvDtype::F16: return d * 2;
    case KvDtype::Q8_0: return d / BlockQ8_0::kValues * sizeof(BlockQ8_0);
    case KvDtype::Q4_0:
    case KvDtype::Q4_0H: return d / BlockQ4_0::kValues * sizeof(BlockQ4_0);
    default: break;
  }
  const auto [hi, lo] = kv_dtype_tq_bits(dtype);
  if (kv_dtype_is_split(dtype)) return tq_split_row_bytes(head_dim, hi, lo);
  if (kv_dtype_is_channel_bits(dtype)) return d * hi / 8 + 2;
  if (kv_dtype_is_pairs(dtype)) return tq_pair_row_bytes(head_dim);
  if (kv_dtype_is_orthant(dtype)) return tq_orthant_row_bytes(head_dim, hi);
  return tq_row_bytes(head_dim, hi) - (kv_dtype_has_f16_norm(dtype) ? 2 : 0);
}

double kv_bits_per_element(KvDtype dtype, int head_dim) { return 8.0 * kv_row_bytes(dtype, head_dim) / head_dim; }

void kv_encode_row(KvDtype dtype, const float* src, int head_dim, void* dst) {
  switch (dtype) {
    case KvDtype::F32:
      std::memcpy(dst, src, sizeof(float) * head_dim);
      return;
    case KvDtype::BF16: {
      auto* out = static_cast<uint16_t*>(dst);
      for (int i = 0; i < head_dim; ++i) out[i] = fp32_to_bf16(src[i]);
      return;
    }
    case KvDtype::F16:
      fp32_to_fp16_row(src, static_cast<uint16_t*>(dst), head_dim);
      return;
    default: require_fp(dtype, "kv_encode_row");
  }
}

void kv_decode_row(KvDtype dtype, const void* src, int head_dim, float* dst) {
  switch (dtype) {
    case KvDtype::F32:
      std::memcpy(dst, src, sizeof(float) * head_dim);
      return;
    case KvDtype::BF16: {
      const auto* in = static_cast<const uint16_t*>(src);
      for (int i = 0; i < head_dim; ++i) dst[i] = bf16_to_fp32(in[i]);
      return;
    }
    case KvDtype::F16: {
      const auto* in = static_cast<const uint16_t*>(src);
      for (int i = 0; i < head_dim; ++i) dst[i] = fp16_to_fp32(in[i]);
      return;
    }
    default: require_fp(dtype, "kv_decode_row");
  }
}

}  // namespace tq
