#include "kernels/rope.h"

#include <cmath>

namespace tq {

std::vector<float> rope_base_inv_freq(int head_dim, double theta) {
  std::vector<float> inv_freq(head_dim / 2);
  for (int i = 0; i < head_dim / 2; ++i) {
    // HF: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), evaluated in fp32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv_freq[i] = 1.0f / std::pow(static_cast<float>(theta), exponent);
  }
  return inv_freq;
}

void apply_rope(float* x, int n_heads, int head_dim, int64_t pos, const float* inv_freq, RopePairing pairing) {
  const int half = head_dim / 2;
  // cos/sin once per token, shared by every head: [half] each.
  float cos_v[512], sin_v[512];
  for (int i = 0; i < half; ++i) {
    const float angle = static_cast<float>(pos) * inv_freq[i];  // fp32 product, as HF
    cos_v[i] = std::cos(angle);
    sin_v[i] = std::sin(angle);
  }
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    if (pairing == RopePairing::Half) {
      for (int i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * cos_v[i] - b * sin_v[i];
        v[i + half] = b * cos_v[i] + a * sin_v[i];
      }
    } else {
      for (int i = 0; i < half; ++i) {
        const float a = v[2 * i], b = v[2 * i + 1];
        v[2 * i] = a * cos_v[i] - b * sin_v[i];
        v[2 * i + 1] = b * cos_v[i] + a * sin_v[i];
      }
    }
  }
}

}  // namespace tq
