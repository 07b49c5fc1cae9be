// Dense d x d rotations (quant/rotation.h: Rotation::apply, apply_transpose) in AVX-512, with the
// scalar code's arithmetic per output (every product rounded, then added in the same order), so
// the results are the scalar ones bit for bit (tests/cpp/kernels/test_dense_rotation.cpp).
//
// TurboQuant rotates every query and output head and every new K/V row by its layer's R: at
// head_dim 64 that is 11-20 matrix-vector products per layer and token, which in the scalar form
// cost more than q4_0h's whole Hadamard transform.
#pragma once

namespace tq {

// The reference order. y = R x, r row-major: for each output i, eight partial sums over
// j = k (mod 8), then ((p0 + p4) + (p1 + p5)) + ((p2 + p6) + (p3 + p7)).
void rotate_dense_scalar(const float* r, const float* x, float* y, int dim);
// x = R^T y, r row-major: for each output j, the sum over i in increasing order of y_i * R[i][j],
// starting from zero.
void rotate_dense_transpose_scalar(const float* r, const float* y, float* x, int dim);

// True where the CPU has AVX-512F and the kernels below take dim (a multiple of 16, at most 512).
bool dense_rotation_avx512_available(int dim);

// y = R x in rotate_dense_scalar's order. r_transposed is R^T row-major (column j of R at
// r_transposed + j * dim). x and y may be the same buffer (in every function here).
void rotate_dense_avx512(const float* r_transposed, const float* x, float* y, int dim);

// x = R^T y in rotate_dense_transpose_scalar's order. r is R row-major.
void rotate_dense_transpose_avx512(const float* r, const float* y, float* x, int dim);

}  // namespace tq
