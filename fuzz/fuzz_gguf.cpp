// Fuzzes the GGUF reader and what is built from GGUF metadata: GgufFile::open and its typed
// accessors, config_from_gguf, Tokenizer::from_gguf, and load_model (weights included).
// Production (load_model's callers, cli/main.cpp) treats tq::Error as the rejection of a bad
// file, so that is all this harness catches.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "errors/error.h"
#include "fuzz/fuzz_common.h"
#include "io/gguf.h"
#include "model/config.h"
#include "model/loader.h"
#include "tokenizer/tokenizer.h"

namespace {

void exercise_accessors(const tq::GgufFile& g) {
  for (const auto& [key, value] : g.metadata()) {
    // Each accessor either returns a value or throws tq::Error for the wrong type.
    try { (void)g.get_string(key); } catch (const tq::Error&) {}
    try { (void)g.get_int(key); } catch (const tq::Error&) {}
    try { (void)g.get_float(key); } catch (const tq::Error&) {}
    try { (void)g.get_bool_or(key, false); } catch (const tq::Error&) {}
    try { (void)g.get_string_array(key); } catch (const tq::Error&) {}
    try { (void)g.get_float_array(key); } catch (const tq::Error&) {}
    try { (void)g.get_int_array(key); } catch (const tq::Error&) {}
  }
  for (const tq::TensorView& t : g.tensors()) {
    if (g.find_tensor(t.name) == nullptr) tq::fuzz::invariant_failed("find_tensor misses a listed tensor");
    if (t.nbytes > 0) {
      // Every tensor must lie inside the mapped file: touch its first and last byte (ASan/SEGV
      // would catch a bad offset).
      volatile uint8_t sink = t.data[0];
      sink = t.data[t.nbytes - 1];
      (void)sink;
    }
  }
}

void exercise_tokenizer(const tq::GgufFile& g) {
  std::unique_ptr<tq::Tokenizer> tok = tq::Tokenizer::from_gguf(g);
  const int n = tok->vocab_size();
  std::vector<tq::TokenId> ids;
  for (int id = 0; id < n && id < 64; ++id) ids.push_back(id);
  for (tq::TokenId id : ids) {
    (void)tok->token_text(id);
    (void)tok->token_bytes(id);
    (void)tok->is_special(id);
  }
  (void)tok->decode(ids, false);
  (void)tok->decode(ids, true);
  // Encoding may only fail with tq::Error (the pre-tokenizer's PCRE2 limits).
  try {
    const std::vector<tq::TokenId> enc = tok->encode_prompt("Hello world! <s></s> <|im_start|>user\n\xC3\xA9\xF0\x9F\x98\x80", true);
    for (tq::TokenId id : enc) {
      if (id < 0 || id >= n) tq::fuzz::invariant_failed("encode returned an id outside the vocabulary");
    }
    (void)tok->decode(enc, false);
  } catch (const tq::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tq::fuzz::write_scratch("model.gguf", {reinterpret_cast<const char*>(data), size});
  try {
    const tq::GgufFile g = tq::GgufFile::open(path);
    exercise_accessors(g);
    try { (void)tq::config_from_gguf(g); } catch (const tq::Error&) {}
    try {
      if (g.has("tokenizer.ggml.model")) exercise_tokenizer(g);
    } catch (const tq::Error&) {
    }
  } catch (const tq::Error&) {
  }
  try {
    tq::LoadOptions options;
    options.with_weights = true;
    options.dequantize_weights = size % 2 != 0;
    (void)tq::load_model(path, options);
  } catch (const tq::Error&) {
  }
  return 0;
}
