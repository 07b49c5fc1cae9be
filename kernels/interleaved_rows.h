// Weight rows regrouped R at a time for the GEMV (kernels/stored_matmul_avx2.cpp reads Q4_1 with
// R = 8, kernels/stored_matmul_avx512.cpp Q4_1 and Q8_0 with R = 16).
//
// In a GGUF, a Q4_1 row is a run of 20-byte blocks {f16 d; f16 m; u8 qs[16]}, and a kernel that
// reads one row at a time spends most of its instructions on per-row scalar work: converting
// fp16 scales, broadcasting them, widening the quantized bytes, summing eight lanes at the end.
// Interleaved, the same bytes are laid out so that one vector load holds four values of R rows,
// one load the R rows' scales, and each of a row's eight lane accumulators is one lane of a
// vector: the work per row-slice drops by 2-4x while the bytes read stay the same, and the
// arithmetic (and so every result) is exactly that of the row layout.
//
// Layout of `out` rows of `in` values (in a multiple of 32), padded with zero rows to a multiple
// of R. Group g holds rows R·g .. R·g + R-1; its slices follow each other, slice b of group g at
// byte (g · in/32 + b) · R · block_bytes:
//   Q4_1 (20 R bytes)                          Q8_0 (34 R bytes)
//   [0, 2R)    d of rows 0..R-1 (fp16)         [0, 2R)   d of rows 0..R-1 (fp16)
//   [2R, 4R)   m of rows 0..R-1 (fp16)         [2R + 4Rk, 2R + 4R(k+1)), k = 0..7:
//   [4R + 4Rk, 4R + 4R(k+1)), k = 0..3:          bytes 4r..4r+3 = row r's qs[4k..4k+3] XOR 0x80
//     bytes 4r..4r+3 = row r's qs[4k..4k+3]      (q + 128: unsigned, as VNNI's dpbusd wants it)
// For Q4_1, chunk k's low nibbles are values 4k..4k+3 of each row and its high nibbles values
// 16+4k .. 16+4k+3 (the legacy block order: value j is qs[j] & 15, value j+16 is qs[j] >> 4).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/ggml_blocks.h"

namespace tq {

// Bytes of one 32-value slice of a group of `group_rows` rows (Q4_1 or Q8_0).
constexpr size_t interleaved_slice_bytes(DType t, int group_rows) {
  return (t == DType::Q4_1 ? sizeof(BlockQ4_1) : sizeof(BlockQ8_0)) * group_rows;
}

// The group size this CPU's fastest kernel for the type reads: 16 (Q4_1 and Q8_0 on AVX-512 with
// VNNI), 8 (Q4_1 on AVX2, FMA and F16C), or 0 when the type has no interleaved kernel here.
int interleaved_group_rows(DType t);
// True when this CPU has a kernel for rows of type t interleaved group_rows at a time.
bool interleaved_kernel_available(DType t, int group_rows);

// Bytes of `out` interleaved rows of `in` values (the rows padded to a multiple of group_rows).
size_t interleaved_bytes(DType t, int64_t out, int64_t in, int group_rows);

// rows: [out] rows of `in` values as stored → the interleaved layout. Throws tq::Error for a type
// without one (not Q4_1 or Q8_0), a group size other than 8 or 16, or an `in` that is not a
// multiple of 32.
std::vector<uint8_t> interleave_rows(DType t, const uint8_t* rows, int64_t out, int64_t in, int group_rows);

// Row `row` of interleaved weights back in the stored row layout: dst gets dtype_row_bytes(t, in).
void deinterleave_row(DType t, const uint8_t* interleaved, int64_t in, int group_rows, int64_t row, uint8_t* dst);

}  // namespace tq
