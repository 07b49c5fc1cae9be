// The stored formats of one cached K or V row (one KV head at one position, head_dim values) and
// their decoders. Attention over a quantized cache decodes each row once into fp32 in *storage
// space* (for rotated formats that is the rotated space, so no row is ever un-rotated) and
// works on that; see kernels/paged_attention.h.
//
//   F32 / BF16 / F16  head_dim values.
//   Q8_0 / Q4_0       ggml's 32-element blocks with an fp16 scale (ggml-common.h layouts), the
//                     baselines llama.cpp offers for its KV cache.
//   TQ                TurboQuant: b-bit codebook indices + fp32 scale (kernels/tq_packing.h), or
//                     an fp16 scale (f16_scale: the row is 2 bytes shorter); decodes to
//                     scale * levels[idx].
//   TQ_SPLIT          two TurboQuant half-rows with their own bits, codebooks and fp16 scales
//                     (the split layout of kernels/tq_packing.h).
//   TQ_CHANNELS       channel-bit rows (quant/channel_bits.h): runs of coordinates ("parts"),
//                     each at its own bit width 0..6 with its own levels, then one fp16 scale;
//                     decodes to scale * levels_p[idx] (0 for a 0-bit part).
//   TQ_PAIRS          tq4p rows (quant/pair_codebook.h): byte c is the index of a 2-D point
//                     (levels[2i], levels[2i + 1]) holding coordinates c and c + dim/2, then an
//                     fp16 scale; decodes to scale * point coordinates.
//   TQ_ORTHANT        tq3o / tq2o rows (quant/orthant_codebook.h): bits 3 or 2, D = 8 / (bits - 1);
//                     d/D pattern bytes (pattern g holds coordinates g D .. g D + D - 1), a d-bit sign
//                     map (bit set: negative), an fp16 scale; levels = [256][D] magnitudes;
//                     decodes to +-scale * magnitude.
#pragma once
#include <cstddef>
#include <cstdint>

namespace tq {

enum class RowCodec : uint8_t { F32, BF16, F16, Q8_0, Q4_0, TQ, TQ_SPLIT, TQ_CHANNELS, TQ_PAIRS, TQ_ORTHANT };

inline constexpr int kMaxChannelParts = 7;  // one per bit width 0..6

struct CodedRowFormat {
  RowCodec codec = RowCodec::F32;
  int dim = 0;                       // head_dim
  int bits = 0;                      // TQ: bits; TQ_SPLIT: bits of the first half
  int bits_lo = 0;                   // TQ_SPLIT: bits of the second half
  const float* levels = nullptr;     // TQ / TQ_SPLIT first half: [2^bits] codebook levels;
                                     // TQ_PAIRS: [256][2] points; TQ_ORTHANT: [256][D]
  const float* levels_lo = nullptr;  // TQ_SPLIT second half: [2^bits_lo]
  bool f16_scale = false;            // TQ: the scale after the codes is fp16, not fp32
  // TQ_CHANNELS: `parts` runs of part_dims[i] coordinates (multiples of 8, summing to dim) at
  // part_bits[i] bits, decoded with part_levels[i] ([2^bits] levels; unused for 0 bits).
  int parts = 0;
  int part_dims[kMaxChannelParts] = {};
  int part_bits[kMaxChannelParts] = {};
  const float* part_levels[kMaxChannelParts] = {};
};

// TQ_ORTHANT rows: the coordinates a pattern byte holds (4 at 3 bits, 8 at 2), and where the fp16
// scale sits (after d/D pattern bytes and the d/8 bytes of the sign map). bits must be 2 or 3.
inline int orthant_pattern_coordinates(int bits) { return 8 / (bits - 1); }
inline size_t orthant_scale_offset(int dim, int bits) {
  return size_t(dim) / orthant_pattern_coordinates(bits) + size_t(dim) / 8;
}

// Fails (naming the problem) unless the format is usable: dim in 1..512, Q8_0/Q4_0 need
// dim % 32 == 0, TQ formats the packing requirements and non-null levels.
void check_coded_row_format(const CodedRowFormat& f);
size_t coded_row_bytes(const CodedRowFormat& f);

// out[0, dim) = the row's values in storage space (scale applied). Plain reference decoder.
void decode_coded_row_scalar(const CodedRowFormat& f, const uint8_t* row, float* out);

// The AVX2 (+F16C, FMA) decoders give bit-identical results to the scalar one: each value is
// one rounded product (level * scale, q * d) or an exact conversion either way.
bool coded_row_avx2_available(const CodedRowFormat& f);
void decode_coded_row_avx2(const CodedRowFormat& f, const uint8_t* row, float* out);
// n rows, row i at first + i * row_stride, into out + i * out_stride: the same values with the
// per-format set-up done once.
void decode_coded_rows_avx2(const CodedRowFormat& f, const uint8_t* first, size_t row_stride, int n, float* out,
                            size_t out_stride);

// The AVX-512 (F, +FMA, F16C) decoders (kernels/coded_row_avx512.cpp), bit-identical to the
// scalar one like the AVX2 ones: available for dim % 16 == 0 and every codec except TQ_CHANNELS and
// TQ_PAIRS, TurboQuant parts at 4 bits (dim % 32 == 0) or 2 and 3 bits (dim % 64 == 0).
bool coded_row_avx512_available(const CodedRowFormat& f);
void decode_coded_rows_avx512(const CodedRowFormat& f, const uint8_t* first, size_t row_stride, int n, float* out,
                              size_t out_stride);

}  // namespace tq
