// llama.cpp's tokenizer test vectors (models/ggml-vocab-*.gguf.inp/.out, generated with the
// Hugging Face tokenizers) and other reference encodings, all of which must match exactly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/test_tokenizer_support.h"

namespace tq {
namespace {

using test::format_ids;
using test::testdata;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct VocabCase {
  std::string text;
  std::vector<TokenId> ids;
};

// .inp: texts each followed by "\n__ggml_vocab_test__\n"; .out: one line of " id id ..." each.
std::vector<VocabCase> read_vocab_cases(const std::string& name) {
  const std::string base = testdata("llama.cpp-vocab/ggml-vocab-" + name + ".gguf");
  const std::string inp = read_all(base + ".inp");
  const std::string out = read_all(base + ".out");
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<VocabCase> cases;
  size_t pos = 0;
  while (true) {
    const size_t next = inp.find(separator, pos);
    if (next == std::string::npos) break;
    cases.push_back({inp.substr(pos, next - pos), {}});
    pos = next + separator.size();
  }
  std::istringstream lines(out);
  std::string line;
  size_t index = 0;
  while (std::getline(lines, line) && index < cases.size()) {
    std::istringstream ids(line);
    TokenId id;
    while (ids >> id) cases[index].ids.push_back(id);
    ++index;
  }
  EXPECT_EQ(index, cases.size()) << base << ".out has fewer lines than tests";
  return cases;
}

// Encodes every case raw (no BOS, special tokens not parsed) and checks the ids; also checks
// that decoding gives the text back where the vocabulary can represent it.
int check_vocab_cases(const Tokenizer& tok, const std::string& name, bool check_round_trip) {
  const std::vector<VocabCase> cases = read_vocab_cases(name);
  int mismatches = 0;
  for (const VocabCase& c : cases) {
    const std::vector<TokenId> ids = tok.encode(c.text, /*parse_special=*/false);
    if (ids != c.ids) {
      ++mismatches;
      ADD_FAILURE() << name << ": text '" << c.text << "'\n  expected" << format_ids(c.ids) << "\n  got     "
                    << format_ids(ids);
    } else if (check_round_trip) {
      EXPECT_EQ(tok.decode(ids), c.text) << name;
    }
  }
  EXPECT_GE(cases.size(), 46u) << name;
  return mismatches;
}

TEST(TokenizerVectors, Qwen2FromVocabJsonAndMerges) {
  TQ_REQUIRE_TESTDATA();
  auto tok = Tokenizer::from_hf_dir(testdata("qwen2-tokenizer"));
  // NFC changes some inputs, so decoding does not always give them back.
  EXPECT_EQ(check_vocab_cases(*tok, "qwen2", false), 0);
  EXPECT_EQ(tok->vocab_size(), 151646);
  EXPECT_EQ(tok->special().eos, 151645);
  EXPECT_EQ(tok->special().pad, 151643);
  EXPECT_FALSE(tok->special().bos.has_value());
  EXPECT_FALSE(tok->special().add_bos);
}

// The same vocabulary written as a tokenizer.json the way Qwen2's is (NFC + Split + ByteLevel),
// once with "a b" merges and once with ["a", "b"] merges.
void write_qwen2_tokenizer_json(const std::filesystem::path& dir, bool array_merges) {
  using nlohmann::json;
  std::filesystem::create_directories(dir);
  json vocab = json::parse(read_all(testdata("qwen2-tokenizer/vocab.json")));
  json merges = json::array();
  std::istringstream lines(read_all(testdata("qwen2-tokenizer/merges.txt")));
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    if (array_merges) {
      const size_t space = line.find(' ', 1);
      merges.push_back(json::array({line.substr(0, space), line.substr(space + 1)}));
    } else {
      merges.push_back(line);
    }
  }
  json added = json::array();
  for (auto [text, id] : {std::pair{"<|endoftext|>", 151643}, {"<|im_start|>", 151644}, {"<|im_end|>", 151645}}) {
    added.push_back({{"id", id}, {"content", text}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", true}});
  }
  const std::string pattern =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  json root = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         json::array({{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
                      {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}})}}},
      {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", ""},
        {"end_of_word_suffix", ""}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
        {"vocab", vocab}, {"merges", merges}}},
  };
  std::ofstream(dir / "tokenizer.json") << root.dump();
  std::filesystem::copy_file(testdata("qwen2-tokenizer/tokenizer_config.json"), dir / "tokenizer_config.json",
                             std::filesystem::copy_options::overwrite_existing);
}

TEST(TokenizerVectors, Qwen2FromTokenizerJson) {
  TQ_REQUIRE_TESTDATA();
  for (bool array_merges : {false, true}) {
    const auto dir = std::filesystem::temp_directory_path() /
                     ("tq_qwen2_tokenizer_json_" + std::to_string(::getpid()) + (array_merges ? "_array" : "_string"));
    write_qwen2_tokenizer_json(dir, array_merges);
    auto tok = Tokenizer::from_hf_dir(dir.string());
    EXPECT_EQ(check_vocab_cases(*tok, "qwen2", false), 0) << (array_merges ? "array merges" : "string merges");
    EXPECT_EQ(tok->special().eos, 151645);
    std::filesystem::remove_all(dir);
  }
}

TEST(TokenizerVectors, Gpt2Gguf) {
  TQ_REQUIRE_TESTDATA();
  auto tok = test::load_gguf_tokenizer(testdata("llama.cpp-vocab/ggml-vocab-gpt-2.gguf"));
  EXPECT_EQ(check_vocab_cases(*tok, "gpt-2", true), 0);
}

TEST(TokenizerVectors, DeepseekLlmGguf) {
  TQ_REQUIRE_TESTDATA();
  auto tok = test::load_gguf_tokenizer(testdata("llama.cpp-vocab/ggml-vocab-deepseek-llm.gguf"));
  EXPECT_EQ(check_vocab_cases(*tok, "deepseek-llm", true), 0);
  EXPECT_EQ(tok->special().bos, 100000);
  EXPECT_TRUE(tok->special().add_bos);
}

TEST(TokenizerVectors, DeepseekCoderGguf) {
  TQ_REQUIRE_TESTDATA();
  auto tok = test::load_gguf_tokenizer(testdata("llama.cpp-vocab/ggml-vocab-deepseek-coder.gguf"));
  EXPECT_EQ(check_vocab_cases(*tok, "deepseek-coder", true), 0);
}

TEST(TokenizerVectors, LlamaSpmGguf) {
  TQ_REQUIRE_TESTDATA();
  auto tok = test::load_gguf_tokenizer(testdata("llama.cpp-vocab/ggml-vocab-llama-spm.gguf"));
  EXPECT_EQ(check_vocab_cases(*tok, "llama-spm", true), 0);
  EXPECT_EQ(tok->special().bos, 1);
  EXPECT_EQ(tok->special().eos, 2);
  EXPECT_EQ(tok->special().unk, 0);
  EXPECT_TRUE(tok->special().add_bos);
}

// Hugging Face GPT-2 ids of 36 multilingual / emoji / maths strings.
TEST(TokenizerVectors, HfGpt2References) {
  TQ_REQUIRE_TESTDATA();
  auto tok = test::load_gguf_tokenizer(testdata("llama.cpp-vocab/ggml-vocab-gpt-2.gguf"));
  const auto refs = nlohmann::json::parse(read_all(testdata("references/hf_gpt2.json")));
  ASSERT_EQ(refs.size(), 36u);
  for (const auto& ref : refs) {
    const std::string text = ref["text"];
    const auto expected = ref["token_ids"].get<std::vector<TokenId>>();
    const std::vector<TokenId> ids = tok->encode(text, false);
    EXPECT_EQ(ids, expected) << ref["name"] << ": " << text << "\n  expected" << format_ids(expected) << "\n  got     "
                             << format_ids(ids);
    EXPECT_EQ(tok->decode(ids), text) << ref["name"];
  }
}

// SmolLM2-135M-Instruct reference prompts: the input ids are the raw text encoded without BOS
// (SmolLM2 sets add_bos_token = false) and without a chat template.
TEST(TokenizerVectors, SmolLm2ReferencePrompts) {
  TQ_REQUIRE_TESTDATA();
  TQ_REQUIRE_SMOLLM2_GGUF(gguf);
  auto tok = test::load_gguf_tokenizer(gguf);
  EXPECT_FALSE(tok->special().add_bos);
  const auto refs = nlohmann::json::parse(read_all(testdata("references/smollm2-135m-instruct-reference.json")));
  ASSERT_EQ(refs["prompts"].size(), 3u);
  for (const auto& prompt : refs["prompts"]) {
    const std::string text = prompt["text"];
    const auto expected = prompt["input_ids"].get<std::vector<TokenId>>();
    EXPECT_EQ(tok->encode_prompt(text, true), expected) << text;
  }
}

}  // namespace
}  // namespace tq
