// Fuzzes tokenizer encode/decode on arbitrary bytes (invalid UTF-8 included) with real
// vocabularies loaded once from the test data: Qwen2 byte-level BPE + NFC (vocab.json +
// merges.txt), GPT-2 and DeepSeek-coder byte-level BPE (GGUF), SentencePiece BPE (llama-spm and
// stories260K GGUF), and SmolLM2 when installed.
//
// Input: byte 0 picks the tokenizer, byte 1 holds flags, the rest is the text (and, read as
// little-endian int32s, the ids for decoding). Checked properties:
//   - encode returns ids inside the vocabulary;
//   - decode(encode(text)) == text for GPT-2 (byte-level BPE without normalisation is lossless);
//   - StreamDecoder emits valid UTF-8 only, and its output equals the sanitized decode.
// encode() may throw tq::Error only when PCRE2 hits a limit (pre_tokenizer.cpp); the server turns
// that into a 500 through its exception handler. Nothing else is caught.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "errors/error.h"
#include "fuzz/fuzz_common.h"
#include "io/gguf.h"
#include "model/loader.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

struct Loaded {
  std::string name;
  std::unique_ptr<tq::Tokenizer> tok;
};

std::vector<Loaded> load_all() {
  std::vector<Loaded> out;
  out.push_back({"qwen2", tq::Tokenizer::from_hf_dir(tq::fuzz::testdata("qwen2-tokenizer"))});
  for (const char* name : {"gpt-2", "llama-spm", "deepseek-coder"}) {
    const tq::GgufFile g = tq::GgufFile::open(tq::fuzz::testdata(std::string("llama.cpp-vocab/ggml-vocab-") + name + ".gguf"));
    out.push_back({name, tq::Tokenizer::from_gguf(g)});
  }
  {
    const tq::GgufFile g = tq::GgufFile::open(tq::fuzz::testdata("stories260K/stories260K.gguf"));
    out.push_back({"stories260K", tq::Tokenizer::from_gguf(g)});
  }
  try {
    const tq::GgufFile g = tq::GgufFile::open(tq::find_default_model());
    out.push_back({"smollm2", tq::Tokenizer::from_gguf(g)});
  } catch (const tq::Error&) {  // not installed: fuzz the others
  }
  return out;
}

const std::vector<Loaded>& tokenizers() {
  static const std::vector<Loaded> all = load_all();
  return all;
}

bool is_valid_utf8(std::string_view s) { return tq::utf8::sanitize(s) == s; }

}  // namespace

// Loads the fixed inputs before fuzzing starts, outside libFuzzer's per-input timeout.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)tokenizers();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const auto& all = tokenizers();
  const Loaded& entry = all[data[0] % all.size()];
  const tq::Tokenizer& tok = *entry.tok;
  const uint8_t flags = data[1];
  const bool parse_special = (flags & 1) != 0;
  const bool skip_special = (flags & 2) != 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 2, size - 2);
  const int vocab = tok.vocab_size();

  std::vector<tq::TokenId> ids;
  try {
    ids = (flags & 4) ? tok.encode_prompt(text, parse_special) : tok.encode(text, parse_special);
  } catch (const tq::Error&) {
    return 0;  // PCRE2 limit: see the file comment
  }
  for (tq::TokenId id : ids)
    if (id < 0 || id >= vocab) tq::fuzz::invariant_failed("encode returned an id outside the vocabulary");
  const std::string decoded = tok.decode(ids, skip_special);
  if (entry.name == "gpt-2" && !parse_special && !(flags & 4) && decoded != text)
    tq::fuzz::invariant_failed("gpt-2 byte-level BPE did not round-trip");

  // Ids straight from the input bytes: decode (in range, as callers guarantee) and the stream
  // decoder (which must accept anything).
  std::vector<tq::TokenId> raw;
  for (size_t i = 0; i + 4 <= text.size(); i += 4) {
    int32_t v;
    std::memcpy(&v, text.data() + i, 4);
    raw.push_back(v);
  }
  std::vector<tq::TokenId> in_range;
  for (tq::TokenId v : raw) in_range.push_back(static_cast<tq::TokenId>((static_cast<uint32_t>(v) % static_cast<uint32_t>(vocab))));
  (void)tok.decode(in_range, skip_special);

  for (const std::vector<tq::TokenId>* seq : {&ids, &raw}) {
    tq::StreamDecoder stream(tok, skip_special, (flags & 8) != 0);
    std::string streamed;
    for (tq::TokenId id : *seq) {
      const std::string piece = stream.push(id);
      if (!is_valid_utf8(piece)) tq::fuzz::invariant_failed("StreamDecoder::push emitted invalid UTF-8");
      streamed += piece;
    }
    const std::string tail = stream.flush();
    if (!is_valid_utf8(tail)) tq::fuzz::invariant_failed("StreamDecoder::flush emitted invalid UTF-8");
    streamed += tail;
    if (seq == &ids && (flags & 8) == 0 && streamed != tq::utf8::sanitize(tok.decode(ids, skip_special)))
      tq::fuzz::invariant_failed("StreamDecoder output differs from the sanitized decode");
  }
  (void)tq::utf8::nfc(text);
  return 0;
}
