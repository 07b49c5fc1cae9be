// What one forward step computes: the flattened tokens of every scheduled sequence.
#pragma once
#include <cstdint>
#include <vector>

#include "kv/kv_cache.h"
#include "tokenizer/tokenizer.h"

namespace tq {

struct ForwardBatch {
  std::vector<TokenId> tokens;             // [T]
  std::vector<int32_t> positions;          // [T] position of each token in its sequence
  std::vector<const BlockTable*> tables;   // [T] block table of the token's sequence
  std::vector<int32_t> logit_rows;         // indices into tokens whose logits are wanted

  void add(TokenId token, int32_t position, const BlockTable* table, bool want_logits) {
    if (want_logits) logit_rows.push_back(static_cast<int32_t>(tokens.size()));
    tokens.push_back(token);
    positions.push_back(position);
    tables.push_back(table);
  }
  int size() const { return static_cast<int>(tokens.size()); }
};

}  // namespace tq
