// A token's id in the model's vocabulary: the tokenizer produces them, the KV cache's prefix
// hashing keys blocks by them, the model embeds them. Below all three, so none includes another
// for it.
#pragma once
#include <cstdint>

namespace tq {

using TokenId = int32_t;

}  // namespace tq
