#include "kernels/weight_slices.h"

#include <cstring>

#include "errors/error.h"
#include "kernels/dequantize.h"

namespace tq {
namespace {

float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
}

void fill_scale(WeightSlice* s, float scale) {
  for (float& v : s->scale) v = scale;
}

// Byte j of a legacy block's qs holds value j (low nibble) and value j + 16 (high nibble).
void legacy_nibbles(const uint8_t* qs, int offset, int8_t* q) {
  for (int j = 0; j < 16; ++j) {
    q[j] = static_cast<int8_t>((qs[j] & 0x0F) - offset);
    q[j + 16] = static_cast<int8_t>((qs[j] >> 4) - offset);
  }
}

// ggml's get_scale_min_k4 (the same unpacking as kernels/dequantize.cpp).
void k4_scale_min(const uint8_t* packed, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = packed[j] & 63;
    *min = packed[j + 4] & 63;
  } else {
    *scale = (packed[j + 4] & 0x0F) | ((packed[j - 4] >> 6) << 4);
    *min = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
  }
}

// Q4_K {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]} and Q5_K {…; u8 qh[32]; u8 qs[128]}:
// slice j's values are the low (j even) or high (j odd) nibbles of qs[32·(j/2) ..], plus for
// Q5_K bit j of qh[l] as the fifth bit.
void k_quant_4_5(const uint8_t* block, int j, bool five_bits, WeightSlice* s) {
  int sc, m;
  k4_scale_min(block + 4, j, &sc, &m);
  fill_scale(s, load_f16(block) * static_cast<float>(sc));
  s->offset = -(load_f16(block + 2) * static_cast<float>(m));
  const uint8_t* qh = block + 16;
  const uint8_t* qs = block + (five_bits ? 48 : 16) + 32 * (j / 2);
  const int shift = 4 * (j & 1);
  for (int l = 0; l < 32; ++l) {
    int q = (qs[l] >> shift) & 0x0F;
    if (five_bits) q |= ((qh[l] >> j) & 1) << 4;
    s->q[l] = static_cast<int8_t>(q);
  }
}

// Q6_K {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}: slice j is run j % 4 of half j / 4; its
// first 16 values use scales[8·half + 2·run], the next 16 the one after.
void k_quant_6(const uint8_t* block, int j, WeightSlice* s) {
  const int half = j / 4, run = j % 4;
  const uint8_t* ql = block + 64 * half + 32 * (run & 1);
  const uint8_t* qh = block + 128 + 32 * half;
  const auto* scales = reinterpret_cast<const int8_t*>(block + 192) + 8 * half + 2 * run;
  const float d = load_f16(block + 208);
  const int low_shift = run >= 2 ? 4 : 0;
  for (int l = 0; l < 32; ++l) {
    const int q = ((ql[l] >> low_shift) & 0x0F) | (((qh[l] >> (2 * run)) & 3) << 4);
    s->q[l] = static_cast<int8_t>(q - 32);
  }
  for (int k = 0; k < 8; ++k) s->scale[k] = d * static_cast<float>(scales[k / 4]);
  s->offset = 0;
}

}  // namespace

bool has_weight_slices(DType t) {
  switch (t) {
    case DType::Q8_0: case DType::Q4_0: case DType::Q4_1: case DType::Q4_K: case DType::Q5_K: case DType::Q6_K:
      return true;
    default:
      return false;
  }
}

void unpack_weight_slice(DType t, const uint8_t* row, int64_t slice, WeightSlice* s) {
  switch (t) {
    case DType::Q8_0: {  // {f16 d; i8 qs[32]}
      const uint8_t* blk = row + slice * 34;
      fill_scale(s, load_f16(blk));
      std::memcpy(s->q, blk + 2, 32);
      s->offset = 0;
      return;
    }
    case DType::Q4_0: {  // {f16 d; u8 qs[16]}
      const uint8_t* blk = row + slice * 18;
      fill_scale(s, load_f16(blk));
      legacy_nibbles(blk + 2, 8, s->q);
      s->offset = 0;
      return;
    }
    case DType::Q4_1: {  // {f16 d; f16 m; u8 qs[16]}
      const uint8_t* blk = row + slice * 20;
      fill_scale(s, load_f16(blk));
      legacy_nibbles(blk + 4, 0, s->q);
      s->offset = load_f16(blk + 2);
      return;
    }
    case DType::Q4_K: return k_quant_4_5(row + (slice / 8) * 144, static_cast<int>(slice % 8), false, s);
    case DType::Q5_K: return k_quant_4_5(row + (slice / 8) * 176, static_cast<int>(slice % 8), true, s);
    case DType::Q6_K: return k_quant_6(row + (slice / 8) * 210, static_cast<int>(slice % 8), s);
    default: fail("no weight-slice reader for type {}", dtype_traits(t).name);
  }
}

}  // namespace tq
