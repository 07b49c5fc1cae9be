// The codebook a KV row codec codes TurboQuant rows with (kv/kv_row_codec.h): the levels the
// integer attention arithmetic holds whenever a path that reads them is on (2 to 4 bits: key
// scores or value sums), the Lloyd-Max levels otherwise.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/tq_key_scores.h"
#include "kv/kv_row_codec.h"
#include "quant/codebook.h"

namespace tq {
namespace {

std::vector<float> codec_levels(KvDtype dtype, int d, bool keys, bool values) {
  KvQuantOptions o;
  o.int8_key_scores = keys;
  o.int8_value_sums = values;
  const KvRowCodec codec(dtype, d, 0, o);
  const CodedRowFormat f = codec.row_format();
  return std::vector<float>(f.levels, f.levels + (1 << f.bits));
}

TEST(KvRowCodecLevels, LevelsOnTheInt8GridWithIntegerArithmetic) {
  for (int d : {64, 128}) {
    const CodebookKind kind = KvQuantOptions{}.codebook;
    const Codebook lloyd_max = make_codebook(kind, d, 4);
    const Codebook snapped = snapped_to_int8_grid(lloyd_max);
    ASSERT_NE(snapped.centroids, lloyd_max.centroids);
    for (KvDtype dtype : {KvDtype::TQ4, KvDtype::TQ4H}) {
      EXPECT_EQ(codec_levels(dtype, d, true, true), snapped.centroids);
      EXPECT_EQ(codec_levels(dtype, d, true, false), snapped.centroids);
      EXPECT_EQ(codec_levels(dtype, d, false, true), snapped.centroids);
      EXPECT_EQ(codec_levels(dtype, d, false, false), lloyd_max.centroids);
      // The int8 form the kernels make of the snapped levels is those levels.
      const std::vector<float> l = codec_levels(dtype, d, true, true);
      const Int8Levels l8 = int8_levels(l.data());
      for (int k = 0; k < 16; ++k) EXPECT_EQ(l8.c8[k] * l8.scale, l[k]) << "d=" << d << " level " << k;
    }
    for (int bits : {2, 3}) {
      const KvDtype dtype = bits == 3 ? KvDtype::TQ3H : KvDtype::TQ2H;
      const Codebook lloyd_max_b = make_codebook(kind, d, bits);
      const Codebook snapped_b = snapped_to_int8_grid(lloyd_max_b);
      ASSERT_NE(snapped_b.centroids, lloyd_max_b.centroids);
      EXPECT_EQ(codec_levels(dtype, d, true, true), snapped_b.centroids);
      EXPECT_EQ(codec_levels(dtype, d, false, true), snapped_b.centroids);
      EXPECT_EQ(codec_levels(dtype, d, true, false), snapped_b.centroids);
      EXPECT_EQ(codec_levels(dtype, d, false, false), lloyd_max_b.centroids);
      const std::vector<float> l = codec_levels(dtype, d, true, true);
      const Int8Levels l8 = int8_levels(l.data(), 1 << bits);
      for (int k = 0; k < (1 << bits); ++k) EXPECT_EQ(l8.c8[k] * l8.scale, l[k]) << "bits=" << bits << " level " << k;
    }
  }
}

}  // namespace
}  // namespace tq
