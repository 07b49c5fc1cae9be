#include "kernels/interleaved_rows.h"

#include <cstring>

#include "errors/error.h"
#include "kernels/stored_matmul_avx512.h"

namespace tq {
namespace {

constexpr int64_t kSlice = 32;
constexpr size_t kQ4_1BlockBytes = 20;  // {f16 d; f16 m; u8 qs[16]}

void check_layout(DType t, int64_t in, int group_rows) {
  if (t != DType::Q4_1) fail("no interleaved row layout for weight type {}", dtype_traits(t).name);
  if (group_rows != 8 && group_rows != 16) fail("interleaved rows: groups of {} rows (8 or 16 are laid out)", group_rows);
  if (in % kSlice != 0) fail("interleaved rows: width {} is not a multiple of {}", in, kSlice);
}

// Row r's slice b: the group's slice block.
inline size_t group_slice_offset(int64_t n_slices, int group_rows, int64_t row, int64_t b) {
  return (static_cast<size_t>(row / group_rows) * n_slices + b) * q4_1_group_slice_bytes(group_rows);
}

}  // namespace

bool interleaved_kernel_available(int group_rows) {
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                           __builtin_cpu_supports("f16c");
  if (group_rows == 8) return avx2;
  if (group_rows == 16) return avx2 && stored_matmul_avx512_available();
  return false;
}

int interleaved_group_rows(DType t) {
  if (t != DType::Q4_1) return 0;
  return interleaved_kernel_available(16) ? 16 : interleaved_kernel_available(8) ? 8 : 0;
}

size_t interleaved_bytes(DType t, int64_t out, int64_t in, int group_rows) {
  check_layout(t, in, group_rows);
  const int64_t groups = (out + group_rows - 1) / group_rows;
  return static_cast<size_t>(groups) * static_cast<size_t>(in / kSlice) * q4_1_group_slice_bytes(group_rows);
}

std::vector<uint8_t> interleave_rows(DType t, const uint8_t* rows, int64_t out, int64_t in, int group_rows) {
  std::vector<uint8_t> dst(interleaved_bytes(t, out, in, group_rows), 0);  // padding rows stay zero: d = m = 0
  const int64_t n_slices = in / kSlice;
  const int R = group_rows;
  for (int64_t o = 0; o < out; ++o) {
    const int r = static_cast<int>(o % R);
    for (int64_t b = 0; b < n_slices; ++b) {
      const uint8_t* blk = rows + (o * n_slices + b) * kQ4_1BlockBytes;
      uint8_t* g = dst.data() + group_slice_offset(n_slices, R, o, b);
      std::memcpy(g + 2 * r, blk, 2);              // d
      std::memcpy(g + 2 * R + 2 * r, blk + 2, 2);  // m
      for (int k = 0; k < 4; ++k) std::memcpy(g + 4 * R + 4 * R * k + 4 * r, blk + 4 + 4 * k, 4);
    }
  }
  return dst;
}

void deinterleave_row(DType t, const uint8_t* interleaved, int64_t in, int group_rows, int64_t row, uint8_t* dst) {
  check_layout(t, in, group_rows);
  const int64_t n_slices = in / kSlice;
  const int R = group_rows, r = static_cast<int>(row % R);
  for (int64_t b = 0; b < n_slices; ++b) {
    const uint8_t* g = interleaved + group_slice_offset(n_slices, R, row, b);
    uint8_t* blk = dst + b * kQ4_1BlockBytes;
    std::memcpy(blk, g + 2 * r, 2);
    std::memcpy(blk + 2, g + 2 * R + 2 * r, 2);
    for (int k = 0; k < 4; ++k) std::memcpy(blk + 4 + 4 * k, g + 4 * R + 4 * R * k + 4 * r, 4);
  }
}

}  // namespace tq
