#include "quant/baseline_quant.h"

#include <cmath>
#include <cstring>

#include "errors/error.h"
#include "kernels/dequantize.h"
#include "kernels/ggml_blocks.h"

namespace tq {
namespace {

constexpr int kBlock = 32;

void check_n(int n, const char* what) {
  if (n <= 0 || n % kBlock != 0) fail("{} rows need a positive multiple of 32 values, got {}", what, n);
}

void store_f16(uint8_t* p, float v) {
  const uint16_t h = fp32_to_fp16(v);
  std::memcpy(p, &h, sizeof h);
}

}  // namespace

void quantize_row_q8_0(const float* x, int n, uint8_t* out) {
  check_n(n, "q8_0");
  for (int b = 0; b < n / kBlock; ++b, x += kBlock, out += sizeof(BlockQ8_0)) {
    float amax = 0.0f;
    for (int j = 0; j < kBlock; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(out + offsetof(BlockQ8_0, d), d);
    uint8_t* qs = out + offsetof(BlockQ8_0, qs);
    for (int j = 0; j < kBlock; ++j) qs[j] = static_cast<uint8_t>(static_cast<int8_t>(std::roundf(x[j] * id)));
  }
}

void quantize_row_q4_0(const float* x, int n, uint8_t* out) {
  check_n(n, "q4_0");
  for (int b = 0; b < n / kBlock; ++b, x += kBlock, out += sizeof(BlockQ4_0)) {
    // The value of largest magnitude, with its sign, maps to -8 (ggml's choice: the full
    // 16-level range is used on the side of the extreme value).
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kBlock; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(out + offsetof(BlockQ4_0, d), d);
    uint8_t* qs = out + offsetof(BlockQ4_0, qs);
    for (int j = 0; j < kBlock / 2; ++j) {
      const int lo = static_cast<int8_t>(x[j] * id + 8.5f), hi = static_cast<int8_t>(x[j + 16] * id + 8.5f);
      qs[j] = static_cast<uint8_t>((lo < 15 ? lo : 15) | (hi < 15 ? hi : 15) << 4);
    }
  }
}

}  // namespace tq
