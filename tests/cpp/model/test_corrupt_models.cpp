// Corrupt and truncated models through the whole loader (load_model: readers, config, tokenizer,
// weights): copies of the tiny test models (tests/data/tiny) and stories260K, damaged in a temp
// folder, must each fail with a tq::Error whose message names the file and the problem. Never
// a crash, another exception type (bad_alloc, a JSON exception) or a huge allocation; the
// process runs under a 4 GiB memory cap while they load (memory_cap.h).
#include <gtest/gtest.h>

#include "support/testdata_support.h"
#include <nlohmann/json.hpp>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "errors/error.h"
#include "support/memory_cap.h"
#include "model/loader.h"

namespace tq {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Bytes = std::vector<uint8_t>;

const fs::path kTiny = fs::path(TQ_SOURCE_DIR) / "tests" / "data" / "tiny";
const fs::path kStories = fs::path(test::testdata("stories260K/stories260K.gguf"));

Bytes read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}
void write_bytes(const fs::path& p, const Bytes& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
template <typename T>
void put(Bytes& b, size_t at, T v) {
  ASSERT_LE(at + sizeof(T), b.size());
  std::memcpy(b.data() + at, &v, sizeof(T));
}
template <typename T>
T get(const Bytes& b, size_t at) {
  T v;
  std::memcpy(&v, b.data() + at, sizeof(T));
  return v;
}

class CorruptModels : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Nothing here may allocate more than a few hundred MiB: a reader that trusts a count of
    // 2^60 fails the test with bad_alloc instead of swapping the machine.
    test::set_memory_cap(test::memory_in_use() + (uint64_t{4} << 30));
  }
  static void TearDownTestSuite() { test::restore_memory_cap(); }

  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "tq_corrupt_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Loads `path` (weights too) and expects a tq::Error naming `named` (default: path) and
  // containing `fragment`.
  void expect_fails(const fs::path& path, const std::string& fragment, const std::string& named = "") {
    SCOPED_TRACE(path.string() + " / " + fragment);
    try {
      load_model(path.string());
      ADD_FAILURE() << "loaded without an error";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(named.empty() ? path.string() : named), std::string::npos) << "does not name the file: " << m;
      EXPECT_NE(m.find(fragment), std::string::npos) << "lacks '" << fragment << "': " << m;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not a tq::Error: " << e.what();
    }
  }

  fs::path gguf_copy(const Bytes& bytes, const std::string& name = "model.gguf") {
    const fs::path p = dir_ / name;
    write_bytes(p, bytes);
    return p;
  }

  fs::path hf_copy(const std::string& model = "qwen2-f32") {
    const fs::path d = dir_ / model;
    fs::copy(kTiny / model, d, fs::copy_options::recursive);
    return d;
  }

  fs::path dir_;
};

// --- GGUF layout, found by walking a real file ------------------------------------------------

struct GgufLayout {
  struct Kv {
    std::string key;
    size_t key_at;    // the u64 key length
    size_t type_at;   // the u32 value type
    size_t value_at;  // the value
  };
  struct Tensor {
    std::string name;
    size_t name_at, n_dims_at, dims_at, type_at, offset_at;
  };
  std::vector<Kv> kvs;
  std::vector<Tensor> tensors;
  size_t infos_end = 0;
  const Kv& kv(const std::string& key) const {
    for (const Kv& k : kvs)
      if (k.key == key) return k;
    throw std::runtime_error("no key " + key);
  }
  const Tensor& tensor(const std::string& name) const {
    for (const Tensor& t : tensors)
      if (t.name == name) return t;
    throw std::runtime_error("no tensor " + name);
  }
};

size_t skip_value(const Bytes& b, size_t at, uint32_t type) {
  static const size_t kSizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
  if (type == 8) return at + 8 + get<uint64_t>(b, at);
  if (type == 9) {
    const uint32_t et = get<uint32_t>(b, at);
    const uint64_t n = get<uint64_t>(b, at + 4);
    at += 12;
    for (uint64_t i = 0; i < n; ++i) at = skip_value(b, at, et);
    return at;
  }
  return at + kSizes[type];
}

GgufLayout walk(const Bytes& b) {
  GgufLayout g;
  const uint64_t n_tensors = get<uint64_t>(b, 8), n_kv = get<uint64_t>(b, 16);
  size_t at = 24;
  for (uint64_t i = 0; i < n_kv; ++i) {
    GgufLayout::Kv kv;
    kv.key_at = at;
    const uint64_t len = get<uint64_t>(b, at);
    kv.key.assign(reinterpret_cast<const char*>(b.data() + at + 8), len);
    kv.type_at = at + 8 + len;
    kv.value_at = kv.type_at + 4;
    at = skip_value(b, kv.value_at, get<uint32_t>(b, kv.type_at));
    g.kvs.push_back(kv);
  }
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufLayout::Tensor t;
    t.name_at = at;
    const uint64_t len = get<uint64_t>(b, at);
    t.name.assign(reinterpret_cast<const char*>(b.data() + at + 8), len);
    t.n_dims_at = at + 8 + len;
    t.dims_at = t.n_dims_at + 4;
    t.type_at = t.dims_at + 8 * get<uint32_t>(b, t.n_dims_at);
    t.offset_at = t.type_at + 4;
    at = t.offset_at + 8;
    g.tensors.push_back(t);
  }
  g.infos_end = at;
  return g;
}

class CorruptGguf : public CorruptModels {
 protected:
  void SetUp() override {
    CorruptModels::SetUp();
    good_ = read_bytes(kTiny / "llama-f32.gguf");
    ASSERT_GT(good_.size(), 1000u);
    layout_ = walk(good_);
    ASSERT_FALSE(layout_.tensors.empty());
  }
  // A copy of the good file with `edit` applied.
  fs::path variant(const std::function<void(Bytes&)>& edit, const std::string& name = "model.gguf") {
    Bytes b = good_;
    edit(b);
    return gguf_copy(b, name);
  }
  Bytes good_;
  GgufLayout layout_;
};

TEST_F(CorruptGguf, TheUntouchedCopyLoads) {
  const LoadedModel m = load_model(gguf_copy(good_).string());
  EXPECT_GT(m.config.num_layers, 0);
}

TEST_F(CorruptGguf, TruncatedAtEveryPart) {
  const auto cut = [&](size_t size, const std::string& fragment) {
    expect_fails(gguf_copy(Bytes(good_.begin(), good_.begin() + static_cast<long>(size)), "cut.gguf"), fragment);
  };
  cut(0, "not a GGUF file");
  cut(3, "not a GGUF file");
  cut(6, "truncated: the GGUF version");
  cut(20, "truncated: the tensor and metadata counts");
  cut(layout_.kvs[1].value_at + 2, "");              // inside the metadata
  cut(layout_.kvs.back().value_at, "truncated");  // before the last value
  // In the tensor infos: too few bytes left for the 31 infos the header claims.
  cut(layout_.tensors[1].dims_at + 3, "header claims 31 tensors but the remaining");
  cut(layout_.tensors.back().offset_at + 3, "truncated: tensor '" + layout_.tensors.back().name + "'");
  cut(layout_.infos_end + 16, "runs past the end of the file");  // the start of the data
  cut(good_.size() - 1, "runs past the end of the file");        // the last data byte
}

TEST_F(CorruptGguf, BadMagicAndVersions) {
  expect_fails(variant([](Bytes& b) { std::memcpy(b.data(), "GGUX", 4); }), "not a GGUF file");
  expect_fails(variant([](Bytes& b) { put<uint32_t>(b, 4, 1); }), "GGUF version 1 is no longer supported");
  expect_fails(variant([](Bytes& b) { put<uint32_t>(b, 4, 99); }), "unsupported GGUF version 99");
  expect_fails(variant([](Bytes& b) { put<uint32_t>(b, 4, 0x03000000); }), "may be big-endian");
}

TEST_F(CorruptGguf, AbsurdCountsAndLengths) {
  expect_fails(variant([](Bytes& b) { put<uint64_t>(b, 8, uint64_t(1) << 60); }), "claims 1152921504606846976 tensors");
  expect_fails(variant([](Bytes& b) { put<uint64_t>(b, 16, uint64_t(1) << 60); }), "metadata entries");
  expect_fails(variant([&](Bytes& b) { put<uint64_t>(b, layout_.kvs[0].key_at, uint64_t(1) << 40); }),
               "string length 1099511627776");
  // An array (the vocabulary) claiming 2^50 elements.
  const auto& tokens = layout_.kv("tokenizer.ggml.tokens");
  expect_fails(variant([&](Bytes& b) { put<uint64_t>(b, tokens.value_at + 4, uint64_t(1) << 50); }),
               "claims 1125899906842624 string elements");
  // A tensor name of 2^40 bytes.
  expect_fails(variant([&](Bytes& b) { put<uint64_t>(b, layout_.tensors[0].name_at, uint64_t(1) << 40); }),
               "string length 1099511627776");
}

TEST_F(CorruptGguf, BadTensorInfos) {
  const GgufLayout::Tensor* matrix = nullptr;  // a 2-D tensor other than the first
  for (size_t i = 1; i < layout_.tensors.size() && !matrix; ++i)
    if (get<uint32_t>(good_, layout_.tensors[i].n_dims_at) == 2) matrix = &layout_.tensors[i];
  ASSERT_NE(matrix, nullptr);
  const auto& t = *matrix;
  expect_fails(variant([&](Bytes& b) { put<uint32_t>(b, t.n_dims_at, 9); }), "has 9 dimensions");
  expect_fails(variant([&](Bytes& b) { put<uint64_t>(b, t.dims_at, 0); }), "invalid size 0 in dimension 0");
  expect_fails(variant([&](Bytes& b) {
                 put<uint64_t>(b, t.dims_at, uint64_t(1) << 40);
                 put<uint64_t>(b, t.dims_at + 8, uint64_t(1) << 40);
               }),
               "element count overflows 64 bits");
  expect_fails(variant([&](Bytes& b) { put<uint32_t>(b, t.type_at, 200); }), "unknown ggml type 200");
  expect_fails(variant([&](Bytes& b) { put<uint32_t>(b, t.type_at, 16); }), "iq2_xxs, not supported");
  expect_fails(variant([&](Bytes& b) { put<uint64_t>(b, t.offset_at, uint64_t(1) << 40); }),
               "runs past the end of the file");
  expect_fails(variant([&](Bytes& b) { put<uint64_t>(b, t.offset_at, 7); }), "not a multiple of the alignment");
  // Two tensors over the same bytes.
  const auto& first = layout_.tensors[0];
  expect_fails(variant([&](Bytes& b) { put<uint64_t>(b, t.offset_at, get<uint64_t>(b, first.offset_at)); }),
               "overlaps tensor");
  // A tensor renamed: the loader misses it by name.
  expect_fails(variant([&](Bytes& b) { b[t.name_at + 8] = 'X'; }), "is missing");
  // A tensor's shape no longer matches the config.
  expect_fails(variant([&](Bytes& b) { put<uint64_t>(b, t.dims_at, get<uint64_t>(b, t.dims_at) / 2); }),
               "but the config implies");
}

TEST_F(CorruptGguf, BadMetadataValues) {
  const auto& blocks = layout_.kv("llama.block_count");
  expect_fails(variant([&](Bytes& b) { put<uint32_t>(b, blocks.type_at, 6); }),
               "'llama.block_count' has type float32, expected an integer");
  expect_fails(variant([&](Bytes& b) { put<uint32_t>(b, blocks.type_at, 77); }), "invalid value type 77");
  expect_fails(variant([&](Bytes& b) { put<uint32_t>(b, blocks.value_at, 1u << 30); }), "is missing (the config says");
  expect_fails(variant([&](Bytes& b) { put<uint32_t>(b, blocks.value_at, 0x80000000u); }), "out of range");
  expect_fails(variant([&](Bytes& b) { b[blocks.key_at + 8 + 7] = 'X'; }), "'llama.block_count' (integer) is missing");
  const auto& heads = layout_.kv("llama.attention.head_count");
  expect_fails(variant([&](Bytes& b) { put<uint32_t>(b, heads.value_at, 0); }), "attention head count must be positive");
  const auto& arch = layout_.kv("general.architecture");
  expect_fails(variant([&](Bytes& b) { std::memcpy(b.data() + arch.value_at + 8, "mamba", 5); }),
               "architecture 'mamba' is not supported");
  // A special token id past the vocabulary is ignored with a warning, as llama.cpp does: the
  // model loads and never feeds that id to the embedding.
  const auto& bos = layout_.kv("tokenizer.ggml.bos_token_id");
  const LoadedModel m = load_model(variant([&](Bytes& b) { put<uint32_t>(b, bos.value_at, 1u << 20); }).string());
  ASSERT_TRUE(m.tokenizer);
  EXPECT_FALSE(m.tokenizer->special().bos.has_value());
}

TEST_F(CorruptGguf, OtherFilesAreNotGguf) {
  // A llama.c checkpoint (.bin: a header of seven int32 then floats) is not a format tqserve reads.
  Bytes bin(7 * 4 + 4096, 0);
  for (int i = 0; i < 7; ++i) put<int32_t>(bin, size_t(i) * 4, 64);
  expect_fails(gguf_copy(bin, "stories.bin"), "not a GGUF file");
  expect_fails(gguf_copy(Bytes{'{', '}'}, "config.json"), "not a GGUF file");
  expect_fails(dir_ / "absent.gguf", "no such file or folder");
}

TEST_F(CorruptModels, TruncatedRealStoriesModel) {
  TQ_REQUIRE_TESTDATA();
  const Bytes good = read_bytes(kStories);
  ASSERT_GT(good.size(), 100000u);
  const GgufLayout layout = walk(good);
  for (size_t size : {size_t(24), layout.kvs[3].value_at, layout.infos_end - 5, layout.infos_end + 100, good.size() / 2,
                      good.size() - 4}) {
    expect_fails(gguf_copy(Bytes(good.begin(), good.begin() + static_cast<long>(size)), "stories.gguf"), "");
  }
}

// --- Hugging Face folders ---------------------------------------------------------------------

// Rewrites model.safetensors with its header JSON edited (data bytes unchanged).
void edit_safetensors(const fs::path& file, const std::function<void(json&)>& edit) {
  Bytes b = read_bytes(file);
  const uint64_t len = get<uint64_t>(b, 0);
  json header = json::parse(b.begin() + 8, b.begin() + 8 + static_cast<long>(len));
  edit(header);
  const std::string text = header.dump();
  Bytes out(8);
  put<uint64_t>(out, 0, text.size());
  out.insert(out.end(), text.begin(), text.end());
  out.insert(out.end(), b.begin() + 8 + static_cast<long>(len), b.end());
  write_bytes(file, out);
}

void edit_config(const fs::path& dir, const std::function<void(json&)>& edit) {
  json cfg = json::parse(read_bytes(dir / "config.json"));
  edit(cfg);
  std::ofstream(dir / "config.json") << cfg.dump();
}

TEST_F(CorruptModels, TheUntouchedFolderLoads) { EXPECT_GT(load_model(hf_copy().string()).config.num_layers, 0); }

TEST_F(CorruptModels, BadConfigJson) {
  const auto with_config = [&](const std::string& text, const std::string& fragment) {
    const fs::path d = hf_copy();
    std::ofstream(d / "config.json") << text;
    expect_fails(d, fragment, (d / "config.json").string());
    fs::remove_all(d);
  };
  with_config("{\"architectures\": [\"Qwen2ForCausalLM\"", "invalid JSON");
  with_config("[1, 2]", "expected a JSON object");
  with_config("", "invalid JSON");
  const auto edited = [&](const std::function<void(json&)>& edit, const std::string& fragment,
                          bool names_config = true) {
    const fs::path d = hf_copy();
    edit_config(d, edit);
    expect_fails(d, fragment, names_config ? (d / "config.json").string() : d.string());
    fs::remove_all(d);
  };
  edited([](json& c) { c.erase("hidden_size"); }, "'hidden_size' is missing or not an integer");
  edited([](json& c) { c["num_attention_heads"] = "16"; }, "'num_attention_heads' is missing or not an integer");
  edited([](json& c) { c["num_hidden_layers"] = -3; }, "'num_hidden_layers' = -3 is out of range");
  edited([](json& c) { c["vocab_size"] = 4294967296LL; }, "'vocab_size' = 4294967296 is out of range");
  edited([](json& c) { c["max_position_embeddings"] = "4096"; }, "'max_position_embeddings' is missing or not an integer");
  edited([](json& c) { c["max_position_embeddings"] = 0; }, "context length must be positive");
  edited([](json& c) { c["rope_theta"] = "1e4"; }, "'rope_theta' must be a number");
  edited([](json& c) { c["rms_norm_eps"] = json::array(); }, "'rms_norm_eps' must be a number");
  edited([](json& c) { c["tie_word_embeddings"] = "yes"; }, "'tie_word_embeddings' must be true or false");
  edited([](json& c) { c["num_key_value_heads"] = 3; }, "not a multiple of 3 KV heads");
  edited([](json& c) { c["architectures"] = json::array({"MambaForCausalLM"}); }, "'MambaForCausalLM' is not supported");
  edited([](json& c) { c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; }, "rope_scaling type 'yarn'");
  // Layers the file does not hold: a missing tensor (and no 2^30-entry layer list).
  edited([](json& c) { c["num_hidden_layers"] = 1 << 30; }, "is missing (the config says 1073741824 layers)", false);
  {
    const fs::path d = hf_copy();
    fs::remove(d / "config.json");
    expect_fails(d, "no config.json");
  }
}

TEST_F(CorruptModels, BadSafetensors) {
  const auto damaged = [&](const std::function<void(const fs::path&)>& damage, const std::string& fragment) {
    const fs::path d = hf_copy();
    const fs::path st = d / "model.safetensors";
    damage(st);
    expect_fails(d, fragment, st.string());
    fs::remove_all(d);
  };
  const auto header = [&](const std::function<void(json&)>& edit, const std::string& fragment) {
    damaged([&](const fs::path& st) { edit_safetensors(st, edit); }, fragment);
  };
  const auto bytes = [&](const std::function<void(Bytes&)>& edit, const std::string& fragment) {
    damaged(
        [&](const fs::path& st) {
          Bytes b = read_bytes(st);
          edit(b);
          write_bytes(st, b);
        },
        fragment);
  };
  bytes([](Bytes& b) { b.resize(5); }, "too short for a safetensors header");
  bytes([](Bytes& b) { put<uint64_t>(b, 0, uint64_t(1) << 40); }, "header length 1099511627776 runs past the end");
  bytes([](Bytes& b) { b.resize(b.size() / 2); }, "outside the");  // truncated in the data
  bytes([](Bytes& b) { b.resize(8 + get<uint64_t>(b, 0) / 2); }, "runs past the end");  // inside the header
  bytes([](Bytes& b) { b[8] = 'X'; }, "invalid header JSON");
  bytes(
      [](Bytes& b) {
        const std::string arr = "[1]";
        const uint64_t len = get<uint64_t>(b, 0);
        std::memcpy(b.data() + 8, arr.data(), arr.size());
        std::memset(b.data() + 8 + arr.size(), ' ', len - arr.size());
      },
      "header is not a JSON object");
  const std::string t = "model.embed_tokens.weight";
  header([&](json& h) { h[t]["dtype"] = "F64"; }, "unsupported dtype 'F64'");
  header([&](json& h) { h[t]["dtype"] = 5; }, "dtype is not a string");
  header([&](json& h) { h[t]["shape"][0] = h[t]["shape"][0].get<int64_t>() + 1; }, "needs");
  header([&](json& h) { h[t]["shape"] = {uint64_t(1) << 40, uint64_t(1) << 40}; }, "element count overflows 64 bits");
  header([&](json& h) { h[t]["shape"][0] = -4; }, "expected a non-negative integer");
  header([&](json& h) { h[t]["data_offsets"] = {0, uint64_t(1) << 50}; }, "are outside the");
  header([&](json& h) { h[t].erase("data_offsets"); }, "needs 'dtype', 'shape' and 'data_offsets'");
  // Two tensors over the same bytes (same size, the other's offsets).
  header(
      [](json& h) {
        std::vector<std::string> same;
        for (auto& [name, e] : h.items())
          if (name.find("input_layernorm") != std::string::npos) same.push_back(name);
        ASSERT_GE(same.size(), 2u);
        h[same[1]]["data_offsets"] = h[same[0]]["data_offsets"];
      },
      "overlap tensor");
  {
    const fs::path d = hf_copy();
    fs::remove(d / "model.safetensors");
    expect_fails(d, "no model.safetensors");
  }
}

TEST_F(CorruptModels, BadTokenizerFiles) {
  const fs::path d = hf_copy();
  std::ofstream(d / "tokenizer.json", std::ios::trunc) << "{\"model\": ";
  expect_fails(d, "", (d / "tokenizer.json").string());
}

TEST_F(CorruptModels, TokenizerLargerThanTheEmbedding) {
  // vocab_size (the embedding rows) smaller than the tokenizer: the embedding's shape no longer
  // matches, so this is caught as a shape error; with weights unloaded (tqserve info) the
  // tokenizer check names it.
  const fs::path d = hf_copy();
  edit_config(d, [](json& c) { c["vocab_size"] = 8; });
  expect_fails(d, "model.embed_tokens.weight' has shape");
  try {
    LoadOptions o;
    o.with_weights = false;
    load_model(d.string(), o);
    ADD_FAILURE() << "loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("but the model's vocabulary (embedding rows) has only 8"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tq
