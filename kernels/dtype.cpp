#include "kernels/dtype.h"

#include <array>

#include "errors/error.h"
#include "kernels/ggml_blocks.h"

namespace tq {
namespace {

struct DTypeEntry {
  DType type;
  DTypeTraits traits;
};

// The geometry of a block format dequantize_row() converts, from its layout.
template <class Block>
constexpr DTypeTraits block_format(std::string_view name) {
  return {name, Block::kValues, static_cast<int>(sizeof(Block)), true};
}

// Block geometry from ggml-common.h (QK_K = 256). `supported` marks the types dequantize_row()
// converts; the others are still described so that readers can report them by name.
constexpr std::array<DTypeEntry, 20> kDTypes = {{
    {DType::F32, {"f32", 1, 4, true}},
    {DType::F16, {"f16", 1, 2, true}},
    {DType::Q4_0, block_format<BlockQ4_0>("q4_0")},
    {DType::Q4_1, block_format<BlockQ4_1>("q4_1")},
    {DType::Q5_0, block_format<BlockQ5_0>("q5_0")},
    {DType::Q5_1, block_format<BlockQ5_1>("q5_1")},
    {DType::Q8_0, block_format<BlockQ8_0>("q8_0")},
    {DType::Q8_1, {"q8_1", 32, 36, false}},
    {DType::Q2_K, block_format<BlockQ2_K>("q2_k")},
    {DType::Q3_K, block_format<BlockQ3_K>("q3_k")},
    {DType::Q4_K, block_format<BlockQ4_K>("q4_k")},
    {DType::Q5_K, block_format<BlockQ5_K>("q5_k")},
    {DType::Q6_K, block_format<BlockQ6_K>("q6_k")},
    {DType::Q8_K, {"q8_k", 256, 292, false}},
    {DType::I8, {"i8", 1, 1, false}},
    {DType::I16, {"i16", 1, 2, false}},
    {DType::I32, {"i32", 1, 4, false}},
    {DType::I64, {"i64", 1, 8, false}},
    {DType::F64, {"f64", 1, 8, false}},
    {DType::BF16, {"bf16", 1, 2, true}},
}};

const DTypeEntry* find_entry(uint32_t ggml_type_id) {
  for (const DTypeEntry& entry : kDTypes) {
    if (static_cast<uint32_t>(entry.type) == ggml_type_id) return &entry;
  }
  return nullptr;
}

}  // namespace

std::optional<DTypeTraits> dtype_traits(uint32_t ggml_type_id) {
  const DTypeEntry* entry = find_entry(ggml_type_id);
  if (entry == nullptr) return std::nullopt;
  return entry->traits;
}

const DTypeTraits& dtype_traits(DType type) {
  const DTypeEntry* entry = find_entry(static_cast<uint32_t>(type));
  if (entry == nullptr) fail("unknown dtype id {}", static_cast<uint32_t>(type));
  return entry->traits;
}

size_t dtype_row_bytes(DType type, int64_t n) {
  const DTypeTraits& traits = dtype_traits(type);
  if (n < 0 || n % traits.block_elems != 0) {
    fail("{} elements of {} are not a whole number of {}-element blocks", n, traits.name,
         traits.block_elems);
  }
  return static_cast<size_t>(n / traits.block_elems) * static_cast<size_t>(traits.block_bytes);
}

}  // namespace tq
