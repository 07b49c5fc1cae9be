// Tokenizer behaviour beyond the reference vectors: special tokens, BOS, decoding, streaming
// detokenization of split UTF-8 characters, and errors for broken tokenizer files.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "errors/error.h"
#include "support/test_tokenizer_support.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace tq {
namespace {

using test::testdata;

const Tokenizer& qwen2() {
  static const std::unique_ptr<Tokenizer> tok = Tokenizer::from_hf_dir(testdata("qwen2-tokenizer"));
  return *tok;
}
const Tokenizer& gpt2() {
  static const std::unique_ptr<Tokenizer> tok =
      test::load_gguf_tokenizer(testdata("llama.cpp-vocab/ggml-vocab-gpt-2.gguf"));
  return *tok;
}
const Tokenizer& stories() {
  static const std::unique_ptr<Tokenizer> tok = test::load_gguf_tokenizer(testdata("stories260K/stories260K.gguf"));
  return *tok;
}
const Tokenizer& llama_spm() {
  static const std::unique_ptr<Tokenizer> tok =
      test::load_gguf_tokenizer(testdata("llama.cpp-vocab/ggml-vocab-llama-spm.gguf"));
  return *tok;
}

bool contains(const std::vector<TokenId>& ids, TokenId id) { return std::find(ids.begin(), ids.end(), id) != ids.end(); }

TEST(Tokenizer, Qwen2SpecialTokensOnlyWithParseSpecial) {
  TQ_REQUIRE_TESTDATA();
  const std::string chat = "<|im_start|>user\nhi<|im_end|>\n";
  const std::vector<TokenId> parsed = qwen2().encode(chat, true);
  ASSERT_GE(parsed.size(), 4u);
  EXPECT_EQ(parsed.front(), 151644);
  EXPECT_TRUE(contains(parsed, 151645));
  const std::vector<TokenId> raw = qwen2().encode(chat, false);
  EXPECT_FALSE(contains(raw, 151644));
  EXPECT_FALSE(contains(raw, 151645));
  EXPECT_EQ(qwen2().decode(raw), chat);
  EXPECT_EQ(qwen2().decode(parsed), chat);
  EXPECT_EQ(qwen2().decode(parsed, /*skip_special=*/true), "user\nhi\n");
  EXPECT_TRUE(qwen2().is_special(151645));
  EXPECT_FALSE(qwen2().is_special(9707));
  EXPECT_EQ(qwen2().token_text(151644), "<|im_start|>");
  EXPECT_EQ(qwen2().find_token("<|im_end|>"), 151645);
  EXPECT_FALSE(qwen2().find_token("no such token").has_value());
  // <|endoftext|> is an extra end-of-turn id (eos is <|im_end|>).
  EXPECT_TRUE(contains(qwen2().special().eot_ids, 151643));
}

TEST(Tokenizer, UserDefinedTokensAreAlwaysSplitOut) {
  TQ_REQUIRE_TESTDATA();
  // DeepSeek Coder: "<｜fim▁hole｜>" is user-defined (GGUF type 4), "<｜begin▁of▁sentence｜>" is control.
  auto tok = test::load_gguf_tokenizer(testdata("llama.cpp-vocab/ggml-vocab-deepseek-coder.gguf"));
  const std::string hole = "<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>";
  const std::string bos = "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
  ASSERT_EQ(tok->find_token(hole), 32015);
  ASSERT_EQ(tok->find_token(bos), 32013);
  EXPECT_TRUE(contains(tok->encode("a" + hole + "b", false), 32015));
  EXPECT_FALSE(contains(tok->encode("a" + bos + "b", false), 32013));
  EXPECT_TRUE(contains(tok->encode("a" + bos + "b", true), 32013));
  EXPECT_FALSE(tok->is_special(32015));
  EXPECT_TRUE(tok->is_special(32013));
  // Decoding gives their text back (user-defined tokens are not byte-mapped).
  EXPECT_EQ(tok->decode({32015}), hole);
}

TEST(Tokenizer, LongestSpecialTokenWins) {
  TQ_REQUIRE_TESTDATA();
  // "<|im_end|>" must not be read as a shorter token followed by text, and adjacent specials split.
  EXPECT_EQ(qwen2().encode("<|im_end|><|im_end|>", true), (std::vector<TokenId>{151645, 151645}));
  const std::vector<TokenId> partial = qwen2().encode("<|im_end|", true);
  EXPECT_FALSE(contains(partial, 151645));
}

TEST(Tokenizer, EncodePromptAddsBosOnlyWhenConfigured) {
  TQ_REQUIRE_TESTDATA();
  EXPECT_EQ(qwen2().encode_prompt("Hello", true), qwen2().encode("Hello", true));
  const std::vector<TokenId> spm = llama_spm().encode_prompt("Hello", true);
  ASSERT_FALSE(spm.empty());
  EXPECT_EQ(spm.front(), 1);
  EXPECT_EQ(std::vector<TokenId>(spm.begin() + 1, spm.end()), llama_spm().encode("Hello", true));
}

TEST(Tokenizer, SentencePiecePrefixSpaceAndSpecials) {
  TQ_REQUIRE_TESTDATA();
  const Tokenizer& tok = llama_spm();
  const std::vector<TokenId> hello = tok.encode("Hello", false);
  EXPECT_EQ(tok.token_text(hello.front()).substr(0, 3), "\xE2\x96\x81");  // "▁Hello"
  EXPECT_EQ(tok.decode(hello), "Hello");
  // With parse_special, "<s>" is BOS and the text after it gets its own prefix space.
  const std::vector<TokenId> with_bos = tok.encode("<s>Hello", true);
  ASSERT_FALSE(with_bos.empty());
  EXPECT_EQ(with_bos.front(), 1);
  EXPECT_EQ(std::vector<TokenId>(with_bos.begin() + 1, with_bos.end()), hello);
  EXPECT_EQ(tok.decode(with_bos, /*skip_special=*/true), "Hello");
  // Without it, "<s>" is text.
  EXPECT_FALSE(contains(tok.encode("<s>Hello", false), 1));
  EXPECT_EQ(tok.decode(tok.encode("<s>Hello", false)), "<s>Hello");
}

TEST(Tokenizer, SentencePieceByteFallback) {
  TQ_REQUIRE_TESTDATA();
  // stories260K has 512 tokens: CJK is not among them and falls back to <0xNN> byte tokens.
  const Tokenizer& tok = stories();
  const std::vector<TokenId> ids = tok.encode("\xE4\xBD\xA0", false);  // 你
  ASSERT_EQ(ids.size(), 4u);                                           // "▁" + three bytes
  EXPECT_EQ(tok.token_text(ids[1]), "<0xE4>");
  EXPECT_EQ(tok.token_bytes(ids[1]), "\xE4");
  EXPECT_EQ(tok.decode(ids), "\xE4\xBD\xA0");
}

TEST(Tokenizer, TokenIdOutOfRangeThrows) {
  TQ_REQUIRE_TESTDATA();
  EXPECT_THROW(gpt2().token_bytes(gpt2().vocab_size()), Error);
  EXPECT_THROW(gpt2().token_text(-1), Error);
  EXPECT_FALSE(gpt2().is_special(-1));
}

// --- streaming detokenization ---------------------------------------------------------------

std::string stream_all(const Tokenizer& tok, const std::vector<TokenId>& ids, std::vector<std::string>* pieces) {
  StreamDecoder decoder(tok);
  std::string text;
  for (TokenId id : ids) {
    const std::string piece = decoder.push(id);
    EXPECT_EQ(utf8::sanitize(piece), piece) << "emitted invalid or partial UTF-8";
    if (pieces) pieces->push_back(piece);
    text += piece;
  }
  text += decoder.flush();
  return text;
}

TEST(StreamDecoder, HoldsBackSplitCharactersByteLevel) {
  TQ_REQUIRE_TESTDATA();
  const std::string text = "\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C \xF0\x9F\x98\x80!";  // 你好世界 😀!
  const std::vector<TokenId> ids = gpt2().encode(text, false);
  ASSERT_GT(ids.size(), 6u);  // GPT-2 spells these characters with byte tokens
  std::vector<std::string> pieces;
  EXPECT_EQ(stream_all(gpt2(), ids, &pieces), text);
  // The first token of 你 carries only two of its three bytes: nothing is emitted for it.
  EXPECT_EQ(pieces.front(), "");
}

TEST(StreamDecoder, HoldsBackSplitCharactersSentencePiece) {
  TQ_REQUIRE_TESTDATA();
  const std::string text = "Once \xE4\xBD\xA0 upon \xF0\x9F\x98\x80 a time";
  const std::vector<TokenId> ids = stories().encode_prompt(text, false);
  std::vector<std::string> pieces;
  // BOS is skipped and the prefix space of the first piece is dropped.
  EXPECT_EQ(stream_all(stories(), ids, &pieces), text);
  EXPECT_EQ(stories().decode(ids, true), text);
}

TEST(StreamDecoder, InvalidBytesBecomeReplacementCharacters) {
  TQ_REQUIRE_TESTDATA();
  const Tokenizer& tok = stories();
  const TokenId e4 = *tok.find_token("<0xE4>");
  const TokenId bd = *tok.find_token("<0xBD>");
  const TokenId ff = *tok.find_token("<0xFF>");
  const TokenId a = *tok.find_token("<0x41>");
  {
    StreamDecoder d(tok);
    EXPECT_EQ(d.push(e4), "");
    EXPECT_EQ(d.push(bd), "");
    EXPECT_EQ(d.flush(), "\xEF\xBF\xBD");  // a truncated character is one U+FFFD
    EXPECT_EQ(d.flush(), "");
  }
  {
    StreamDecoder d(tok);
    EXPECT_EQ(d.push(ff), "\xEF\xBF\xBD");  // 0xFF can never start a character
    EXPECT_EQ(d.push(e4), "");
    EXPECT_EQ(d.push(a), "\xEF\xBF\xBD" "A");  // the interrupted character is given up
  }
}

TEST(StreamDecoder, SkipsSpecialTokens) {
  TQ_REQUIRE_TESTDATA();
  StreamDecoder d(qwen2());
  std::string text;
  for (TokenId id : qwen2().encode("<|im_start|>assistant\nHi!<|im_end|>", true)) text += d.push(id);
  text += d.flush();
  EXPECT_EQ(text, "assistant\nHi!");
  StreamDecoder keep(qwen2(), /*skip_special=*/false);
  EXPECT_EQ(keep.push(151645), "<|im_end|>");
}

TEST(Utf8, SanitizeAndEmittablePrefix) {
  EXPECT_EQ(utf8::sanitize("a\xC3\xA9z"), "a\xC3\xA9z");
  EXPECT_EQ(utf8::sanitize("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");             // overlong
  EXPECT_EQ(utf8::sanitize("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(utf8::sanitize("\xF0\x9F\x98"), "\xEF\xBF\xBD");
  EXPECT_EQ(utf8::emittable_prefix_length("ab\xF0\x9F\x98"), 2u);
  EXPECT_EQ(utf8::emittable_prefix_length("ab\xF0\x9F\x98\x80"), 6u);
  EXPECT_EQ(utf8::emittable_prefix_length("\xFF"), 1u);
  EXPECT_EQ(utf8::nfc("e\xCC\x81"), "\xC3\xA9");
}

// --- broken tokenizer files -----------------------------------------------------------------

class BrokenTokenizerFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tq_broken_tokenizer_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void write(const std::string& name, const std::string& content) { std::ofstream(dir_ / name) << content; }

  // Loading must throw tq::Error whose message names `file` and contains `problem`.
  void expect_error(const std::string& file, const std::string& problem) {
    try {
      Tokenizer::from_hf_dir(dir_.string());
      ADD_FAILURE() << "no error for " << file;
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find((dir_ / file).string()), std::string::npos) << message;
      EXPECT_NE(message.find(problem), std::string::npos) << message;
    }
  }

  std::filesystem::path dir_;
};

std::string replace_first(std::string text, const std::string& from, const std::string& to) {
  const size_t pos = text.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  return pos == std::string::npos ? text : text.replace(pos, from.size(), to);
}

const char* const kValidTokenizerJson = R"({
  "added_tokens": [{"id": 3, "content": "<eos>", "special": true}],
  "normalizer": null,
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
  "decoder": {"type": "ByteLevel"},
  "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}
})";

TEST_F(BrokenTokenizerFiles, ValidMinimalFileLoads) {
  write("tokenizer.json", kValidTokenizerJson);
  auto tok = Tokenizer::from_hf_dir(dir_.string());
  EXPECT_EQ(tok->encode("abab<eos>", true), (std::vector<TokenId>{2, 2, 3}));
  EXPECT_EQ(tok->vocab_size(), 4);
}

TEST_F(BrokenTokenizerFiles, TruncatedJson) {
  const std::string full = kValidTokenizerJson;
  write("tokenizer.json", full.substr(0, full.size() / 2));
  expect_error("tokenizer.json", "invalid JSON");
}

TEST_F(BrokenTokenizerFiles, GarbledBytes) {
  write("tokenizer.json", std::string("\x00\xFF\xFEgarbage{{", 12));
  expect_error("tokenizer.json", "invalid JSON");
}

TEST_F(BrokenTokenizerFiles, WrongStructure) {
  write("tokenizer.json", replace_first(kValidTokenizerJson, R"({"a": 0, "b": 1, "ab": 2})", "[1, 2]"));
  expect_error("tokenizer.json", "model.vocab");
}

TEST_F(BrokenTokenizerFiles, WrongFieldType) {
  write("tokenizer.json", replace_first(kValidTokenizerJson, R"("id": 3)", R"("id": "three")"));
  expect_error("tokenizer.json", "must be an integer");
}

TEST_F(BrokenTokenizerFiles, UnsupportedModelType) {
  write("tokenizer.json", R"({"model": {"type": "WordPiece", "vocab": {}}})");
  expect_error("tokenizer.json", "WordPiece");
}

TEST_F(BrokenTokenizerFiles, UnsupportedNormalizer) {
  write("tokenizer.json", replace_first(kValidTokenizerJson, R"("normalizer": null)", R"("normalizer": {"type": "NFKC"})"));
  expect_error("tokenizer.json", "NFKC");
}

TEST_F(BrokenTokenizerFiles, UnsupportedPreTokenizer) {
  write("tokenizer.json",
        replace_first(kValidTokenizerJson, R"("type": "ByteLevel", "add_prefix_space")", R"("type": "Whitespace", "x")"));
  expect_error("tokenizer.json", "Whitespace");
}

TEST_F(BrokenTokenizerFiles, BadRegex) {
  write("tokenizer.json",
        replace_first(kValidTokenizerJson, R"("type": "ByteLevel", "add_prefix_space": false, "use_regex": true)",
                      R"("type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "(unclosed"},)"
                      R"( "behavior": "Isolated"}, {"type": "ByteLevel", "use_regex": false}])"));
  try {
    Tokenizer::from_hf_dir(dir_.string());
    ADD_FAILURE() << "no error for a bad regex";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(unclosed"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find((dir_ / "tokenizer.json").string()), std::string::npos) << e.what();
  }
}

TEST_F(BrokenTokenizerFiles, TruncatedTokenizerConfig) {
  write("tokenizer.json", kValidTokenizerJson);
  write("tokenizer_config.json", R"({"eos_token": "<eos>", "add_bos)");
  expect_error("tokenizer_config.json", "invalid JSON");
}

TEST_F(BrokenTokenizerFiles, EosNotInVocabulary) {
  write("tokenizer.json", kValidTokenizerJson);
  write("tokenizer_config.json", R"({"eos_token": "<|missing|>"})");
  expect_error("tokenizer_config.json", "<|missing|>");
}

TEST_F(BrokenTokenizerFiles, BadMergesLine) {
  write("vocab.json", R"({"a": 0, "b": 1, "ab": 2})");
  write("merges.txt", "#version: 0.2\na b\nnospace\n");
  expect_error("merges.txt", ":3:");
}

TEST_F(BrokenTokenizerFiles, EmptyDirectory) {
  try {
    Tokenizer::from_hf_dir(dir_.string());
    ADD_FAILURE() << "no error for an empty directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir_.string()), std::string::npos) << e.what();
  }
}

// Malformed ids and JSON types in every tokenizer file: a tq::Error naming that file (never a
// bare json::exception, never a message without the file, never a multi-gigabyte allocation).
struct BrokenFilesCase {
  const char* label;
  std::vector<std::pair<std::string, std::string>> files;  // name -> content
  std::string file;                                        // the file the error must name
  std::string problem;                                     // and text it must contain
};

TEST_F(BrokenTokenizerFiles, MalformedIdsAndTypesNameTheFile) {
  const std::string valid = kValidTokenizerJson;
  const std::string vocab = R"({"a": 0, "b": 1, "ab": 2})";
  const std::string merges = "#version: 0.2\na b\n";
  const std::vector<BrokenFilesCase> cases = {
      // tokenizer.json
      {"huge_vocab_id", {{"tokenizer.json", replace_first(valid, R"("ab": 2)", R"("ab": 2000000000)")}},
       "tokenizer.json", "2000000000"},
      {"int64_vocab_id", {{"tokenizer.json", replace_first(valid, R"("ab": 2)", R"("ab": 4294967298)")}},
       "tokenizer.json", "4294967298"},
      {"negative_vocab_id", {{"tokenizer.json", replace_first(valid, R"("ab": 2)", R"("ab": -1)")}},
       "tokenizer.json", "-1"},
      {"float_vocab_id", {{"tokenizer.json", replace_first(valid, R"("ab": 2)", R"("ab": 2.5)")}},
       "tokenizer.json", "integer"},
      {"huge_added_id", {{"tokenizer.json", replace_first(valid, R"("id": 3)", R"("id": 2000000000)")}},
       "tokenizer.json", "2000000000"},
      {"negative_added_id", {{"tokenizer.json", replace_first(valid, R"("id": 3)", R"("id": -7)")}},
       "tokenizer.json", "-7"},
      {"added_tokens_object",
       {{"tokenizer.json", replace_first(valid, R"([{"id": 3, "content": "<eos>", "special": true}])", "{}")}},
       "tokenizer.json", "added_tokens"},
      {"added_token_without_content",
       {{"tokenizer.json", replace_first(valid, R"("content": "<eos>")", R"("text": "<eos>")")}},
       "tokenizer.json", "content"},
      {"added_token_bad_flag", {{"tokenizer.json", replace_first(valid, R"("special": true)", R"("special": "yes")")}},
       "tokenizer.json", "structure"},
      {"config_not_object", {{"tokenizer.json", valid}, {"tokenizer_config.json", "[1, 2]"}},
       "tokenizer_config.json", "object"},
      // vocab.json + merges.txt (+ added_tokens.json, tokenizer_config.json)
      {"vocab_huge_id", {{"vocab.json", R"({"a": 0, "b": 2000000000})"}, {"merges.txt", merges}},
       "vocab.json", "2000000000"},
      {"vocab_negative_id", {{"vocab.json", R"({"a": 0, "b": -3})"}, {"merges.txt", merges}},
       "vocab.json", "-3"},
      {"vocab_string_id", {{"vocab.json", R"({"a": 0, "b": "1"})"}, {"merges.txt", merges}},
       "vocab.json", "integer"},
      {"vocab_not_object", {{"vocab.json", R"(["a", "b"])"}, {"merges.txt", merges}}, "vocab.json", "object"},
      {"added_huge_id",
       {{"vocab.json", vocab}, {"merges.txt", merges}, {"added_tokens.json", R"({"<x>": 2000000000})"}},
       "added_tokens.json", "2000000000"},
      {"added_int64_id",
       {{"vocab.json", vocab}, {"merges.txt", merges}, {"added_tokens.json", R"({"<x>": 4294967299})"}},
       "added_tokens.json", "4294967299"},
      {"added_string_id",
       {{"vocab.json", vocab}, {"merges.txt", merges}, {"added_tokens.json", R"({"<x>": "3"})"}},
       "added_tokens.json", "integer"},
      {"added_negative_id",
       {{"vocab.json", vocab}, {"merges.txt", merges}, {"added_tokens.json", R"({"<x>": -1})"}},
       "added_tokens.json", "-1"},
      {"added_not_object", {{"vocab.json", vocab}, {"merges.txt", merges}, {"added_tokens.json", R"([3])"}},
       "added_tokens.json", "object"},
      {"added_invalid_json", {{"vocab.json", vocab}, {"merges.txt", merges}, {"added_tokens.json", R"({"<x>": )"}},
       "added_tokens.json", "invalid JSON"},
      {"decoder_bad_key",
       {{"vocab.json", vocab},
        {"merges.txt", merges},
        {"tokenizer_config.json", R"({"added_tokens_decoder": {"three": {"content": "<x>"}}})"}},
       "tokenizer_config.json", "three"},
      {"decoder_huge_id",
       {{"vocab.json", vocab},
        {"merges.txt", merges},
        {"tokenizer_config.json", R"({"added_tokens_decoder": {"2000000000": {"content": "<x>"}}})"}},
       "tokenizer_config.json", "2000000000"},
      {"decoder_id_beyond_int64",
       {{"vocab.json", vocab},
        {"merges.txt", merges},
        {"tokenizer_config.json", R"({"added_tokens_decoder": {"99999999999999999999": {"content": "<x>"}}})"}},
       "tokenizer_config.json", "99999999999999999999"},
      {"decoder_entry_not_object",
       {{"vocab.json", vocab},
        {"merges.txt", merges},
        {"tokenizer_config.json", R"({"added_tokens_decoder": {"3": 5}})"}},
       "tokenizer_config.json", "content"},
      {"decoder_bad_flag",
       {{"vocab.json", vocab},
        {"merges.txt", merges},
        {"tokenizer_config.json", R"({"added_tokens_decoder": {"3": {"content": "<x>", "lstrip": 1}}})"}},
       "tokenizer_config.json", "added_tokens_decoder"},
      {"decoder_not_object",
       {{"vocab.json", vocab}, {"merges.txt", merges}, {"tokenizer_config.json", R"({"added_tokens_decoder": [1]})"}},
       "tokenizer_config.json", "added_tokens_decoder"},
      {"slow_config_not_object",
       {{"vocab.json", vocab}, {"merges.txt", merges}, {"tokenizer_config.json", R"("GPT2Tokenizer")"}},
       "tokenizer_config.json", "object"},
  };
  for (const BrokenFilesCase& c : cases) {
    SCOPED_TRACE(c.label);
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    for (const auto& [name, content] : c.files) write(name, content);
    try {
      Tokenizer::from_hf_dir(dir_.string());
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find((dir_ / c.file).string()), std::string::npos) << message;
      EXPECT_NE(message.find(c.problem), std::string::npos) << message;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not a tq::Error: " << e.what();
    }
  }
}

// The id bound leaves room for a few holes: sparse but sane ids still load.
TEST_F(BrokenTokenizerFiles, SmallIdGapsAreAccepted) {
  write("vocab.json", R"({"a": 0, "b": 1, "ab": 2})");
  write("merges.txt", "a b\n");
  write("added_tokens.json", R"({"<x>": 40})");
  auto tok = Tokenizer::from_hf_dir(dir_.string());
  EXPECT_EQ(tok->vocab_size(), 41);
  EXPECT_EQ(tok->encode("ab<x>", true), (std::vector<TokenId>{2, 40}));
}

// --- locating the SmolLM2 GGUF --------------------------------------------------------------

// Sets an environment variable for the scope, restoring the previous value afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// The site-packages scan falls back to tq::find_default_model() (here found through
// $TQSERVE_MODEL), which only counts when it names a SmolLM2 file.
TEST(SmolLm2Lookup, FallsBackToFindDefaultModel) {
  const auto dir = std::filesystem::temp_directory_path() / ("tq_smollm2_lookup_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string smollm2 = (dir / "SmolLM2-135M-Instruct.Q4_1.gguf").string();
  const std::string other = (dir / "other-model.gguf").string();
  std::ofstream(smollm2) << "x";
  std::ofstream(other) << "x";
  ScopedEnv no_override("TQSERVE_SMOLLM2_GGUF", nullptr);
  {
    ScopedEnv model("TQSERVE_MODEL", smollm2.c_str());
    const std::optional<std::string> found = test::find_smollm2_gguf();
    ASSERT_TRUE(found.has_value());  // the installed package, or else the fallback
    EXPECT_NE(found->find("SmolLM2"), std::string::npos) << *found;
  }
  {
    ScopedEnv model("TQSERVE_MODEL", other.c_str());
    const std::optional<std::string> found = test::find_smollm2_gguf();
    if (found) EXPECT_NE(*found, other);
  }
  std::filesystem::remove_all(dir);
}

// --- pre-tokenizer matching errors ----------------------------------------------------------

// Catastrophic backtracking hits PCRE2's match limit. That used to end the split silently (the
// rest of the text became one piece); it must be an error naming the regex and PCRE2's reason.
TEST(PreTokenizerErrors, MatchLimitIsAnError) {
  const std::string pattern = R"((?:a+)+\d)";
  PreTokenizer pre({pattern});
  EXPECT_EQ(pre.split("aa1b"), (std::vector<std::string_view>{"aa1", "b"}));
  const std::string text = "x" + std::string(40, 'a') + "!";
  try {
    pre.split(text);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(pattern), std::string::npos) << message;
    EXPECT_NE(message.find("limit"), std::string::npos) << message;
  }
}

// --- GGUF tokenizer metadata ----------------------------------------------------------------

// Writes a tensor-less GGUF v3 file with the given tokenizer metadata.
class GgufWriter {
 public:
  GgufWriter& string(const std::string& key, const std::string& value) {
    begin(key, 8);
    put_string(value);
    return *this;
  }
  GgufWriter& strings(const std::string& key, const std::vector<std::string>& values) {
    begin(key, 9);
    put<uint32_t>(8);
    put<uint64_t>(values.size());
    for (const std::string& v : values) put_string(v);
    return *this;
  }
  GgufWriter& int32s(const std::string& key, const std::vector<int32_t>& values) {
    begin(key, 9);
    put<uint32_t>(5);
    put<uint64_t>(values.size());
    for (int32_t v : values) put<int32_t>(v);
    return *this;
  }
  GgufWriter& uint32(const std::string& key, uint32_t value) {
    begin(key, 4);
    put<uint32_t>(value);
    return *this;
  }
  void save(const std::string& path) const {
    std::string file = "GGUF";
    append(file, uint32_t{3});
    append(file, uint64_t{0});  // tensors
    append(file, count_);
    file += body_;
    file.resize((file.size() + 31) / 32 * 32, '\0');
    std::ofstream(path, std::ios::binary) << file;
  }

 private:
  template <typename T>
  static void append(std::string& out, T value) {
    char bytes[sizeof(T)];
    std::memcpy(bytes, &value, sizeof(T));
    out.append(bytes, sizeof(T));
  }
  template <typename T>
  void put(T value) { append(body_, value); }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    body_ += s;
  }
  void begin(const std::string& key, uint32_t type) {
    put_string(key);
    put<uint32_t>(type);
    ++count_;
  }
  std::string body_;
  uint64_t count_ = 0;
};

class GgufTokenizerMetadata : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() /
             ("tq_tokenizer_" + std::to_string(::getpid()) + "_" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".gguf"))
                .string();
  }
  void TearDown() override { std::filesystem::remove(path_); }

  // A four-token byte-level BPE vocabulary: "a", "b", "ab", "<|im_end|>".
  GgufWriter byte_level_vocab(const std::string& model) const {
    GgufWriter w;
    w.string("tokenizer.ggml.model", model)
        .strings("tokenizer.ggml.tokens", {"a", "b", "ab", "<|im_end|>"})
        .int32s("tokenizer.ggml.token_type", {1, 1, 1, 1});
    return w;
  }

  std::string load_error() const {
    try {
      test::load_gguf_tokenizer(path_);
    } catch (const Error& e) {
      return e.what();
    }
    ADD_FAILURE() << "no error";
    return std::string();
  }

  std::string path_;
};

TEST_F(GgufTokenizerMetadata, UnknownPreTokenizerFallsBackToGpt2) {
  byte_level_vocab("gpt2")
      .string("tokenizer.ggml.pre", "some-future-model")
      .strings("tokenizer.ggml.merges", {"a b"})
      .uint32("tokenizer.ggml.eos_token_id", 3)
      .save(path_);
  auto tok = test::load_gguf_tokenizer(path_);
  // In " a" the space has no byte token ("Ġ") and is dropped, as llama.cpp does.
  EXPECT_EQ(tok->encode("abab a", false), (std::vector<TokenId>{2, 2, 0}));
  EXPECT_EQ(tok->encode("ab<|im_end|>", true), (std::vector<TokenId>{2, 3}));
  // <|im_end|> is typed normal in this file but, as in llama.cpp, treated as a control token.
  EXPECT_TRUE(tok->is_special(3));
  EXPECT_EQ(tok->special().eos, 3);
}

TEST_F(GgufTokenizerMetadata, UnsupportedModel) {
  byte_level_vocab("bert").save(path_);
  const std::string message = load_error();
  EXPECT_NE(message.find(path_), std::string::npos) << message;
  EXPECT_NE(message.find("'bert'"), std::string::npos) << message;
}

TEST_F(GgufTokenizerMetadata, MissingMerges) {
  byte_level_vocab("gpt2").string("tokenizer.ggml.pre", "gpt-2").save(path_);
  const std::string message = load_error();
  EXPECT_NE(message.find(path_), std::string::npos) << message;
  EXPECT_NE(message.find("tokenizer.ggml.merges"), std::string::npos) << message;
}

TEST_F(GgufTokenizerMetadata, MissingTokens) {
  GgufWriter().string("tokenizer.ggml.model", "gpt2").save(path_);
  const std::string message = load_error();
  EXPECT_NE(message.find(path_), std::string::npos) << message;
  EXPECT_NE(message.find("tokenizer.ggml.tokens"), std::string::npos) << message;
}

TEST_F(GgufTokenizerMetadata, ShortTokenTypeArray) {
  GgufWriter()
      .string("tokenizer.ggml.model", "llama")
      .strings("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>"})
      .int32s("tokenizer.ggml.token_type", {2, 3})
      .save(path_);
  const std::string message = load_error();
  EXPECT_NE(message.find("token_type"), std::string::npos) << message;
}

}  // namespace
}  // namespace tq
