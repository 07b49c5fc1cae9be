// Weight dtypes and dequantization, checked bit-exactly against golden data produced by the
// independent `gguf` Python package (tools/gen_dequant_golden.py -> tests/data/dequant_golden.json).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "errors/error.h"
#include "kernels/dequantize.h"
#include "kernels/dtype.h"

namespace tq {
namespace {

std::vector<uint8_t> base64_decode(const std::string& text) {
  auto sextet = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::vector<uint8_t> out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    const int v = sextet(c);
    if (v < 0) continue;  // '=' padding
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<uint8_t>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

template <typename T>
std::vector<T> decode_array(const std::string& text) {
  const std::vector<uint8_t> bytes = base64_decode(text);
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

const nlohmann::json& golden() {
  static const nlohmann::json data = [] {
    std::ifstream in(std::string(TQ_SOURCE_DIR) + "/tests/data/dequant_golden.json");
    EXPECT_TRUE(in.good()) << "missing tests/data/dequant_golden.json";
    std::stringstream text;
    text << in.rdbuf();
    return nlohmann::json::parse(text.str());
  }();
  return data;
}

TEST(DType, TraitsMatchGgml) {
  struct Expected {
    DType type;
    const char* name;
    int block_elems, block_bytes;
  };
  const Expected table[] = {
      {DType::F32, "f32", 1, 4},      {DType::F16, "f16", 1, 2},
      {DType::BF16, "bf16", 1, 2},    {DType::Q4_0, "q4_0", 32, 18},
      {DType::Q4_1, "q4_1", 32, 20},  {DType::Q5_0, "q5_0", 32, 22},
      {DType::Q5_1, "q5_1", 32, 24},  {DType::Q8_0, "q8_0", 32, 34},
      {DType::Q8_1, "q8_1", 32, 36},  {DType::Q2_K, "q2_k", 256, 84},
      {DType::Q3_K, "q3_k", 256, 110}, {DType::Q4_K, "q4_k", 256, 144},
      {DType::Q5_K, "q5_k", 256, 176}, {DType::Q6_K, "q6_k", 256, 210},
      {DType::Q8_K, "q8_k", 256, 292}, {DType::I8, "i8", 1, 1},
      {DType::I16, "i16", 1, 2},      {DType::I32, "i32", 1, 4},
      {DType::I64, "i64", 1, 8},      {DType::F64, "f64", 1, 8},
  };
  for (const Expected& e : table) {
    const DTypeTraits& t = dtype_traits(e.type);
    EXPECT_EQ(t.name, e.name);
    EXPECT_EQ(t.block_elems, e.block_elems) << e.name;
    EXPECT_EQ(t.block_bytes, e.block_bytes) << e.name;
    auto by_id = dtype_traits(static_cast<uint32_t>(e.type));
    ASSERT_TRUE(by_id.has_value()) << e.name;
    EXPECT_EQ(by_id->name, e.name);
  }
  for (DType supported : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0,
                          DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K,
                          DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    EXPECT_TRUE(dtype_traits(supported).supported) << dtype_traits(supported).name;
  }
  EXPECT_FALSE(dtype_traits(DType::Q8_1).supported);
  EXPECT_FALSE(dtype_traits(DType::I32).supported);
  for (uint32_t unknown : {4u, 5u, 16u, 23u, 29u, 31u, 99u, 0xFFFFFFFFu}) {
    EXPECT_FALSE(dtype_traits(unknown).has_value()) << unknown;
  }
}

TEST(DType, RowBytes) {
  EXPECT_EQ(dtype_row_bytes(DType::F32, 64), 256u);
  EXPECT_EQ(dtype_row_bytes(DType::BF16, 3), 6u);
  EXPECT_EQ(dtype_row_bytes(DType::Q4_0, 64), 36u);
  EXPECT_EQ(dtype_row_bytes(DType::Q4_K, 512), 288u);
  EXPECT_EQ(dtype_row_bytes(DType::Q6_K, 0), 0u);
  EXPECT_THROW(dtype_row_bytes(DType::Q4_K, 100), Error);
  EXPECT_THROW(dtype_row_bytes(DType::Q8_0, 33), Error);
}

TEST(Dequantize, MatchesGgufPackageBitExactly) {
  std::set<uint32_t> covered;
  for (const auto& item : golden()["types"]) {
    const std::string name = item["name"];
    const auto type_id = item["ggml_type"].get<uint32_t>();
    const auto n = item["n"].get<int64_t>();
    const std::vector<uint8_t> blocks = base64_decode(item["blocks_b64"]);
    const std::vector<float> expected = decode_array<float>(item["expected_f32_b64"]);
    ASSERT_EQ(static_cast<int64_t>(expected.size()), n) << name;
    const DType type = static_cast<DType>(type_id);
    ASSERT_EQ(blocks.size(), dtype_row_bytes(type, n)) << name;
    EXPECT_EQ(dtype_traits(type).name, name);

    std::vector<float> got(static_cast<size_t>(n), -12345.0f);
    dequantize_row(type, blocks.data(), got.data(), n);
    int mismatches = 0;
    for (int64_t i = 0; i < n && mismatches < 5; ++i) {
      if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(expected[i])) {
        ADD_FAILURE() << name << " element " << i << ": got " << got[i] << " expected "
                      << expected[i];
        ++mismatches;
      }
    }
    // A row that starts at a later block must give the same values (block addressing).
    const int block_elems = dtype_traits(type).block_elems;
    if (n > block_elems) {
      std::vector<float> tail(static_cast<size_t>(n - block_elems));
      dequantize_row(type, blocks.data() + dtype_row_bytes(type, block_elems), tail.data(),
                     n - block_elems);
      EXPECT_EQ(0, std::memcmp(tail.data(), got.data() + block_elems, tail.size() * 4)) << name;
    }
    covered.insert(type_id);
  }
  for (uint32_t id = 0; id < 64; ++id) {
    auto traits = dtype_traits(id);
    if (traits && traits->supported) {
      EXPECT_TRUE(covered.count(id)) << "no golden data for supported type " << traits->name;
    }
  }
}

TEST(Dequantize, RejectsUnsupportedTypesAndPartialBlocks) {
  std::vector<uint8_t> bytes(1024);
  std::vector<float> out(256);
  EXPECT_THROW(dequantize_row(DType::Q8_1, bytes.data(), out.data(), 32), Error);
  EXPECT_THROW(dequantize_row(DType::I32, bytes.data(), out.data(), 4), Error);
  EXPECT_THROW(dequantize_row(DType::Q4_K, bytes.data(), out.data(), 100), Error);
  dequantize_row(DType::Q4_0, bytes.data(), out.data(), 0);  // empty row is fine
}

TEST(Fp16, KnownValues) {
  EXPECT_EQ(fp16_to_fp32(0x3C00), 1.0f);
  EXPECT_EQ(fp16_to_fp32(0xC000), -2.0f);
  EXPECT_EQ(fp16_to_fp32(0x7BFF), 65504.0f);
  EXPECT_EQ(fp16_to_fp32(0x0400), std::ldexp(1.0f, -14));   // smallest normal
  EXPECT_EQ(fp16_to_fp32(0x0001), std::ldexp(1.0f, -24));   // smallest subnormal
  EXPECT_EQ(fp16_to_fp32(0x03FF), 1023 * std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16_to_fp32(0x3555), 0.333251953125f);
  EXPECT_EQ(std::bit_cast<uint32_t>(fp16_to_fp32(0x8000)), 0x80000000u);  // -0
  EXPECT_EQ(fp16_to_fp32(0x7C00), INFINITY);
  EXPECT_EQ(fp16_to_fp32(0xFC00), -INFINITY);
  EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7E00)));
  EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7C01)));  // signalling NaN stays NaN

  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(fp32_to_fp16(-2.0f), 0xC000);
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(fp32_to_fp16(65519.0f), 0x7BFF);
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00);  // tie to even overflows
  EXPECT_EQ(fp32_to_fp16(1e9f), 0x7C00);
  EXPECT_EQ(fp32_to_fp16(-INFINITY), 0xFC00);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // tie to even: 0
  EXPECT_EQ(fp32_to_fp16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp: tie to even: 2
  EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // tie, even is down
  EXPECT_EQ(fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie, even is up
  const uint16_t nan = fp32_to_fp16(NAN);
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
}

TEST(Fp16, EveryHalfRoundTripsAndOrders) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const float f = fp16_to_fp32(static_cast<uint16_t>(h));
    const bool is_nan = (h & 0x7C00) == 0x7C00 && (h & 0x03FF) != 0;
    if (is_nan) {
      ASSERT_TRUE(std::isnan(f)) << h;
      const uint16_t back = fp32_to_fp16(f);
      ASSERT_TRUE((back & 0x7C00) == 0x7C00 && (back & 0x03FF) != 0) << h;
      ASSERT_EQ(back & 0x8000, h & 0x8000) << h;
    } else {
      ASSERT_EQ(fp32_to_fp16(f), h) << h;
    }
  }
  for (uint32_t h = 1; h <= 0x7C00; ++h) {
    ASSERT_LT(fp16_to_fp32(static_cast<uint16_t>(h - 1)), fp16_to_fp32(static_cast<uint16_t>(h)));
  }
}

TEST(Fp16, FromFp32MatchesNumpy) {
  const auto& samples = golden()["fp16_from_f32"];
  const std::vector<float> f32 = decode_array<float>(samples["f32_b64"]);
  const std::vector<uint16_t> f16 = decode_array<uint16_t>(samples["f16_b64"]);
  ASSERT_EQ(f32.size(), f16.size());
  ASSERT_GT(f32.size(), 500u);
  for (size_t i = 0; i < f32.size(); ++i) {
    ASSERT_EQ(fp32_to_fp16(f32[i]), f16[i])
        << "f32 bits 0x" << std::hex << std::bit_cast<uint32_t>(f32[i]);
  }
}

// The row conversion (F16C where the CPU has it) is fp32_to_fp16 bit for bit: every 61st fp32
// bit pattern (NaNs with many payloads, subnormals, ties, overflow) plus the boundaries, in rows
// whose lengths leave a scalar tail.
TEST(Fp16, RowConversionMatchesScalar) {
  std::vector<float> src;
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += 61) src.push_back(std::bit_cast<float>(static_cast<uint32_t>(bits)));
  for (uint32_t bits : {0x477FEFFFu, 0x477FF000u, 0x477FF001u, 0x33000000u, 0x33000001u, 0x38800000u, 0x387FFFFFu,
                        0x7F800001u, 0xFF800001u, 0x7FC00000u, 0x7F800000u, 0x80000000u})
    src.push_back(std::bit_cast<float>(bits));
  src.push_back(0.0f);  // an odd total: the last call has a tail
  std::vector<uint16_t> got(src.size());
  for (size_t i = 0; i < src.size(); i += 1003) {
    const size_t n = std::min<size_t>(1003, src.size() - i);
    fp32_to_fp16_row(src.data() + i, got.data() + i, static_cast<int64_t>(n));
  }
  for (size_t i = 0; i < src.size(); ++i)
    ASSERT_EQ(got[i], fp32_to_fp16(src[i])) << "f32 bits 0x" << std::hex << std::bit_cast<uint32_t>(src[i]);
}

TEST(Bf16, KnownValuesAndGolden) {
  EXPECT_EQ(bf16_to_fp32(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_fp32(0xC040), -3.0f);
  EXPECT_EQ(bf16_to_fp32(0x7F80), INFINITY);
  EXPECT_EQ(bf16_to_fp32(0x0001), std::bit_cast<float>(0x00010000u));  // subnormal kept
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x3F808000u)), 0x3F80);  // tie, even down
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x3F818000u)), 0x3F82);  // tie, even up
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x7F7FFFFFu)), 0x7F80);  // rounds to inf
  EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(std::bit_cast<float>(0x7F800001u)))));

  const auto& samples = golden()["bf16_from_f32"];
  const std::vector<float> f32 = decode_array<float>(samples["f32_b64"]);
  const std::vector<uint16_t> bf16 = decode_array<uint16_t>(samples["bf16_b64"]);
  ASSERT_EQ(f32.size(), bf16.size());
  ASSERT_GT(f32.size(), 300u);
  for (size_t i = 0; i < f32.size(); ++i) {
    ASSERT_EQ(fp32_to_bf16(f32[i]), bf16[i])
        << "f32 bits 0x" << std::hex << std::bit_cast<uint32_t>(f32[i]);
  }
}

}  // namespace
}  // namespace tq
