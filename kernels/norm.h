// RMSNorm as Hugging Face computes it, in fp32: y = x * rsqrt(mean(x²) + eps) * w.
#pragma once
#include <cstdint>

namespace tq {

// x, y: [n, d] (may alias); w: [d]. The sum of squares is taken in double, element i into partial
// sum i % 16, the 16 partials added in a fixed tree: 16 lanes at a time where the CPU has AVX-512,
// else one element at a time in the same order, so every machine gets the same bits.
void rms_norm(const float* x, const float* w, int64_t n, int64_t d, float eps, float* y);

// The sum of squares rms_norm takes of a row x: [d], and its one-element-at-a-time form (equal bit
// for bit).
double rms_sum_of_squares(const float* x, int64_t d);
double rms_sum_of_squares_reference(const float* x, int64_t d);

// The one-element-at-a-time form of rms_norm (what it equals bit for bit).
void rms_norm_reference(const float* x, const float* w, int64_t n, int64_t d, float eps, float* y);

}  // namespace tq
