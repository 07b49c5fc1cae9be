// Attention scores of a query head against 2-, 3- and 4-bit TurboQuant key rows in integer arithmetic
// (PagedAttentionArgs::int8_key_scores): the query head quantized once to int8 with one scale,
// the codebook's 2^b levels to int8 with one scale, and each row's score an exact integer dot
// product of the two, then scaled back in fp32:
//
//   score_i = float(sum_j c8[idx_ij] * q8_j) * (q_scale * level_scale * attention_scale) * row_scale_i
//
// which is the attention score of the float query q8 * q_scale against the row
// row_scale_i * level_scale * c8[idx] (tests check it against that, in double precision). It is
// what llama.cpp does for a quantized cache (the query in q8_0 blocks): the integer form lets
// AVX-512 VNNI score 64 coordinates per instruction from bytes a table lookup made of the codes,
// where the fp32 form decodes each coordinate to a float first. The error it adds (one int8 step
// of the query, ~0.4 % of its largest value; the levels are on the int8 grid when kv/ codes rows
// for this path) is small against the codes' own; docs/FIDELITY.md measures what it does to the model's next-token distribution.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/coded_row.h"

namespace tq {

constexpr int kInt8ScoreTile = 16;  // rows scored together by the AVX-512 scorer

// The int8 form of one codebook: level k = c8[k] * scale; for tq4p rows (RowCodec::TQ_PAIRS)
// point k = (px[k], py[k]) * scale instead, and pairs_mirrored says the points have the
// mirror-symmetric layout the AVX-512 kernels read them by (kernels/tq_pair_codes.h).
struct Int8Levels {
  int8_t c8[16] = {};
  float scale = 0;
  int8_t px[256] = {}, py[256] = {};
  bool pairs_mirrored = false;
};
// levels: [count] (16, or 8 and 4 for the value sums of 3- and 2-bit rows); c8 past count are 0.
Int8Levels int8_levels(const float* levels, int count = 16);
// points: [256][2], one scale for both coordinates.
Int8Levels int8_pair_levels(const float* points);
// The int8 form of a format's codebook: int8_pair_levels for TQ_PAIRS, else int8_levels of its 2^bits levels.
Int8Levels int8_levels_of(const CodedRowFormat& f);

// One query head in int8: q_j = q8[j] * scale; *sum = sum_j q8[j] (the scorer's offset). Fails
// (returns false) when q holds a non-finite value or its largest magnitude is so small (below
// 127 / FLT_MAX) that 127 / max overflows: such a query is scored in fp32.
bool quantize_query_int8(const float* q, int d, int8_t* q8, float* scale, int32_t* sum);
// The same, bit for bit, with AVX-512 (tq_key_scores_avx512_available; d % 16 == 0).
bool quantize_query_int8_avx512(const float* q, int d, int8_t* q8, float* scale, int32_t* sum);

// The fp32 factor every row's integer dot product is multiplied by, before its row scale.
inline float int8_score_factor(float q_scale, const Int8Levels& levels, float attention_scale) {
  return q_scale * levels.scale * attention_scale;
}

// Whether rows of this format can be scored here: TurboQuant at 2 to 4 bits or tq4p pairs, head_dim
// 64, 128, 256 or 512.
bool tq_key_scores_format(const CodedRowFormat& f);
// Whether this CPU runs the AVX-512 scorer (AVX-512F, BW, VNNI, F16C), and for tq4p rows also
// AVX-512 VBMI (their lookups: a 64-entry byte permute and a sign bit).
bool tq_key_scores_avx512_available();
bool tq_key_scores_avx512_available(const CodedRowFormat& f);

// The reference: the score of one stored row (codes then scale, kernels/tq_packing.h).
float tq_key_score_scalar(const CodedRowFormat& f, const uint8_t* row, const int8_t* q8, float factor,
                           const Int8Levels& levels);

// The AVX-512 scorer: scores[i] = tq_key_score_scalar of rows[i] for i < n, bit for bit, and
// -inf for i in [n, 16) (whose rows[i] may be null). `heads` query heads at once: q8 + h * d,
// q_sum[h] (from quantize_query_int8), factor[h], scores + h * 16. The caller checks the format
// (tq_key_scores_format) and the CPU (tq_key_scores_avx512_available) once, not per tile.
void tq_key_scores_avx512(const CodedRowFormat& f, const uint8_t* const rows[kInt8ScoreTile], int n,
                           const int8_t* q8, const int32_t* q_sum, const float* factor, int heads,
                           const Int8Levels& levels, float* scores);

}  // namespace tq
