// TurboQuant index packing (layout documented in tq_packing.h).
#include "kernels/tq_packing.h"

#include <cstring>

#include "errors/error.h"

namespace tq {
namespace {

// The strided rule of tq_packing.h for b in {1, 2, 4}, on the field (idx >> shift) & (2^b - 1):
// byte c holds the fields of idx[c + k*S], S = d*b/8, at bit k*b. b = 3 calls it twice.
void pack_strided(const uint8_t* idx, int dim, int bits, int shift, uint8_t* out) {
  const int stride = dim * bits / 8, per_byte = 8 / bits;
  const unsigned mask = (1u << bits) - 1u;
  for (int c = 0; c < stride; ++c) {
    unsigned byte = 0;
    for (int k = 0; k < per_byte; ++k) byte |= ((idx[c + k * stride] >> shift) & mask) << (k * bits);
    out[c] = static_cast<uint8_t>(byte);
  }
}

// Inverse of pack_strided: ORs each field back in at `shift` (idx must start zeroed for b = 3).
void unpack_strided(const uint8_t* packed, int dim, int bits, int shift, uint8_t* idx) {
  const int stride = dim * bits / 8, per_byte = 8 / bits;
  const unsigned mask = (1u << bits) - 1u;
  for (int c = 0; c < stride; ++c) {
    const unsigned byte = packed[c];
    for (int k = 0; k < per_byte; ++k) {
      idx[c + k * stride] |= static_cast<uint8_t>(((byte >> (k * bits)) & mask) << shift);
    }
  }
}

}  // namespace

void check_tq_row_shape(int dim, int bits) {
  if (bits < 1 || bits > 4) fail("TurboQuant bits must be 1, 2, 3 or 4, got {}", bits);
  const int multiple = (bits == 4) ? 2 : (bits == 2) ? 4 : 8;
  if (dim <= 0 || dim % multiple != 0) {
    fail("TurboQuant {}-bit rows need head_dim to be a positive multiple of {}, got {}", bits,
         multiple, dim);
  }
}

size_t tq_codes_bytes(int dim, int bits) {
  check_tq_row_shape(dim, bits);
  return size_t(dim) * bits / 8;
}

size_t tq_row_bytes(int dim, int bits) { return tq_codes_bytes(dim, bits) + sizeof(float); }

void check_tq_split_row_shape(int dim, int bits_hi, int bits_lo) {
  if (dim <= 0 || dim % 2 != 0) fail("TurboQuant split rows need an even head_dim, got {}", dim);
  check_tq_row_shape(dim / 2, bits_hi);
  check_tq_row_shape(dim / 2, bits_lo);
}

size_t tq_split_codes_bytes(int dim, int bits_hi, int bits_lo) {
  check_tq_split_row_shape(dim, bits_hi, bits_lo);
  return tq_codes_bytes(dim / 2, bits_hi) + tq_codes_bytes(dim / 2, bits_lo);
}

size_t tq_split_row_bytes(int dim, int bits_hi, int bits_lo) {
  return tq_split_codes_bytes(dim, bits_hi, bits_lo) + 2 * sizeof(uint16_t);
}

void pack_indices(const uint8_t* idx, int dim, int bits, uint8_t* out) {
  check_tq_row_shape(dim, bits);
  if (bits == 3) {
    pack_strided(idx, dim, 2, 0, out);            // low two bits, d/4 bytes
    pack_strided(idx, dim, 1, 2, out + dim / 4);  // high bit, d/8 bytes
    return;
  }
  pack_strided(idx, dim, bits, 0, out);
}

void unpack_indices(const uint8_t* packed, int dim, int bits, uint8_t* idx) {
  check_tq_row_shape(dim, bits);
  std::memset(idx, 0, size_t(dim));
  if (bits == 3) {
    unpack_strided(packed, dim, 2, 0, idx);
    unpack_strided(packed + dim / 4, dim, 1, 2, idx);
    return;
  }
  unpack_strided(packed, dim, bits, 0, idx);
}

void check_channel_part_shape(int dim, int bits) {
  if (bits < 0 || bits > 6) fail("channel-bit parts take 0..6 bits, got {}", bits);
  if (dim <= 0 || dim % 8 != 0) fail("channel-bit parts need a positive multiple of 8 coordinates, got {}", dim);
}

size_t channel_part_bytes(int dim, int bits) {
  check_channel_part_shape(dim, bits);
  return size_t(dim) * bits / 8;
}

void pack_channel_part(const uint8_t* idx, int dim, int bits, uint8_t* out) {
  check_channel_part_shape(dim, bits);
  if (bits == 0) return;
  if (bits <= 4) {
    pack_indices(idx, dim, bits, out);
    return;
  }
  pack_strided(idx, dim, 4, 0, out);
  pack_strided(idx, dim, bits - 4, 4, out + dim / 2);
}

void unpack_channel_part(const uint8_t* packed, int dim, int bits, uint8_t* idx) {
  check_channel_part_shape(dim, bits);
  if (bits <= 4) {
    if (bits == 0) {
      std::memset(idx, 0, size_t(dim));
    } else {
      unpack_indices(packed, dim, bits, idx);
    }
    return;
  }
  std::memset(idx, 0, size_t(dim));
  unpack_strided(packed, dim, 4, 0, idx);
  unpack_strided(packed + dim / 2, dim, bits - 4, 4, idx);
}

}  // namespace tq
