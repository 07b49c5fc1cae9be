#include "kv/kv_dtype.h"

#include <cstdint>
#include <cstring>

#include "kernels/dequantize.h"

namespace tq {

std::optional<KvDtype> parse_kv_dtype(std::string_view name) {
  if (name == "f32" || name == "float32") return KvDtype::F32;
  if (name == "bf16" || name == "bfloat16") return KvDtype::BF16;
  if (name == "f16" || name == "float16" || name == "fp16") return KvDtype::F16;
  return std::nullopt;
}

std::string_view kv_dtype_name(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::F32: return "f32";
    case KvDtype::BF16: return "bf16";
    case KvDtype::F16: return "f16";
  }
  return "?";
}

std::string kv_dtype_choices() { return "f32, bf16, f16"; }

size_t kv_row_bytes(KvDtype dtype, int head_dim) {
  return static_cast<size_t>(head_dim) * (dtype == KvDtype::F32 ? 4 : 2);
}

FpElem kv_fp_elem(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::F32: return FpElem::F32;
    case KvDtype::BF16: return FpElem::BF16;
    case KvDtype::F16: return FpElem::F16;
  }
  return FpElem::F32;
}

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
    case KvDtype::F16: {
      auto* out = static_cast<uint16_t*>(dst);
      for (int i = 0; i < head_dim; ++i) out[i] = fp32_to_fp16(src[i]);
      return;
    }
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
  }
}

}  // namespace tq
