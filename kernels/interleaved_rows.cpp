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

void check_layout(DType t, int64_t in, int group_rows) {
  if (t != DType::Q4_1 && t != DType::Q8_0) fail("no interleaved row layout for weight type {}", dtype_traits(t).name);
  if (group_rows != 8 && group_rows != 16) fail("interleaved rows: groups of {} rows (8 or 16 are laid out)", group_rows);
  if (in % kSlice != 0) fail("interleaved rows: width {} is not a multiple of {}", in, kSlice);
}

// Calls fn(offset in the group's slice, offset in row r's block, bytes, xor mask) for each field
// of row r's block (R rows per group): its fp16 scales, then its quantized bytes 4 at a time.
template <class Fn>
void for_each_field(const BlockShape& b, int R, int r, const Fn& fn) {
  for (int s = 0; s < b.scales; ++s) fn(2 * R * s + 2 * r, 2 * s, 2, 0);
  for (int k = 0; k < b.chunks; ++k) fn(2 * R * b.scales + 4 * R * k + 4 * r, 2 * b.scales + 4 * k, 4, b.flip ? 0x80 : 0);
}

}  // namespace

bool interleaved_kernel_available(DType t, int group_rows) {
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                           __builtin_cpu_supports("f16c");
  if (group_rows == 16) return (t == DType::Q4_1 || t == DType::Q8_0) && avx2 && stored_matmul_avx512_available();
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

std::vector<uint8_t> interleave_rows(DType t, const uint8_t* rows, int64_t out, int64_t in, int group_rows) {
  std::vector<uint8_t> dst(interleaved_bytes(t, out, in, group_rows), 0);  // padding rows: scales 0
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
