// Weight rows regrouped eight at a time for the decode GEMV (kernels/interleaved_matmul_avx2.cpp).
//
// In a GGUF, a Q4_1 row is a run of 20-byte blocks {f16 d; f16 m; u8 qs[16]}, and a kernel that
// reads one row at a time spends most of its instructions on per-row scalar work: converting two
// fp16 scales, broadcasting them, widening 16 bytes of nibbles, summing eight lanes at the end.
// Interleaved, the same bytes are laid out so that one 256-bit load holds four values of eight
// rows, one 128-bit load the eight rows' scales, and each of a row's eight lane accumulators is
// one lane of a vector: the work per row-slice roughly halves while the bytes read stay 20, and
// the arithmetic (and so every result) is exactly that of the row layout.
//
// Layout of `out` rows of `in` values (in a multiple of 32), padded with zero rows to a multiple
// of 8. Group g holds rows 8g .. 8g+7; its slices follow each other, slice b of group g at
// byte (g · in/32 + b) · 160:
//   [0, 16)     d of rows 0..7 (fp16)
//   [16, 32)    m of rows 0..7 (fp16)
//   [32 + 32k, 64 + 32k), k = 0..3: bytes 4r .. 4r+3 = row r's qs[4k .. 4k+3], r = 0..7
// so chunk k's low nibbles are values 4k..4k+3 of each row and its high nibbles values
// 16+4k .. 16+4k+3 (the legacy block order: value j is qs[j] & 15, value j+16 is qs[j] >> 4).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/dtype.h"

namespace tq {

constexpr int kInterleavedRows = 8;
constexpr size_t kQ4_1GroupSliceBytes = 160;  // one 32-value slice of 8 rows

// True when weights of this type are interleaved at load on this CPU: Q4_1, on a CPU with
// AVX2, FMA and F16C (the only kernel that reads the layout).
bool has_interleaved_layout(DType t);

// Bytes of `out` interleaved rows of `in` values (the rows padded to a multiple of 8).
size_t interleaved_bytes(DType t, int64_t out, int64_t in);

// rows: [out] rows of `in` values as stored → the interleaved layout. Throws tq::Error for a type
// without one or an `in` that is not a multiple of 32.
std::vector<uint8_t> interleave_rows(DType t, const uint8_t* rows, int64_t out, int64_t in);

// Row `row` of interleaved weights back in the stored row layout: dst gets dtype_row_bytes(t, in).
void deinterleave_row(DType t, const uint8_t* interleaved, int64_t in, int64_t row, uint8_t* dst);

}  // namespace tq
