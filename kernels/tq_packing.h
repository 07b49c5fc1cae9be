// TurboQuant index packing (DESIGN.md section 5): the layout of the packed codes of one row, and
// the byte arithmetic of a row. Defined here and only here; quant/tq_row.h (encode / decode) and
// kernels/coded_row.h (decoding rows for attention) both build on it.
//
// Row layout, tq_row_bytes(d, b) = d*b/8 + 4 bytes:
//   [0, d*b/8)         packed indices (layout below)
//   [d*b/8, d*b/8 + 4) scale, fp32 in host byte order (little-endian on every supported target)
//
// Index packing. For b in {1, 2, 4} one rule covers all three: with S = d*b/8 bytes and
// m = 8/b indices per byte, byte c (0 <= c < S) holds idx[c + k*S] in bits [k*b, (k+1)*b) for
// k = 0..m-1. A byte thus holds m indices that are S apart, so that a SIMD kernel unpacking a run
// of bytes with one shift+mask gets a run of consecutive coordinates:
//   b = 4: byte c (c < d/2) = idx[c] | idx[c + d/2] << 4               (reference layout, exactly)
//   b = 2: byte c (c < d/4) = idx[c] | idx[c+d/4] << 2 | idx[c+d/2] << 4 | idx[c+3d/4] << 6
//   b = 1: byte c (c < d/8) = sum_k idx[c + k*d/8] << k, k = 0..7
// b = 3 is the 2-bit layout of the low two bits followed by the 1-bit layout of the high bit:
//   bytes [0, d/4)        = the b = 2 packing of (idx & 3)
//   bytes [d/4, d/4+d/8)  = the b = 1 packing of (idx >> 2)
// which is dense (3d/8 bytes) and lets a kernel reuse the 2-bit and 1-bit unpack paths.
// Requirements on d: even for b = 4, a multiple of 4 for b = 2, of 8 for b = 1 and 3.
//
// Split rows (the fractional-bit modes tq3.5 and tq2.5): the d values, already permuted so that
// the outlier group comes first, are two half-rows of d/2 coded independently, the first with
// bits_hi, the second with bits_lo, each with its own codebook and scale (kv/ rotates both
// halves with the layer's one d/2 rotation):
//   [0, S_hi)                 packed indices of the first half  (S_hi = (d/2)*bits_hi/8)
//   [S_hi, S_hi + S_lo)       packed indices of the second half (S_lo = (d/2)*bits_lo/8)
//   [S_hi + S_lo, +2)         scale of the first half, fp16
//   [S_hi + S_lo + 2, +2)     scale of the second half, fp16
// Two fp16 scales take the 4 bytes of one fp32 scale, so a split row costs no more than a
// plain one of the same average bits (fp16's 11-bit precision is far below the codes' error).
// Channel-bit parts (the tq<b>c rows, quant/channel_bits.h): a row is runs ("parts") of
// coordinates, each at its own bit width 0..6; every part's length is a multiple of 8, so each
// part is whole bytes and starts on a byte. Bits 1..4 use the layouts above with d = the part's
// length. 5 and 6 bits, like 3, are two of them back to back: the 4-bit packing of (idx & 15)
// then the 1-bit (5) or 2-bit (6) packing of (idx >> 4). 0 bits store nothing.
#pragma once
#include <cstddef>
#include <cstdint>

namespace tq {

// Fails unless bits is 1..4 and dim satisfies the packing requirement above.
void check_tq_row_shape(int dim, int bits);
// Bytes of packed indices, d*b/8.
size_t tq_codes_bytes(int dim, int bits);
// Bytes of a whole row, d*b/8 + 4.
size_t tq_row_bytes(int dim, int bits);

// Split rows: fails unless d/2 satisfies the packing requirement of both bit widths.
void check_tq_split_row_shape(int dim, int bits_hi, int bits_lo);
size_t tq_split_codes_bytes(int dim, int bits_hi, int bits_lo);  // S_hi + S_lo
size_t tq_split_row_bytes(int dim, int bits_hi, int bits_lo);    // S_hi + S_lo + 4

// Channel-bit parts: fails unless bits is 0..6 and dim a positive multiple of 8.
void check_channel_part_shape(int dim, int bits);
size_t channel_part_bytes(int dim, int bits);  // dim*bits/8
void pack_channel_part(const uint8_t* idx, int dim, int bits, uint8_t* out);
void unpack_channel_part(const uint8_t* packed, int dim, int bits, uint8_t* idx);

// The packing. idx values must be < 2^bits (higher bits are ignored). out / idx are
// tq_codes_bytes(dim, bits) / dim bytes.
void pack_indices(const uint8_t* idx, int dim, int bits, uint8_t* out);
void unpack_indices(const uint8_t* packed, int dim, int bits, uint8_t* idx);

}  // namespace tq
