#include "kernels/weight_slices.h"

#include <cstring>

#include "errors/error.h"
#include "kernels/dequantize.h"
#include "kernels/ggml_blocks.h"

namespace tq {
namespace {

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

// Q4_K and Q5_K (the same d, dmin and scales fields): slice j's values are the low (j even) or
// high (j odd) nibbles of qs[32·(j/2) ..], plus for Q5_K bit j of qh[l] as the fifth bit.
void k_quant_4_5(const uint8_t* block, int j, bool five_bits, WeightSlice* s) {
  int sc, m;
  k4_scale_min(block + offsetof(BlockQ4_K, scales), j, &sc, &m);
  fill_scale(s, fp16_at(block + offsetof(BlockQ4_K, d)) * static_cast<float>(sc));
  s->offset = -(fp16_at(block + offsetof(BlockQ4_K, dmin)) * static_cast<float>(m));
  const uint8_t* qh = block + offsetof(BlockQ5_K, qh);
  const uint8_t* qs = block + (five_bits ? offsetof(BlockQ5_K, qs) : offsetof(BlockQ4_K, qs)) + 32 * (j / 2);
  const int shift = 4 * (j & 1);
  for (int l = 0; l < 32; ++l) {
    int q = (qs[l] >> shift) & 0x0F;
    if (five_bits) q |= ((qh[l] >> j) & 1) << 4;
    s->q[l] = static_cast<int8_t>(q);
  }
}

// Q6_K: slice j is run j % 4 of half j / 4; its first 16 values use scales[8·half + 2·run], the
// next 16 the one after.
void k_quant_6(const uint8_t* block, int j, WeightSlice* s) {
  const int half = j / 4, run = j % 4;
  const uint8_t* ql = block + offsetof(BlockQ6_K, ql) + 64 * half + 32 * (run & 1);
  const uint8_t* qh = block + offsetof(BlockQ6_K, qh) + 32 * half;
  const auto* scales = reinterpret_cast<const int8_t*>(block + offsetof(BlockQ6_K, scales)) + 8 * half + 2 * run;
  const float d = fp16_at(block + offsetof(BlockQ6_K, d));
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
    case DType::Q8_0: {
      const uint8_t* blk = row + slice * sizeof(BlockQ8_0);
      fill_scale(s, fp16_at(blk + offsetof(BlockQ8_0, d)));
      std::memcpy(s->q, blk + offsetof(BlockQ8_0, qs), 32);
      s->offset = 0;
      return;
    }
    case DType::Q4_0: {
      const uint8_t* blk = row + slice * sizeof(BlockQ4_0);
      fill_scale(s, fp16_at(blk + offsetof(BlockQ4_0, d)));
      legacy_nibbles(blk + offsetof(BlockQ4_0, qs), 8, s->q);
      s->offset = 0;
      return;
    }
    case DType::Q4_1: {
      const uint8_t* blk = row + slice * sizeof(BlockQ4_1);
      fill_scale(s, fp16_at(blk + offsetof(BlockQ4_1, d)));
      legacy_nibbles(blk + offsetof(BlockQ4_1, qs), 0, s->q);
      s->offset = fp16_at(blk + offsetof(BlockQ4_1, m));
      return;
    }
    // Eight 32-value slices per 256-value super-block.
    case DType::Q4_K: return k_quant_4_5(row + (slice / 8) * sizeof(BlockQ4_K), static_cast<int>(slice % 8), false, s);
    case DType::Q5_K: return k_quant_4_5(row + (slice / 8) * sizeof(BlockQ5_K), static_cast<int>(slice % 8), true, s);
    case DType::Q6_K: return k_quant_6(row + (slice / 8) * sizeof(BlockQ6_K), static_cast<int>(slice % 8), s);
    default: fail("no weight-slice reader for type {}", dtype_traits(t).name);
  }
}

bool is_k_quant(DType t) { return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K; }

void unpack_k_quant_superblock(DType t, const uint8_t* row, int64_t index, KQuantSuperblock* out) {
  if (!is_k_quant(t)) fail("no K-quant super-block reader for type {}", dtype_traits(t).name);
  WeightSlice s;
  for (int j = 0; j < 8; ++j) {
    unpack_weight_slice(t, row, index * 8 + j, &s);
    std::memcpy(out->q + 32 * j, s.q, 32);
  }
  if (t == DType::Q6_K) {
    const uint8_t* block = row + index * sizeof(BlockQ6_K);
    // Slice j (run j % 4 of half j / 4) uses scales[8·half + 2·run] = scales[2j] and the one after
    // (k_quant_6): scale r is the stored scale r.
    const auto* scales = reinterpret_cast<const int8_t*>(block + offsetof(BlockQ6_K, scales));
    for (int r = 0; r < 16; ++r) out->scale[r] = scales[r];
    for (int16_t& m : out->min) m = 0;
    out->d = fp16_at(block + offsetof(BlockQ6_K, d));
    out->dmin = 0;
    return;
  }
  const uint8_t* block = row + index * (t == DType::Q4_K ? sizeof(BlockQ4_K) : sizeof(BlockQ5_K));
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    k4_scale_min(block + offsetof(BlockQ4_K, scales), j, &sc, &m);
    out->scale[2 * j] = out->scale[2 * j + 1] = static_cast<int16_t>(sc);
    out->min[j] = static_cast<int16_t>(m);
  }
  out->d = fp16_at(block + offsetof(BlockQ4_K, d));
  out->dmin = fp16_at(block + offsetof(BlockQ4_K, dmin));
}

}  // namespace tq
