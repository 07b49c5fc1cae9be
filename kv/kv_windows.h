// Full-precision windows of a quantized KV cache (`--kv-sink-tokens`, `--kv-recent-tokens`).
//
// A query at position p reads the attention-sink rows [0, sink_tokens) and its recent rows
// (p - recent_tokens, p] at full precision (fp16 in the side's storage space, or q8_0 there when
// asked) and every other row as coded. Which form a query reads depends only on the two positions, never on how the
// prompt was chunked, what it was batched with, a preemption or a prefix-cache hit.
//
// The `coded_*` fields only restrict further which rows are read coded; they exist for
// `tqserve eval kl --breakdown`, which quantizes one position range at a time to find where a
// mode's error comes from.
#pragma once
#include <algorithm>
#include <climits>
#include <string>
#include <utility>

#include "kv/kv_dtype.h"

namespace tq {

struct KvWindows {
  int sink_tokens = 0;    // rows [0, sink_tokens) full precision
  int recent_tokens = 0;  // rows (p - recent_tokens, p] full precision
  int coded_from = 0;       // rows below it full precision (absolute)
  int coded_to = INT_MAX;   // rows from it on full precision (absolute)
  int coded_last = 0;       // > 0: only rows (p - coded_last, p] may be coded
  KvDtype dtype = KvDtype::F16;  // how window rows are kept (in storage space): f16 or q8_0
  // Window blocks the cache allocates (kv/kv_window_store.h); 0: one per data block, which a
  // single-sequence user (who never drops old windows) needs. Not part of the mode: describe() omits it.
  int window_blocks = 0;

  bool any() const { return sink_tokens > 0 || recent_tokens > 0 || coded_from > 0 || coded_to < INT_MAX || coded_last > 0; }
  // [begin, end): the positions a query at position p reads coded (empty when end <= begin).
  std::pair<int, int> coded_range(int p) const {
    int begin = std::max(sink_tokens, coded_from);
    if (coded_last > 0) begin = std::max(begin, p + 1 - coded_last);
    const int end = std::min(coded_to, p + 1 - recent_tokens);
    return {begin, std::max(begin, end)};
  }
  // Rows a query at position p (so p + 1 rows of context) reads at full precision.
  int full_precision_rows(int p) const {
    const auto [b, e] = coded_range(p);
    return p + 1 - (e - b);
  }
  // Data blocks whose rows a query at position p reads from the window: [0, sink_end_block(p))
  // and [recent_begin_block(p), p / block_size] (empty when recent_tokens is 0).
  int sink_end_block(int p, int block_size) const {
    return (std::min(sink_tokens, p + 1) + block_size - 1) / block_size;
  }
  int recent_begin_block(int p, int block_size) const {
    return recent_tokens > 0 ? std::max(0, p + 1 - recent_tokens) / block_size : p / block_size + 1;
  }
  // "sink 4, recent 32" (", q8_0" when not f16), or "none"
  std::string describe() const;
};

}  // namespace tq
