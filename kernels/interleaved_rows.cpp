#include "kernels/interleaved_rows.h"

#include <cstring>

#include "errors/error.h"

namespace tq {
namespace {

constexpr int64_t kSlice = 32;
constexpr size_t kQ4_1BlockBytes = 20;  // {f16 d; f16 m; u8 qs[16]}

void check_layout(DType t, int64_t in) {
  if (t != DType::Q4_1) fail("no interleaved row layout for weight type {}", dtype_traits(t).name);
  if (in % kSlice != 0) fail("interleaved rows: width {} is not a multiple of {}", in, kSlice);
}

// Where row r's slice b lives: the group's slice block, and r's place in it.
inline uint8_t* group_slice(uint8_t* base, int64_t n_slices, int64_t row, int64_t b) {
  return base + (static_cast<size_t>(row / kInterleavedRows) * n_slices + b) * kQ4_1GroupSliceBytes;
}

}  // namespace

bool has_interleaved_layout(DType t) {
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                           __builtin_cpu_supports("f16c");
  return avx2 && t == DType::Q4_1;
}

size_t interleaved_bytes(DType t, int64_t out, int64_t in) {
  check_layout(t, in);
  const int64_t groups = (out + kInterleavedRows - 1) / kInterleavedRows;
  return static_cast<size_t>(groups) * static_cast<size_t>(in / kSlice) * kQ4_1GroupSliceBytes;
}

std::vector<uint8_t> interleave_rows(DType t, const uint8_t* rows, int64_t out, int64_t in) {
  std::vector<uint8_t> dst(interleaved_bytes(t, out, in), 0);  // padding rows stay zero: d = m = 0
  const int64_t n_slices = in / kSlice;
  for (int64_t o = 0; o < out; ++o) {
    const int r = static_cast<int>(o % kInterleavedRows);
    for (int64_t b = 0; b < n_slices; ++b) {
      const uint8_t* blk = rows + (o * n_slices + b) * kQ4_1BlockBytes;
      uint8_t* g = group_slice(dst.data(), n_slices, o, b);
      std::memcpy(g + 2 * r, blk, 2);           // d
      std::memcpy(g + 16 + 2 * r, blk + 2, 2);  // m
      for (int k = 0; k < 4; ++k) std::memcpy(g + 32 + 32 * k + 4 * r, blk + 4 + 4 * k, 4);
    }
  }
  return dst;
}

void deinterleave_row(DType t, const uint8_t* interleaved, int64_t in, int64_t row, uint8_t* dst) {
  check_layout(t, in);
  const int64_t n_slices = in / kSlice;
  const int r = static_cast<int>(row % kInterleavedRows);
  for (int64_t b = 0; b < n_slices; ++b) {
    const uint8_t* g = group_slice(const_cast<uint8_t*>(interleaved), n_slices, row, b);
    uint8_t* blk = dst + b * kQ4_1BlockBytes;
    std::memcpy(blk, g + 2 * r, 2);
    std::memcpy(blk + 2, g + 16 + 2 * r, 2);
    for (int k = 0; k < 4; ++k) std::memcpy(blk + 4 + 4 * k, g + 32 + 32 * k + 4 * r, 4);
  }
}

}  // namespace tq
