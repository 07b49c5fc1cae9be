// Several query tokens of one sequence computed together (kernels/paged_attention.h:
// paged_attention_fast_queries): each query's output is paged_attention_fast's for that query
// alone, bit for bit, with the shapes a prefill chunk gives them: consecutive positions, a coded
// range that moves with the position (sink and recent windows), the chunk's exact rows, and the
// context split into parts with unnormalized outputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "errors/error.h"
#include "kernels/paged_attention.h"
#include "support/coded_pages_support.h"

namespace tq {
namespace {

using namespace coded_test;

struct Chunk {
  int first = 0;       // position of the chunk's first token
  int tokens = 0;      // its tokens, at first .. first + tokens - 1
  int sink = 0;        // windows: rows [0, sink) and the last `recent` rows are read from the window pages
  int recent = 0;      // 0 and sink 0: no windows
  bool exact = false;  // the chunk's own rows come from the exact arrays
  int part_rows = 0;   // > 0: the context in parts of this many rows
};

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

void check_chunk(const Spec& ks, const Spec& vs, int d, int n_kv, int group, const Chunk& c, std::mt19937& rng,
                 int int8 = 0) {  // int8: 1 integer key scores, 2 integer value sums, 3 both
  SCOPED_TRACE("int8=" + std::to_string(int8) + " k=" + spec_name(ks) + " v=" + spec_name(vs) + " d=" + std::to_string(d) + " first=" +
               std::to_string(c.first) + " tokens=" + std::to_string(c.tokens) + " windows=" + std::to_string(c.sink) +
               "+" + std::to_string(c.recent) + " exact=" + std::to_string(c.exact) + " parts=" + std::to_string(c.part_rows));
  const int n_q = n_kv * group, n_ctx = c.first + c.tokens;
  const Pages p = build_pages(d, n_kv, n_ctx, 16, ks, vs, rng);
  const Pages w = build_pages(d, n_kv, n_ctx, 16, kF16, kQ8, rng);
  std::vector<int32_t> window_of(p.k_pages.size() / p.k.block_stride, -1);
  for (size_t i = 0; i < p.block_table.size(); ++i) window_of[p.block_table[i]] = w.block_table[i];
  const size_t tail = size_t(c.tokens) * n_kv * d;
  const std::vector<float> exact_k = random_vec(tail, rng), exact_v = random_vec(tail, rng);
  const std::vector<float> q = random_vec(size_t(c.tokens) * n_q * d, rng, 1.5f);
  const int parts_of_last = c.part_rows > 0 ? (n_ctx + c.part_rows - 1) / c.part_rows : 1;
  const size_t out_size = size_t(n_q) * d;
  // [token, part] slots of outputs and statistics, once computed alone and once together.
  const size_t slots = size_t(c.tokens) * parts_of_last;
  std::vector<float> alone(slots * out_size), together(slots * out_size), max_alone(slots * n_q),
      max_together(slots * n_q), sum_alone(slots * n_q), sum_together(slots * n_q);
  const auto args = [&](int j, int part, bool joint) {
    const size_t slot = size_t(j) * parts_of_last + part;
    PagedAttentionArgs a = make_args(p, q.data() + size_t(j) * n_q * d, n_q, (joint ? together : alone).data() + slot * out_size);
    a.n_ctx = c.first + j + 1;
    a.int8_key_scores = int8 & 1;
    a.int8_value_sums = int8 & 2;
    if (c.sink > 0 || c.recent > 0) set_windows(a, w, window_of.data(), c.sink, c.recent);
    if (c.exact) {
      a.exact_from = c.first;
      a.exact_k = exact_k.data();
      a.exact_v = exact_v.data();
    }
    if (c.part_rows > 0) {
      a.ctx_begin = part * c.part_rows;
      a.n_ctx = std::min(a.n_ctx, (part + 1) * c.part_rows);
      if (a.exact_from > a.n_ctx) a.exact_from = a.n_ctx;  // as the layer does
      a.partial_max = (joint ? max_together : max_alone).data() + slot * n_q;
      a.partial_sum = (joint ? sum_together : sum_alone).data() + slot * n_q;
    }
    return a;
  };
  for (int part = 0; part < parts_of_last; ++part) {
    std::vector<PagedAttentionArgs> queries;
    for (int j = 0; j < c.tokens; ++j) {
      if (part * std::max(c.part_rows, 1) >= c.first + j + 1 && c.part_rows > 0) continue;  // no such part
      paged_attention_fast(args(j, part, false));
      queries.push_back(args(j, part, true));
    }
    paged_attention_fast_queries(queries.data(), static_cast<int>(queries.size()));
  }
  for (int j = 0; j < c.tokens; ++j)
    for (int part = 0; part < parts_of_last; ++part) {
      const size_t slot = size_t(j) * parts_of_last + part;
      ASSERT_TRUE(same_bits(alone.data() + slot * out_size, together.data() + slot * out_size, out_size))
          << "token " << j << " part " << part;
      ASSERT_TRUE(same_bits(max_alone.data() + slot * n_q, max_together.data() + slot * n_q, n_q));
      ASSERT_TRUE(same_bits(sum_alone.data() + slot * n_q, sum_together.data() + slot * n_q, n_q));
    }
}

TEST(CodedAttention, QueriesTogetherGiveEachQuerysOwnBits) {
  std::mt19937 rng(4242);
  const std::vector<std::pair<Spec, Spec>> formats = {{kTq4, kTq4}, {kF16, kF16}, {kQ4, kQ8}, {kTq2, kTq3}, {kF32, kBF16}};
  const std::vector<Chunk> chunks = {
      {0, 20, 0, 0, false, 0},   // a prompt's first chunk, nothing else
      {37, 16, 0, 0, false, 0},  // a later chunk: every query's last tile is short somewhere else
      {50, 19, 4, 24, false, 0}, // windows: each query's recent rows start at its own position
      {45, 9, 4, 8, true, 0},    // windows and the chunk's exact rows
      {70, 13, 4, 24, false, 32},  // parts of 32 rows: tokens have different numbers of parts
      {3, 30, 4, 24, true, 16},  // windows covering the whole start, exact rows, parts
  };
  for (const auto& [ks, vs] : formats)
    for (const Chunk& c : chunks)
      for (const auto& [d, group] : std::vector<std::pair<int, int>>{{64, 3}, {128, 1}, {32, 5}}) {
        if (!spec_fits(ks, d) || !spec_fits(vs, d)) continue;
        check_chunk(ks, vs, d, 2, group, c, rng);
        const bool int8_k = ks.codec == RowCodec::TQ && ks.bits >= 2, int8_v = vs.codec == RowCodec::TQ && vs.bits >= 2;
        if (int8_k) check_chunk(ks, vs, d, 2, group, c, rng, 1);
        if (int8_v) check_chunk(ks, vs, d, 2, group, c, rng, 2);
        if (int8_k && int8_v) check_chunk(ks, vs, d, 2, group, c, rng, 3);
      }
}

TEST(CodedAttention, QueriesOfDifferentSequencesAreRefused) {
  std::mt19937 rng(7);
  const int d = 64;
  const Pages p = build_pages(d, 1, 20, 16, kTq4, kTq4, rng);
  const Pages other = build_pages(d, 1, 20, 16, kTq4, kTq4, rng);
  std::vector<float> q = random_vec(d, rng), out(2 * size_t(d));
  PagedAttentionArgs a[2] = {make_args(p, q.data(), 1, out.data()), make_args(other, q.data(), 1, out.data() + d)};
  if (!paged_attention_fast_avx512_available(a[0])) GTEST_SKIP() << "no AVX-512 on this CPU";
  EXPECT_THROW(paged_attention_fast_avx512_queries(a, 2), Error);
  a[1] = make_args(p, q.data(), 1, out.data() + d);
  a[1].ctx_begin = 3;
  EXPECT_THROW(paged_attention_fast_avx512_queries(a, 2), Error);
  a[1] = make_args(p, q.data(), 1, out.data() + d);
  a[1].int8_key_scores = true;  // one scored in int8, the other in fp32: not one computation
  EXPECT_THROW(paged_attention_fast_avx512_queries(a, 2), Error);
  a[1] = make_args(p, q.data(), 1, out.data() + d);
  a[1].int8_value_sums = true;  // likewise for the value sums
  EXPECT_THROW(paged_attention_fast_avx512_queries(a, 2), Error);
}

}  // namespace
}  // namespace tq
