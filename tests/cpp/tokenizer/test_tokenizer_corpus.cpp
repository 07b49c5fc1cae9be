// tests/data/tokenizer_corpus.json: several hundred varied strings (scripts, emoji sequences,
// CJK, code, whitespace runs, numbers, contractions, special-token-like text) with the ids of the
// Hugging Face tokenizers (tools/gen_tokenizer_golden.py). Every encoding must match exactly.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/test_tokenizer_support.h"

namespace tq {
namespace {

const nlohmann::json& corpus() {
  static const nlohmann::json doc = [] {
    const std::string path = std::string(TQ_SOURCE_DIR) + "/tests/data/tokenizer_corpus.json";
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error(path + ": cannot open");
    std::ostringstream s;
    s << in.rdbuf();
    return nlohmann::json::parse(s.str());
  }();
  return doc;
}

// Compares both encodings ("raw": special tokens as text, "special": parsed) of every case;
// reports each mismatch and returns their number. `round_trip`: decoding the raw ids must
// give the text back (not for NFC-normalizing tokenizers).
int check_corpus(const Tokenizer& tok, const std::string& name, bool round_trip) {
  int mismatches = 0;
  int checked = 0;
  for (const auto& c : corpus()["cases"]) {
    const std::string text = c["text"];
    for (const char* mode : {"raw", "special"}) {
      const auto expected = c[name][mode].get<std::vector<TokenId>>();
      const std::vector<TokenId> ids = tok.encode(text, std::string(mode) == "special");
      ++checked;
      if (ids != expected) {
        ++mismatches;
        ADD_FAILURE() << name << " (" << mode << "): text " << nlohmann::json(text).dump() << "\n  expected"
                      << test::format_ids(expected) << "\n  got     " << test::format_ids(ids);
      } else if (round_trip && std::string(mode) == "raw") {
        EXPECT_EQ(tok.decode(ids), text) << name;
      }
    }
  }
  EXPECT_GE(checked, 600) << "corpus has fewer than 300 strings";
  return mismatches;
}

TEST(TokenizerCorpus, HasEnoughVariedStrings) { EXPECT_GE(corpus()["cases"].size(), 300u); }

TEST(TokenizerCorpus, Qwen2) {
  TQ_REQUIRE_TESTDATA();
  auto tok = Tokenizer::from_hf_dir(test::testdata("qwen2-tokenizer"));
  EXPECT_EQ(check_corpus(*tok, "qwen2", false), 0);
}

TEST(TokenizerCorpus, SmolLm2) {
  TQ_REQUIRE_SMOLLM2_GGUF(gguf);
  auto tok = test::load_gguf_tokenizer(gguf);
  EXPECT_EQ(check_corpus(*tok, "smollm2", true), 0);
}

TEST(TokenizerCorpus, Stories260K) {
  TQ_REQUIRE_TESTDATA();
  auto tok = test::load_gguf_tokenizer(test::testdata("stories260K/stories260K.gguf"));
  EXPECT_EQ(check_corpus(*tok, "stories260K", true), 0);
}

// The same tokenizer as a SentencePiece-style tokenizer.json (merges instead of scores,
// Prepend/Replace normalizer, byte fallback, BOS from the post-processor).
TEST(TokenizerCorpus, Stories260KFromTokenizerJson) {
  auto tok = Tokenizer::from_hf_dir(std::string(TQ_SOURCE_DIR) + "/tests/data/stories260K-hf");
  EXPECT_EQ(check_corpus(*tok, "stories260K", true), 0);
  EXPECT_EQ(tok->special().bos, 1);
  EXPECT_TRUE(tok->special().add_bos);
  EXPECT_TRUE(tok->strips_leading_space());
}

// transformers' own conversion of it: Metaspace(prepend_scheme = "first"), which adds no '▁'
// to text already starting with a space or following a special token.
TEST(TokenizerCorpus, Stories260KMetaspaceTokenizerJson) {
  auto tok = Tokenizer::from_hf_dir(std::string(TQ_SOURCE_DIR) + "/tests/data/stories260K-hf-metaspace");
  EXPECT_EQ(check_corpus(*tok, "stories260K-metaspace", false), 0);
}

}  // namespace
}  // namespace tq
