// Coded attention's newer row and page forms (kernels/paged_attention.h, kernels/coded_row.h):
// TurboQuant rows with an fp16 scale, and full-precision window rows read in place of the pages
// outside a query's coded range.
#include <gtest/gtest.h>

#include <cstring>
#include <utility>
#include <vector>

#include "support/coded_pages_support.h"
#include "errors/error.h"
#include "kernels/paged_attention.h"

namespace tq {
namespace {

using namespace coded_test;

// An fp16-scale TurboQuant row (tq<b>h): the codes of the fp32 row, its scale rounded to fp16;
// every decoder gives levels[idx] * that scale, bit for bit alike.
TEST(CodedRow, Fp16ScaleRows) {
  std::mt19937 rng(13);
  for (int d : {64, 128, 48}) {
    for (int bits = 2; bits <= 4; ++bits) {
      if (!spec_fits(Spec{RowCodec::TQ, bits}, d)) continue;
      SCOPED_TRACE("d=" + std::to_string(d) + " bits=" + std::to_string(bits));
      CodedRowFormat f = format_for(Spec{RowCodec::TQ, bits}, d);
      f.f16_scale = true;
      EXPECT_EQ(coded_row_bytes(f), tq_codes_bytes(d, bits) + 2);
      std::vector<uint8_t> full(tq_row_bytes(d, bits)), row(coded_row_bytes(f) * 3);
      const std::vector<float> x = random_vec(d, rng, 2.5f);
      tq_encode_row(x.data(), codebook_for(d, bits), rotation_for(d, 0), full.data());
      const uint16_t h = tq_scale_to_fp16(tq_row_scale(full.data(), d, bits));
      for (int r = 0; r < 3; ++r) {
        std::memcpy(row.data() + r * coded_row_bytes(f), full.data(), tq_codes_bytes(d, bits));
        std::memcpy(row.data() + r * coded_row_bytes(f) + tq_codes_bytes(d, bits), &h, 2);
      }
      std::vector<uint8_t> idx(d);
      unpack_indices(full.data(), d, bits, idx.data());
      std::vector<float> want(d), got(d), rows(3 * d);
      for (int j = 0; j < d; ++j) want[j] = codebook_for(d, bits).centroids[idx[j]] * fp16_to_fp32(h);
      decode_coded_row_scalar(f, row.data(), got.data());
      EXPECT_EQ(got, want);
      if (!coded_row_avx2_available(f)) continue;
      decode_coded_row_avx2(f, row.data(), got.data());
      EXPECT_EQ(got, want);
      decode_coded_rows_avx2(f, row.data(), coded_row_bytes(f), 3, rows.data(), d);
      for (int r = 0; r < 3; ++r) EXPECT_EQ(std::vector<float>(rows.begin() + r * d, rows.begin() + (r + 1) * d), want);
      if (!coded_row_avx512_available(f)) continue;
      std::fill(rows.begin(), rows.end(), 0.0f);
      decode_coded_rows_avx512(f, row.data(), coded_row_bytes(f), 3, rows.data(), d);
      for (int r = 0; r < 3; ++r) EXPECT_EQ(std::vector<float>(rows.begin() + r * d, rows.begin() + (r + 1) * d), want);
    }
  }
}

// Full-precision windows: positions outside [coded_begin, coded_end) come from the window pages
// (their own blocks, through a data block -> window block map), tile edges and block edges falling anywhere, with parts and exact
// chunk rows on top; every kernel against the reference over the rows each position should read.
TEST(CodedAttention, WindowRowsReplaceThePagesOutsideTheCodedRange) {
  std::mt19937 rng(808);
  const int d = 64, n_kv = 2, n_q = 6, n_ctx = 70;
  for (const auto& [ks, vs] : std::vector<std::pair<Spec, Spec>>{{kTq4, kTq4}, {kTq2, kQ4}, {kF16, kTq3}}) {
    for (const auto& [cb, ce] : std::vector<std::pair<int, int>>{{4, 38}, {0, 70}, {5, 5}, {13, 69}, {30, 20}}) {
      for (int exact_from : {-1, 61}) {
        SCOPED_TRACE("k=" + spec_name(ks) + " v=" + spec_name(vs) + " coded [" + std::to_string(cb) + ", " +
                     std::to_string(ce) + ") exact_from=" + std::to_string(exact_from));
        const Pages p = build_pages(d, n_kv, n_ctx, 16, ks, vs, rng);
        const Pages w = build_pages(d, n_kv, n_ctx, 16, kF16, kF32, rng);
        std::vector<int32_t> window_of(p.k_pages.size() / p.k.block_stride, -1);  // data block -> window block
        for (size_t i = 0; i < p.block_table.size(); ++i) window_of[p.block_table[i]] = w.block_table[i];
        const size_t tail = exact_from < 0 ? 0 : size_t(n_ctx - exact_from) * n_kv * d;
        const std::vector<float> exact_k = random_vec(tail, rng), exact_v = random_vec(tail, rng);
        std::vector<float> k_all(p.k_dec.size()), v_all(p.v_dec.size());
        for (int t = 0; t < n_ctx; ++t) {
          const bool coded = t >= cb && t < ce;
          const size_t at = size_t(t) * n_kv * d, n = size_t(n_kv) * d;
          std::copy_n((coded ? p.k_dec : w.k_dec).begin() + at, n, k_all.begin() + at);
          std::copy_n((coded ? p.v_dec : w.v_dec).begin() + at, n, v_all.begin() + at);
        }
        if (exact_from >= 0) {
          std::copy(exact_k.begin(), exact_k.end(), k_all.begin() + size_t(exact_from) * n_kv * d);
          std::copy(exact_v.begin(), exact_v.end(), v_all.begin() + size_t(exact_from) * n_kv * d);
        }
        const std::vector<float> q = random_vec(size_t(n_q) * d, rng, 1.5f);
        std::vector<float> ref(size_t(n_q) * d);
        attention_reference(q.data(), k_all.data(), v_all.data(), n_q, n_kv, d, n_ctx, 1.0f / std::sqrt(float(d)),
                            ref.data());
        const auto args = [&](float* out) {
          PagedAttentionArgs a = make_args(p, q.data(), n_q, out);
          a.windows = true;
          a.window_k = w.k;
          a.window_v = w.v;
          a.window_k.block_map = a.window_v.block_map = window_of.data();
          a.coded_begin = cb;
          a.coded_end = ce;
          if (exact_from >= 0) {
            a.exact_from = exact_from;
            a.exact_k = exact_k.data();
            a.exact_v = exact_v.data();
          }
          return a;
        };
        expect_kernels_match(args, ref);
        // In two parts split inside the coded range, combined: the same result.
        std::vector<float> parts(2 * ref.size()), stats_max(2 * n_q), stats_sum(2 * n_q), combined(ref.size());
        for (int part = 0; part < 2; ++part) {
          PagedAttentionArgs a = args(parts.data() + part * ref.size());
          a.ctx_begin = part == 0 ? 0 : 27;
          a.n_ctx = part == 0 ? 27 : n_ctx;
          if (a.exact_from > a.n_ctx) a.exact_from = a.n_ctx;  // as the layer does: none in this part
          a.partial_max = stats_max.data() + part * n_q;
          a.partial_sum = stats_sum.data() + part * n_q;
          paged_attention_fast(a);
        }
        combine_attention_parts(2, parts.data(), ref.size(), stats_max.data(), stats_sum.data(), n_q, n_q, d,
                                combined.data());
        EXPECT_LE(relative_diff(combined, ref), 1e-5f);
      }
    }
  }
  std::vector<float> q(64), out(64);
  Pages p = build_pages(64, 1, 4, 16, kTq4, kTq4, rng);
  PagedAttentionArgs a = make_args(p, q.data(), 1, out.data());
  a.windows = true;  // window pages missing
  EXPECT_THROW(paged_attention_exact_scalar(a), Error);
}

}  // namespace
}  // namespace tq
