// Weight rows regrouped R at a time for the GEMV (kernels/stored_matmul_avx2.cpp reads Q4_1 with
// R = 8, kernels/stored_matmul_avx512.cpp Q4_1, Q8_0, Q4_K and Q6_K with R = 16, and
// kernels/stored_matmul_amx.cpp Q4_K and Q6_K with R = 16 for 16 tokens or more).
//
// In a GGUF, a Q4_1 row is a run of 20-byte blocks {f16 d; f16 m; u8 qs[16]}, and a kernel that
// reads one row at a time spends most of its instructions on per-row scalar work: converting
// fp16 scales, broadcasting them, widening the quantized bytes, summing eight lanes at the end.
// Interleaved, the same bytes are laid out so that one vector load holds four values of R rows,
// one load the R rows' scales, and each of a row's eight lane accumulators is one lane of a
// vector: the work per row-slice drops by 2-4x while the bytes read stay the same, and the
// arithmetic (and so every result) is exactly that of the row layout.
//
// Layout of `out` rows of `in` values (in a multiple of 32; of 256 for Q4_K), padded with zero
// rows to a multiple of R. Group g holds rows R·g .. R·g + R-1; its slices follow each other, slice
// b of group g at byte (g · in/32 + b) · interleaved_slice_bytes:
//   Q4_1 (20 R bytes)                          Q8_0 (34 R bytes)
//   [0, 2R)    d of rows 0..R-1 (fp16)         [0, 2R)   d of rows 0..R-1 (fp16)
//   [2R, 4R)   m of rows 0..R-1 (fp16)         [2R + 4Rk, 2R + 4R(k+1)), k = 0..7:
//   [4R + 4Rk, 4R + 4R(k+1)), k = 0..3:          bytes 4r..4r+3 = row r's qs[4k..4k+3] XOR 0x80
//     bytes 4r..4r+3 = row r's qs[4k..4k+3]      (q + 128: unsigned, as VNNI's dpbusd wants it)
// For Q4_1, chunk k's low nibbles are values 4k..4k+3 of each row and its high nibbles values
// 16+4k .. 16+4k+3 (the legacy block order: value j is qs[j] & 15, value j+16 is qs[j] >> 4).
//
// Q4_K (148 R bytes per 256 values, against 144 R stored): a Q4_K block holds 8 slices of 32
// values with one fp16 d and dmin and a 6-bit scale and min per slice packed in 12 bytes; a slice's
// value i is a nibble of byte i of a 32-byte run. Per block of 256 values of the group:
//   [0, 2R)    d of rows 0..R-1 (fp16)         [2R, 4R)  dmin of rows 0..R-1 (fp16)
//   then slices j = 0..7, 18R bytes each: [0, R) the rows' 6-bit scales, [R, 2R) their mins (one
//   byte each), then the values in Q4_1's chunk order (low nibbles values i, high nibbles i + 16).
// The kernels read the integer scales and mins as the row layout's reader does, so results stay exact.
//
// Q6_K (210 R bytes per 256 values, as stored): per block of 256 values of the group, [0, 2R) d of
// the rows (fp16), then slices j = 0..7, 26R bytes each: [0, R) the rows' int8 scales of values
// 0..15, [R, 2R) of values 16..31; [2R, 18R) the low four bits of the values (stored q + 32,
// unsigned 0..63) in Q4_1's chunk order; [18R, 26R) their top two bits in 2 chunks of 4R bytes,
// chunk h: byte 4r + i of row r holds, from bit 0, those of values 8h+i, 16+8h+i, 8h+4+i, 16+8h+4+i
// (so the nibble chunk 2h takes bits 0-3 and chunk 2h+1 bits 4-7).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/ggml_blocks.h"
#include "memory/huge_pages.h"

namespace tq {

// Bytes per 256 values of one Q4_K row interleaved: d and dmin, then per slice its scale, its min
// and 16 bytes of values.
constexpr size_t kInterleavedQ4KBytes = 4 + 8 * (2 + 16);
static_assert(kInterleavedQ4KBytes == sizeof(BlockQ4_K) + 4);

// Bytes per 256 values of one Q6_K row interleaved: d, then per slice two scales and 32 6-bit values.
constexpr size_t kInterleavedQ6KBytes = 2 + 8 * (2 + 24);
static_assert(kInterleavedQ6KBytes == sizeof(BlockQ6_K));

// Bytes of one 32-value slice of a group of `group_rows` rows (Q4_1, Q8_0, or for Q4_K and Q6_K an
// eighth of a block of 256 values, whose slices are not all the same size).
constexpr size_t interleaved_slice_bytes(DType t, int group_rows) {
  if (t == DType::Q4_K) return kInterleavedQ4KBytes * group_rows / 8;
  if (t == DType::Q6_K) return kInterleavedQ6KBytes * group_rows / 8;
  return (t == DType::Q4_1 ? sizeof(BlockQ4_1) : sizeof(BlockQ8_0)) * group_rows;
}

// The group size this CPU's fastest kernel for the type reads: 16 (Q4_1, Q8_0, Q4_K and Q6_K on
// AVX-512 with VNNI), 8 (Q4_1 on AVX2, FMA and F16C), or 0 when the type has no interleaved kernel here.
int interleaved_group_rows(DType t);
// True when this CPU has a kernel for rows of type t interleaved group_rows at a time.
bool interleaved_kernel_available(DType t, int group_rows);

// Bytes of `out` interleaved rows of `in` values (the rows padded to a multiple of group_rows).
size_t interleaved_bytes(DType t, int64_t out, int64_t in, int group_rows);

// rows: [out] rows of `in` values as stored → the interleaved layout. Throws tq::Error for a type
// without one (not Q4_1, Q8_0, Q4_K or Q6_K), a group size other than 8 or 16 (16 for the K types),
// or an `in` that is not a multiple of 32 (256 for the K types).
LargeBytes interleave_rows(DType t, const uint8_t* rows, int64_t out, int64_t in, int group_rows);

// Row `row` of interleaved weights back in the stored row layout: dst gets dtype_row_bytes(t, in).
void deinterleave_row(DType t, const uint8_t* interleaved, int64_t in, int group_rows, int64_t row, uint8_t* dst);

}  // namespace tq
