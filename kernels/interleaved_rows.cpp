#include "kernels/interleaved_rows.h"

#include <cstring>

#include "errors/error.h"
#include "kernels/stored_matmul_avx512.h"

namespace tq {
namespace {

constexpr int64_t kSlice = 32;

// A block format as the layout sees it: `scales` fp16 fields first (d, then m for Q4_1), then the
// quantized bytes in chunks of 4; `flip`: bytes stored XOR 0x80 (signed int8 → unsigned, for VNNI).
struct BlockShape {
  int block_bytes;
  int scales;
  int chunks;
  bool flip;
};

BlockShape block_shape(DType t) {
  static_assert(offsetof(BlockQ4_1, qs) == 2 * 2 && offsetof(BlockQ8_0, qs) == 2, "scales first, then qs");
  if (t == DType::Q4_1) return {int{sizeof(BlockQ4_1)}, 2, int{sizeof(BlockQ4_1::qs)} / 4, false};
  return {int{sizeof(BlockQ8_0)}, 1, int{sizeof(BlockQ8_0::qs)} / 4, true};
}

// The K types laid out block by block (Q4_K, Q6_K).
bool is_k_type(DType t) { return t == DType::Q4_K || t == DType::Q6_K; }

void check_layout(DType t, int64_t in, int group_rows) {
  if (t != DType::Q4_1 && t != DType::Q8_0 && !is_k_type(t))
    fail("no interleaved row layout for weight type {}", dtype_traits(t).name);
  if (group_rows != 8 && group_rows != 16) fail("interleaved rows: groups of {} rows (8 or 16 are laid out)", group_rows);
  if (is_k_type(t) && group_rows != 16) fail("interleaved rows: {} is laid out in groups of 16 rows", dtype_traits(t).name);
  const int64_t unit = is_k_type(t) ? BlockQ4_K::kValues : kSlice;
  if (in % unit != 0) fail("interleaved rows: width {} is not a multiple of {}", in, unit);
}

// Q4_K (layout in interleaved_rows.h): one block of a row to or from its place in the group's
// block (R rows). Every bit of the block has one place, so the two directions are exact inverses.
constexpr size_t kQ4KSliceBytes(int R) { return 18 * static_cast<size_t>(R); }

void q4_k_to_group(const uint8_t* block, int R, int r, uint8_t* group_block) {
  std::memcpy(group_block + 2 * r, block + offsetof(BlockQ4_K, d), 2);
  std::memcpy(group_block + 2 * R + 2 * r, block + offsetof(BlockQ4_K, dmin), 2);
  const uint8_t* qs = block + offsetof(BlockQ4_K, qs);
  for (int j = 0; j < 8; ++j) {
    uint8_t* slice = group_block + 4 * R + kQ4KSliceBytes(R) * j;
    int scale, min;
    k4_scale_min(block + offsetof(BlockQ4_K, scales), j, &scale, &min);
    slice[r] = static_cast<uint8_t>(scale);
    slice[R + r] = static_cast<uint8_t>(min);
    const uint8_t* run = qs + 32 * (j / 2);
    const int shift = 4 * (j & 1);
    for (int i = 0; i < 16; ++i) {
      const int low = (run[i] >> shift) & 15, high = (run[i + 16] >> shift) & 15;
      slice[2 * R + 4 * R * (i / 4) + 4 * r + i % 4] = static_cast<uint8_t>(low | high << 4);
    }
  }
}

void q4_k_from_group(const uint8_t* group_block, int R, int r, uint8_t* block) {
  std::memcpy(block + offsetof(BlockQ4_K, d), group_block + 2 * r, 2);
  std::memcpy(block + offsetof(BlockQ4_K, dmin), group_block + 2 * R + 2 * r, 2);
  int scale[8], min[8];
  uint8_t* qs = block + offsetof(BlockQ4_K, qs);
  for (int j = 0; j < 8; ++j) {
    const uint8_t* slice = group_block + 4 * R + kQ4KSliceBytes(R) * j;
    scale[j] = slice[r];
    min[j] = slice[R + r];
    uint8_t* run = qs + 32 * (j / 2);
    const int shift = 4 * (j & 1);
    if (shift == 0) std::memset(run, 0, 32);
    for (int i = 0; i < 16; ++i) {
      const uint8_t both = slice[2 * R + 4 * R * (i / 4) + 4 * r + i % 4];
      run[i] = static_cast<uint8_t>(run[i] | (both & 15) << shift);
      run[i + 16] = static_cast<uint8_t>(run[i + 16] | (both >> 4) << shift);
    }
  }
  // The inverse of k4_scale_min: slices 0-3 in the low 6 bits of bytes 0-7, slices 4-7 in the
  // nibbles of bytes 8-11 and the top two bits of bytes 0-7.
  uint8_t* scales = block + offsetof(BlockQ4_K, scales);
  for (int j = 0; j < 4; ++j) {
    scales[j] = static_cast<uint8_t>((scale[j] & 63) | (scale[j + 4] >> 4) << 6);
    scales[j + 4] = static_cast<uint8_t>((min[j] & 63) | (min[j + 4] >> 4) << 6);
    scales[j + 8] = static_cast<uint8_t>((scale[j + 4] & 15) | (min[j + 4] & 15) << 4);
  }
}

// Calls fn(offset in the group's slice, offset in row r's block, bytes, xor mask) for each field
// of row r's block (R rows per group): its fp16 scales, then its quantized bytes 4 at a time.
template <class Fn>
void for_each_field(const BlockShape& b, int R, int r, const Fn& fn) {
  for (int s = 0; s < b.scales; ++s) fn(2 * R * s + 2 * r, 2 * s, 2, 0);
  for (int k = 0; k < b.chunks; ++k) fn(2 * R * b.scales + 4 * R * k + 4 * r, 2 * b.scales + 4 * k, 4, b.flip ? 0x80 : 0);
}

// Q6_K (layout in interleaved_rows.h). Slice j = 4·half + run holds values 32·run .. 32·run + 31
// of the block's half `half`: low four bits in ql (bytes 32·(run & 1) on, the high nibble for
// run >= 2), top two bits at bit 2·run of qh, scales 8·half + 2·run and the next.
constexpr size_t kQ6KSliceBytes(int R) { return 26 * static_cast<size_t>(R); }

// Where value i (0..31) of row r's slice keeps its low four bits and its top two bits: byte
// offsets in the slice and bit shifts.
struct Q6KPlace {
  size_t low_byte, high_byte;
  int low_shift, high_shift;
};

Q6KPlace q6_k_place(int R, int r, int i) {
  const int c = i % 16, upper = i / 16;  // values c and 16 + c share a low-bits byte
  const int k = c / 4, h = k / 2;
  return {2 * static_cast<size_t>(R) + 4 * static_cast<size_t>(R) * k + 4 * r + c % 4,
          18 * static_cast<size_t>(R) + 4 * static_cast<size_t>(R) * h + 4 * r + c % 4, 4 * upper,
          4 * (k % 2) + 2 * upper};
}

void q6_k_to_group(const uint8_t* block, int R, int r, uint8_t* group_block) {
  std::memcpy(group_block + 2 * r, block + offsetof(BlockQ6_K, d), 2);
  const uint8_t* ql = block + offsetof(BlockQ6_K, ql);
  const uint8_t* qh = block + offsetof(BlockQ6_K, qh);
  const uint8_t* scales = block + offsetof(BlockQ6_K, scales);
  for (int j = 0; j < 8; ++j) {
    const int half = j / 4, run = j % 4;
    uint8_t* slice = group_block + 2 * R + kQ6KSliceBytes(R) * j;
    slice[r] = scales[8 * half + 2 * run];
    slice[R + r] = scales[8 * half + 2 * run + 1];
    for (int i = 0; i < 32; ++i) {
      const int low = (ql[64 * half + 32 * (run & 1) + i] >> (run >= 2 ? 4 : 0)) & 15;
      const int high = (qh[32 * half + i] >> (2 * run)) & 3;
      const Q6KPlace at = q6_k_place(R, r, i);
      slice[at.low_byte] = static_cast<uint8_t>(slice[at.low_byte] | low << at.low_shift);
      slice[at.high_byte] = static_cast<uint8_t>(slice[at.high_byte] | high << at.high_shift);
    }
  }
}

void q6_k_from_group(const uint8_t* group_block, int R, int r, uint8_t* block) {
  std::memcpy(block + offsetof(BlockQ6_K, d), group_block + 2 * r, 2);
  uint8_t* ql = block + offsetof(BlockQ6_K, ql);
  uint8_t* qh = block + offsetof(BlockQ6_K, qh);
  uint8_t* scales = block + offsetof(BlockQ6_K, scales);
  std::memset(ql, 0, sizeof(BlockQ6_K::ql) + sizeof(BlockQ6_K::qh));
  for (int j = 0; j < 8; ++j) {
    const int half = j / 4, run = j % 4;
    const uint8_t* slice = group_block + 2 * R + kQ6KSliceBytes(R) * j;
    scales[8 * half + 2 * run] = slice[r];
    scales[8 * half + 2 * run + 1] = slice[R + r];
    for (int i = 0; i < 32; ++i) {
      const Q6KPlace at = q6_k_place(R, r, i);
      const int low = (slice[at.low_byte] >> at.low_shift) & 15, high = (slice[at.high_byte] >> at.high_shift) & 3;
      uint8_t& low_bits = ql[64 * half + 32 * (run & 1) + i];
      low_bits = static_cast<uint8_t>(low_bits | low << (run >= 2 ? 4 : 0));
      qh[32 * half + i] = static_cast<uint8_t>(qh[32 * half + i] | high << (2 * run));
    }
  }
}

// Calls convert(row's block, group block) for every block of `out` rows of a K type.
template <class Convert>
void for_each_k_block(DType t, int64_t out, int64_t in, int group_rows, const Convert& convert) {
  const int64_t n_blocks = in / BlockQ4_K::kValues;
  const size_t block_bytes = dtype_traits(t).block_bytes;
  const size_t group_block_bytes = interleaved_slice_bytes(t, group_rows) * 8;
  for (int64_t o = 0; o < out; ++o)
    for (int64_t b = 0; b < n_blocks; ++b)
      convert(o, (o * n_blocks + b) * block_bytes, (static_cast<size_t>(o / group_rows) * n_blocks + b) * group_block_bytes);
}

}  // namespace

bool interleaved_kernel_available(DType t, int group_rows) {
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                           __builtin_cpu_supports("f16c");
  if (group_rows == 16)
    return (t == DType::Q4_1 || t == DType::Q8_0 || is_k_type(t)) && avx2 && stored_matmul_avx512_available();
  if (group_rows == 8) return t == DType::Q4_1 && avx2;
  return false;
}

int interleaved_group_rows(DType t) {
  return interleaved_kernel_available(t, 16) ? 16 : interleaved_kernel_available(t, 8) ? 8 : 0;
}

size_t interleaved_bytes(DType t, int64_t out, int64_t in, int group_rows) {
  check_layout(t, in, group_rows);
  const int64_t groups = (out + group_rows - 1) / group_rows;
  return static_cast<size_t>(groups) * static_cast<size_t>(in / kSlice) * interleaved_slice_bytes(t, group_rows);
}

LargeBytes interleave_rows(DType t, const uint8_t* rows, int64_t out, int64_t in, int group_rows) {
  LargeBytes dst(interleaved_bytes(t, out, in, group_rows), 0);  // padding rows: scales 0
  if (is_k_type(t)) {
    const auto to_group = t == DType::Q4_K ? q4_k_to_group : q6_k_to_group;
    for_each_k_block(t, out, in, group_rows, [&](int64_t o, size_t row_at, size_t group_at) {
      to_group(rows + row_at, group_rows, static_cast<int>(o % group_rows), dst.data() + group_at);
    });
    return dst;
  }
  const BlockShape shape = block_shape(t);
  const int64_t n_slices = in / kSlice;
  const size_t slice_bytes = interleaved_slice_bytes(t, group_rows);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t b = 0; b < n_slices; ++b) {
      uint8_t* group_slice = dst.data() + (static_cast<size_t>(o / group_rows) * n_slices + b) * slice_bytes;
      const uint8_t* block = rows + (o * n_slices + b) * shape.block_bytes;
      for_each_field(shape, group_rows, static_cast<int>(o % group_rows), [&](int g, int q, int n, uint8_t mask) {
        for (int i = 0; i < n; ++i) group_slice[g + i] = block[q + i] ^ mask;
      });
    }
  return dst;
}

void deinterleave_row(DType t, const uint8_t* interleaved, int64_t in, int group_rows, int64_t row, uint8_t* dst) {
  check_layout(t, in, group_rows);
  if (is_k_type(t)) {
    const auto from_group = t == DType::Q4_K ? q4_k_from_group : q6_k_from_group;
    const int64_t n_blocks = in / BlockQ4_K::kValues;
    const size_t block_bytes = dtype_traits(t).block_bytes;
    const size_t group_block_bytes = interleaved_slice_bytes(t, group_rows) * 8;
    for (int64_t b = 0; b < n_blocks; ++b)
      from_group(interleaved + (static_cast<size_t>(row / group_rows) * n_blocks + b) * group_block_bytes, group_rows,
                 static_cast<int>(row % group_rows), dst + b * block_bytes);
    return;
  }
  const BlockShape shape = block_shape(t);
  const int64_t n_slices = in / kSlice;
  const size_t slice_bytes = interleaved_slice_bytes(t, group_rows);
  for (int64_t b = 0; b < n_slices; ++b) {
    const uint8_t* group_slice = interleaved + (static_cast<size_t>(row / group_rows) * n_slices + b) * slice_bytes;
    uint8_t* block = dst + b * shape.block_bytes;
    for_each_field(shape, group_rows, static_cast<int>(row % group_rows), [&](int g, int q, int n, uint8_t mask) {
      for (int i = 0; i < n; ++i) block[q + i] = group_slice[g + i] ^ mask;
    });
  }
}

}  // namespace tq
