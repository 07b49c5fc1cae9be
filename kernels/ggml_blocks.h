// ggml's block formats (the layouts of ggml-common.h) as the bytes of a GGUF tensor or a q8_0 /
// q4_0 KV row hold them. Every fp16 field is a uint16_t of IEEE half bits. Kernels read blocks
// through byte pointers (memcpy or vector loads) at sizeof(Block) strides and offsetof(Block,
// field): a tensor's bytes are not Block objects and need not be aligned for them.
//
// Legacy blocks (Q4_0 .. Q8_0) hold 32 values: byte j of a 4-bit qs holds value j in its low
// nibble and value j + 16 in its high. K-quant super-blocks hold 256 values in 8 or 16
// sub-blocks.
//
// This header defines types and one internal-linkage function only: the AVX2 and AVX-512 kernel
// files include it, and a shared inline function compiled there could be the copy the linker
// keeps for every other file.
#pragma once
#include <cstddef>
#include <cstdint>

namespace tq {

struct BlockQ4_0 {
  static constexpr int kValues = 32;
  uint16_t d;  // fp16 scale
  uint8_t qs[16];
};

struct BlockQ4_1 {
  static constexpr int kValues = 32;
  uint16_t d;  // fp16 scale
  uint16_t m;  // fp16 offset
  uint8_t qs[16];
};

struct BlockQ5_0 {
  static constexpr int kValues = 32;
  uint16_t d;
  uint8_t qh[4];  // bit j of the little-endian 32-bit qh: the fifth bit of value j
  uint8_t qs[16];
};

struct BlockQ5_1 {
  static constexpr int kValues = 32;
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[16];
};

struct BlockQ8_0 {
  static constexpr int kValues = 32;
  uint16_t d;
  int8_t qs[32];
};

struct BlockQ2_K {
  static constexpr int kValues = 256;
  uint8_t scales[16];  // per 16-value sub-block: low nibble scale, high nibble min
  uint8_t qs[64];
  uint16_t d;
  uint16_t dmin;
};

struct BlockQ3_K {
  static constexpr int kValues = 256;
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];  // sixteen 6-bit scales
  uint16_t d;
};

// Q4_K and Q5_K share their first 16 bytes: d, dmin, and eight 6-bit scales and eight 6-bit
// mins packed in 12 bytes (k4_scale_min).
struct BlockQ4_K {
  static constexpr int kValues = 256;
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};

struct BlockQ5_K {
  static constexpr int kValues = 256;
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];  // bit j of qh[l]: the fifth bit of value l of 32-value sub-block j
  uint8_t qs[128];
};

struct BlockQ6_K {
  static constexpr int kValues = 256;
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];  // one per 16 values
  uint16_t d;
};

static_assert(sizeof(BlockQ4_0) == 18 && offsetof(BlockQ4_0, qs) == 2);
static_assert(sizeof(BlockQ4_1) == 20 && offsetof(BlockQ4_1, m) == 2 && offsetof(BlockQ4_1, qs) == 4);
static_assert(sizeof(BlockQ5_0) == 22 && offsetof(BlockQ5_0, qh) == 2 && offsetof(BlockQ5_0, qs) == 6);
static_assert(sizeof(BlockQ5_1) == 24 && offsetof(BlockQ5_1, qh) == 4 && offsetof(BlockQ5_1, qs) == 8);
static_assert(sizeof(BlockQ8_0) == 34 && offsetof(BlockQ8_0, qs) == 2);
static_assert(sizeof(BlockQ2_K) == 84 && offsetof(BlockQ2_K, qs) == 16 && offsetof(BlockQ2_K, d) == 80 &&
              offsetof(BlockQ2_K, dmin) == 82);
static_assert(sizeof(BlockQ3_K) == 110 && offsetof(BlockQ3_K, qs) == 32 && offsetof(BlockQ3_K, scales) == 96 &&
              offsetof(BlockQ3_K, d) == 108);
static_assert(sizeof(BlockQ4_K) == 144 && offsetof(BlockQ4_K, dmin) == 2 && offsetof(BlockQ4_K, scales) == 4 &&
              offsetof(BlockQ4_K, qs) == 16);
static_assert(sizeof(BlockQ5_K) == 176 && offsetof(BlockQ5_K, scales) == offsetof(BlockQ4_K, scales) &&
              offsetof(BlockQ5_K, qh) == 16 && offsetof(BlockQ5_K, qs) == 48);
static_assert(sizeof(BlockQ6_K) == 210 && offsetof(BlockQ6_K, qh) == 128 && offsetof(BlockQ6_K, scales) == 192 &&
              offsetof(BlockQ6_K, d) == 208);

// Sub-block j (0..7) of a Q4_K / Q5_K block's 12 packed scale bytes (ggml's get_scale_min_k4):
// sub-blocks 0..3 use the low 6 bits of bytes 0..3 (scale) and 4..7 (min); sub-blocks 4..7 take
// their low nibbles from bytes 8..11 and their top two bits from the spare top bits of bytes 0..7.
// (Out-parameters rather than a returned pair: GCC then compiles the AVX2 tiles that call it to
// the same code as when each file had its own copy.)
static inline void k4_scale_min(const uint8_t* scales, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = scales[j] & 63;
    *min = scales[j + 4] & 63;
  } else {
    *scale = (scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4);
    *min = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

}  // namespace tq
