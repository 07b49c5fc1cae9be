// SwiGLU gating: out = silu(gate) * up, elementwise.
#pragma once
#include <cstdint>

namespace tq {

// gate, up, out: [n] (out may alias gate). out = gate / (1 + expf(-gate)) * up, with the C
// library's expf. Where the CPU has AVX-512, 16 at a time through a vector form of that expf's
// algorithm (glibc's: a 32-entry table of 2^(i/32) and a cubic in double) that gives its bits;
// tests/cpp/kernels/test_activation_norm.cpp holds the two equal.
void silu_mul(const float* gate, const float* up, int64_t n, float* out);

// One element at a time with std::exp (what silu_mul equals bit for bit).
void silu_mul_reference(const float* gate, const float* up, int64_t n, float* out);

// expf(x) for 16 floats by the vector form silu_mul uses (|x| < 88; NaN or larger: std::exp);
// for the test that compares it with the C library's. Needs AVX-512 (silu_mul_simd_available).
void expf_simd(const float* x, int64_t n, float* out);
bool silu_mul_simd_available();

}  // namespace tq
