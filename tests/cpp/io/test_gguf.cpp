// GGUF reader: the real stories260K model and vocab-only files, files written by a small in-test
// GGUF writer, and malformed files (truncated, corrupted) that must all fail with tq::Error.
#include <gtest/gtest.h>

#include "support/testdata_support.h"
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "errors/error.h"
#include "support/memory_cap.h"
#include "io/gguf.h"
#include "kernels/dtype.h"

namespace tq {
namespace {

namespace fs = std::filesystem;

const std::string kStories = test::testdata("stories260K/stories260K.gguf");
const std::string kVocabDir = test::testdata("llama.cpp-vocab");

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "tq_gguf_test_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// Expects open() to throw tq::Error whose message names the file and contains `fragment`.
void expect_open_fails(const std::string& path, const std::string& fragment = "") {
  try {
    GgufFile::open(path);
    ADD_FAILURE() << "expected an error for " << path << " (" << fragment << ")";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind(path, 0), 0u) << "message does not start with the path: " << message;
    EXPECT_NE(message.find(fragment), std::string::npos)
        << "message lacks '" << fragment << "': " << message;
  }
}

// --- a minimal GGUF writer -------------------------------------------------------------------

class Bytes {
 public:
  template <typename T>
  Bytes& put(T value) {
    const auto* p = reinterpret_cast<const uint8_t*>(&value);
    data.insert(data.end(), p, p + sizeof(T));
    return *this;
  }
  Bytes& str(const std::string& s) {
    put<uint64_t>(s.size());
    data.insert(data.end(), s.begin(), s.end());
    return *this;
  }
  std::vector<uint8_t> data;
};

enum : uint32_t { kU8 = 0, kI8, kU16, kI16, kU32, kI32, kF32, kBool, kStr, kArr, kU64, kI64, kF64 };

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> ne;  // innermost first, as GGUF stores it
  uint32_t type = 0;
  std::optional<uint64_t> offset;  // default: packed in order, aligned
};

struct GgufSpec {
  uint32_t version = 3;
  std::string magic = "GGUF";
  std::optional<uint64_t> n_tensors, n_kv;  // override the true counts
  uint64_t alignment = 32;                  // used for layout; add the key yourself if not 32
  std::vector<std::function<void(Bytes&)>> kvs;
  std::vector<TensorSpec> tensors;

  GgufSpec& kv(const std::string& key, uint32_t type, std::function<void(Bytes&)> value) {
    kvs.push_back([=](Bytes& b) {
      b.str(key).put<uint32_t>(type);
      value(b);
    });
    return *this;
  }
};

uint64_t tensor_bytes(const TensorSpec& t) {
  auto traits = dtype_traits(t.type);
  if (!traits) return 0;
  uint64_t n = 1;
  for (uint64_t d : t.ne) {
    if (__builtin_mul_overflow(n, d, &n)) return ~0ull;
  }
  uint64_t bytes;
  if (__builtin_mul_overflow(n / traits->block_elems, traits->block_bytes, &bytes)) return ~0ull;
  return bytes;
}

// Tensors whose data the writer actually lays out; the others are deliberately impossible.
bool is_writable(const TensorSpec& t, uint64_t offset) {
  return offset < (1u << 20) && tensor_bytes(t) < (1u << 20);
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Serialises the spec; tensor data are bytes (i * 7) & 0xFF, except F32 tensors, which hold
// 0, 1, 2, ... so that tests can check where the reader points.
std::vector<uint8_t> build_gguf(const GgufSpec& spec, size_t* data_start_out = nullptr) {
  Bytes b;
  b.data.insert(b.data.end(), spec.magic.begin(), spec.magic.end());
  b.put<uint32_t>(spec.version);
  b.put<uint64_t>(spec.n_tensors.value_or(spec.tensors.size()));
  b.put<uint64_t>(spec.n_kv.value_or(spec.kvs.size()));
  for (const auto& kv : spec.kvs) kv(b);
  std::vector<uint64_t> offsets;
  uint64_t next = 0;
  for (const TensorSpec& t : spec.tensors) {
    const uint64_t offset = t.offset.value_or(next);
    offsets.push_back(offset);
    if (is_writable(t, offset)) next = align_up(std::max(next, offset + tensor_bytes(t)), spec.alignment);
    b.str(t.name).put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) b.put<uint64_t>(d);
    b.put<uint32_t>(t.type).put<uint64_t>(offset);
  }
  const size_t data_start = align_up(b.data.size(), spec.alignment);
  if (data_start_out != nullptr) *data_start_out = data_start;
  size_t data_end = data_start;
  for (size_t i = 0; i < spec.tensors.size(); ++i) {
    if (is_writable(spec.tensors[i], offsets[i])) {
      data_end = std::max<size_t>(data_end, data_start + offsets[i] + tensor_bytes(spec.tensors[i]));
    }
  }
  b.data.resize(data_end, 0);
  for (size_t i = 0; i < spec.tensors.size(); ++i) {
    const uint64_t nbytes = tensor_bytes(spec.tensors[i]);
    if (!is_writable(spec.tensors[i], offsets[i])) continue;
    uint8_t* dst = b.data.data() + data_start + offsets[i];
    if (spec.tensors[i].type == 0) {
      for (uint64_t e = 0; e < nbytes / 4; ++e) {
        const float v = static_cast<float>(e);
        std::memcpy(dst + 4 * e, &v, 4);
      }
    } else {
      for (uint64_t e = 0; e < nbytes; ++e) dst[e] = static_cast<uint8_t>((e * 7) & 0xFF);
    }
  }
  return b.data;
}

// A valid file with one value of every metadata type and three tensors.
GgufSpec full_spec() {
  GgufSpec s;
  s.kv("general.architecture", kStr, [](Bytes& b) { b.str("llama"); })
      .kv("test.u8", kU8, [](Bytes& b) { b.put<uint8_t>(200); })
      .kv("test.i8", kI8, [](Bytes& b) { b.put<int8_t>(-100); })
      .kv("test.u16", kU16, [](Bytes& b) { b.put<uint16_t>(60000); })
      .kv("test.i16", kI16, [](Bytes& b) { b.put<int16_t>(-30000); })
      .kv("test.u32", kU32, [](Bytes& b) { b.put<uint32_t>(4000000000u); })
      .kv("test.i32", kI32, [](Bytes& b) { b.put<int32_t>(-2000000000); })
      .kv("test.u64", kU64, [](Bytes& b) { b.put<uint64_t>(1ull << 40); })
      .kv("test.u64_huge", kU64, [](Bytes& b) { b.put<uint64_t>(~0ull); })
      .kv("test.i64", kI64, [](Bytes& b) { b.put<int64_t>(-(1ll << 50)); })
      .kv("test.f32", kF32, [](Bytes& b) { b.put<float>(1e-5f); })
      .kv("test.f64", kF64, [](Bytes& b) { b.put<double>(-2.5); })
      .kv("test.bool", kBool, [](Bytes& b) { b.put<uint8_t>(1); })
      .kv("test.empty_string", kStr, [](Bytes& b) { b.str(""); })
      .kv("test.strings", kArr, [](Bytes& b) { b.put<uint32_t>(kStr).put<uint64_t>(3).str("a").str("").str("\xe2\x96\x81x"); })
      .kv("test.floats", kArr, [](Bytes& b) { b.put<uint32_t>(kF32).put<uint64_t>(2).put<float>(0.5f).put<float>(-1.0f); })
      .kv("test.ints", kArr, [](Bytes& b) { b.put<uint32_t>(kI32).put<uint64_t>(3).put<int32_t>(1).put<int32_t>(-2).put<int32_t>(3); })
      .kv("test.empty_array", kArr, [](Bytes& b) { b.put<uint32_t>(kU8).put<uint64_t>(0); })
      .kv("test.nested", kArr, [](Bytes& b) {
        b.put<uint32_t>(kArr).put<uint64_t>(2);
        b.put<uint32_t>(kU16).put<uint64_t>(2).put<uint16_t>(7).put<uint16_t>(8);
        b.put<uint32_t>(kStr).put<uint64_t>(1).str("deep");
      });
  s.tensors = {
      {"token_embd.weight", {4, 3}, 0, std::nullopt},
      {"blk.0.attn_q.weight", {64, 2}, 8 /* q8_0 */, std::nullopt},
      {"blk.0.ffn_down.weight", {256, 1, 1, 2}, 12 /* q4_k */, std::nullopt},
  };
  return s;
}

// --- real files ------------------------------------------------------------------------------

TEST(Gguf, Stories260KMetadata) {
  TQ_REQUIRE_TESTDATA();
  const GgufFile f = GgufFile::open(kStories);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.path(), kStories);
  EXPECT_EQ(f.metadata().size(), 19u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "llama");
  EXPECT_FALSE(f.get_string_opt("tokenizer.ggml.pre").has_value());  // old-style conversion
  EXPECT_EQ(f.get_int("llama.embedding_length"), 64);
  EXPECT_EQ(f.get_int("llama.block_count"), 5);
  EXPECT_EQ(f.get_int("llama.attention.head_count"), 8);
  EXPECT_EQ(f.get_int("llama.attention.head_count_kv"), 4);
  EXPECT_EQ(f.get_int("llama.feed_forward_length"), 172);
  EXPECT_EQ(f.get_int("llama.context_length"), 2048);
  EXPECT_EQ(f.get_int("llama.rope.dimension_count"), 8);
  EXPECT_EQ(f.get_int("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_FLOAT_EQ(static_cast<float>(f.get_float("llama.attention.layer_norm_rms_epsilon")), 1e-5f);
  EXPECT_EQ(f.get_float_or("llama.rope.freq_base", 10000.0), 10000.0);

  const std::vector<std::string> tokens = f.get_string_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 512u);
  EXPECT_EQ(tokens[0], "<unk>");
  EXPECT_EQ(tokens[300], "\xe2\x96\x81ha");
  const std::vector<double> scores = f.get_float_array("tokenizer.ggml.scores");
  ASSERT_EQ(scores.size(), 512u);
  EXPECT_EQ(scores[300], -41.0);
  const std::vector<int64_t> types = f.get_int_array("tokenizer.ggml.token_type");
  ASSERT_EQ(types.size(), 512u);
  EXPECT_EQ(types[0], 2);
}

TEST(Gguf, Stories260KTensors) {
  TQ_REQUIRE_TESTDATA();
  const GgufFile f = GgufFile::open(kStories);
  ASSERT_EQ(f.tensors().size(), 48u);
  const TensorView* embd = f.find_tensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->dims, (std::vector<int64_t>{512, 64}));
  EXPECT_EQ(embd->dtype, DType::F32);
  EXPECT_EQ(embd->nbytes, 512u * 64 * 4);
  const auto* values = reinterpret_cast<const float*>(embd->data);
  EXPECT_FLOAT_EQ(values[0], -0.29474878f);
  EXPECT_FLOAT_EQ(values[1], 0.5618956f);
  EXPECT_FLOAT_EQ(values[511 * 64 + 63], -0.4240326f);
  const TensorView* output = f.find_tensor("output.weight");
  ASSERT_NE(output, nullptr);
  EXPECT_EQ(0, std::memcmp(output->data, embd->data, embd->nbytes));  // tied in this file

  auto dims_of = [&](const std::string& name) {
    const TensorView* t = f.find_tensor(name);
    EXPECT_NE(t, nullptr) << name;
    return t ? t->dims : std::vector<int64_t>{};
  };
  EXPECT_EQ(dims_of("output_norm.weight"), (std::vector<int64_t>{64}));
  EXPECT_EQ(dims_of("blk.0.attn_q.weight"), (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(dims_of("blk.0.attn_k.weight"), (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(dims_of("blk.4.ffn_gate.weight"), (std::vector<int64_t>{172, 64}));
  EXPECT_EQ(dims_of("blk.4.ffn_down.weight"), (std::vector<int64_t>{64, 172}));
  EXPECT_EQ(f.find_tensor("blk.5.attn_q.weight"), nullptr);
  EXPECT_FLOAT_EQ(reinterpret_cast<const float*>(f.find_tensor("output_norm.weight")->data)[1],
                  1.3673227f);

  for (const TensorView& t : f.tensors()) {
    EXPECT_EQ(t.dtype, DType::F32) << t.name;
    EXPECT_EQ(t.nbytes, static_cast<size_t>(t.numel()) * 4) << t.name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 32, 0u) << t.name;
  }
}

TEST(Gguf, VocabOnlyFiles) {
  TQ_REQUIRE_TESTDATA();
  {
    const GgufFile f = GgufFile::open(kVocabDir + "/ggml-vocab-gpt-2.gguf");
    EXPECT_TRUE(f.tensors().empty());
    EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
    EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "gpt-2");
    EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens").size(), 50257u);
    EXPECT_EQ(f.get_string_array("tokenizer.ggml.merges").size(), 50000u);
    EXPECT_EQ(f.get_string_array("tokenizer.ggml.merges")[0], "\xc4\xa0 t");
    EXPECT_EQ(f.get_int("tokenizer.ggml.bos_token_id"), 50256);
    EXPECT_FALSE(f.get_bool_or("tokenizer.ggml.add_bos_token", false));
  }
  {
    const GgufFile f = GgufFile::open(kVocabDir + "/ggml-vocab-llama-spm.gguf");
    EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens").size(), 32000u);
    EXPECT_EQ(f.get_float_array("tokenizer.ggml.scores").size(), 32000u);
    EXPECT_EQ(f.get_int_array("tokenizer.ggml.token_type")[0], 2);
    EXPECT_TRUE(f.get_bool_or("tokenizer.ggml.add_bos_token", false));
    EXPECT_FALSE(f.get_bool_or("tokenizer.ggml.add_eos_token", true));
    EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id"), 2);
  }
  {
    const GgufFile f = GgufFile::open(kVocabDir + "/ggml-vocab-deepseek-coder.gguf");
    EXPECT_EQ(f.get_float("llama.rope.freq_base"), 100000.0);
    EXPECT_EQ(f.get_string("llama.rope.scaling.type"), "linear");
    EXPECT_EQ(f.get_float("llama.rope.scaling.factor"), 4.0);
    EXPECT_EQ(f.get_int("tokenizer.ggml.bos_token_id"), 32013);
  }
  {
    const GgufFile f = GgufFile::open(kVocabDir + "/ggml-vocab-deepseek-llm.gguf");
    EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens").size(), 102400u);
    EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "deepseek-llm");
  }
}

// --- files from the in-test writer ------------------------------------------------------------

TEST(Gguf, AllValueTypesAndAccessors) {
  TempDir dir;
  const std::string path = dir.file("full.gguf");
  write_file(path, build_gguf(full_spec()));
  const GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.get_int("test.u8"), 200);
  EXPECT_EQ(f.get_int("test.i8"), -100);
  EXPECT_EQ(f.get_int("test.u16"), 60000);
  EXPECT_EQ(f.get_int("test.i16"), -30000);
  EXPECT_EQ(f.get_int("test.u32"), 4000000000ll);
  EXPECT_EQ(f.get_int("test.i32"), -2000000000);
  EXPECT_EQ(f.get_int("test.u64"), 1ll << 40);
  EXPECT_EQ(f.metadata().at("test.u64_huge").u, ~0ull);
  EXPECT_EQ(f.get_float("test.u64_huge"), 18446744073709551615.0);
  EXPECT_EQ(f.get_int("test.i64"), -(1ll << 50));
  EXPECT_EQ(f.get_float("test.f32"), static_cast<double>(1e-5f));
  EXPECT_EQ(f.get_float("test.f64"), -2.5);
  EXPECT_EQ(f.get_float("test.i8"), -100.0);  // integers are numbers too
  EXPECT_TRUE(f.get_bool_or("test.bool", false));
  EXPECT_EQ(f.get_string("test.empty_string"), "");
  EXPECT_EQ(f.get_string_array("test.strings"),
            (std::vector<std::string>{"a", "", "\xe2\x96\x81x"}));
  EXPECT_EQ(f.get_float_array("test.floats"), (std::vector<double>{0.5, -1.0}));
  EXPECT_EQ(f.get_int_array("test.ints"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(f.get_float_array("test.ints"), (std::vector<double>{1, -2, 3}));
  EXPECT_TRUE(f.get_int_array("test.empty_array").empty());
  const GgufValue& nested = f.metadata().at("test.nested");
  ASSERT_EQ(nested.type, GgufValueType::ARRAY);
  ASSERT_EQ(nested.array_type, GgufValueType::ARRAY);
  ASSERT_EQ(nested.array.size(), 2u);
  EXPECT_EQ(nested.array[0].array_type, GgufValueType::UINT16);
  EXPECT_EQ(nested.array[0].array[1].i, 8);
  EXPECT_EQ(nested.array[1].array[0].s, "deep");

  EXPECT_EQ(f.get_int_or("missing", 7), 7);
  EXPECT_EQ(f.get_float_or("missing", 0.25), 0.25);
  EXPECT_TRUE(f.get_bool_or("missing", true));
  EXPECT_FALSE(f.get_string_opt("missing").has_value());
  EXPECT_EQ(f.get_string_opt("general.architecture"), "llama");

  auto expect_accessor_error = [&](const std::function<void()>& call, const std::string& key) {
    try {
      call();
      ADD_FAILURE() << "no error for " << key;
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind(path, 0), 0u) << message;
      EXPECT_NE(message.find(key), std::string::npos) << message;
    }
  };
  expect_accessor_error([&] { f.get_string("missing.key"); }, "missing.key");
  expect_accessor_error([&] { f.get_int("missing.key"); }, "missing.key");
  expect_accessor_error([&] { f.get_string("test.u8"); }, "test.u8");
  expect_accessor_error([&] { f.get_int("test.f32"); }, "test.f32");
  expect_accessor_error([&] { f.get_int("test.u64_huge"); }, "test.u64_huge");
  expect_accessor_error([&] { f.get_int_or("general.architecture", 1); }, "general.architecture");
  expect_accessor_error([&] { f.get_float("test.strings"); }, "test.strings");
  expect_accessor_error([&] { f.get_bool_or("test.u8", false); }, "test.u8");
  expect_accessor_error([&] { f.get_string_array("test.ints"); }, "test.ints");
  expect_accessor_error([&] { f.get_int_array("test.floats"); }, "test.floats");
  expect_accessor_error([&] { f.get_float_array("test.strings"); }, "test.strings");
  expect_accessor_error([&] { f.get_string_array("general.architecture"); }, "general.architecture");
}

TEST(Gguf, TensorLayoutAndData) {
  for (uint64_t alignment : {32u, 64u, 1u, 4096u}) {
    TempDir dir;
    const std::string path = dir.file("tensors.gguf");
    GgufSpec spec = full_spec();
    spec.alignment = alignment;
    if (alignment != 32) {
      spec.kv("general.alignment", kU32, [=](Bytes& b) { b.put<uint32_t>(static_cast<uint32_t>(alignment)); });
    }
    write_file(path, build_gguf(spec));
    const GgufFile f = GgufFile::open(path);
    ASSERT_EQ(f.tensors().size(), 3u);
    const TensorView& embd = f.tensors()[0];
    EXPECT_EQ(embd.name, "token_embd.weight");
    EXPECT_EQ(embd.dims, (std::vector<int64_t>{3, 4}));
    EXPECT_EQ(embd.nbytes, 48u);
    // With general.alignment 1 the data need not be 4-byte aligned: read through memcpy.
    std::vector<float> v(12);
    std::memcpy(v.data(), embd.data, embd.nbytes);
    for (int i = 0; i < 12; ++i) EXPECT_EQ(v[i], static_cast<float>(i)) << "alignment " << alignment;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(embd.data) % alignment, 0u);

    const TensorView* q = f.find_tensor("blk.0.attn_q.weight");
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(q->dtype, DType::Q8_0);
    EXPECT_EQ(q->dims, (std::vector<int64_t>{2, 64}));
    EXPECT_EQ(q->nbytes, 4u * 34);
    EXPECT_EQ(q->data[5], (5 * 7) & 0xFF);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(q->data) % alignment, 0u);

    const TensorView* down = f.find_tensor("blk.0.ffn_down.weight");
    ASSERT_NE(down, nullptr);
    EXPECT_EQ(down->dtype, DType::Q4_K);
    EXPECT_EQ(down->dims, (std::vector<int64_t>{2, 1, 1, 256}));
    EXPECT_EQ(down->numel(), 512);
    EXPECT_EQ(down->nbytes, 2u * 144);
  }
}

TEST(Gguf, Version2AndEmptyFile) {
  TempDir dir;
  GgufSpec spec = full_spec();
  spec.version = 2;
  write_file(dir.file("v2.gguf"), build_gguf(spec));
  EXPECT_EQ(GgufFile::open(dir.file("v2.gguf")).version(), 2u);

  GgufSpec empty;
  write_file(dir.file("empty_model.gguf"), build_gguf(empty));
  const GgufFile f = GgufFile::open(dir.file("empty_model.gguf"));
  EXPECT_TRUE(f.metadata().empty());
  EXPECT_TRUE(f.tensors().empty());
}

// --- malformed files -------------------------------------------------------------------------

TEST(Gguf, MissingAndTinyFiles) {
  TempDir dir;
  expect_open_fails(dir.file("does_not_exist.gguf"), "No such file");
  write_file(dir.file("empty.gguf"), {});
  expect_open_fails(dir.file("empty.gguf"), "not a GGUF file");
  write_file(dir.file("three.gguf"), {'G', 'G', 'U'});
  expect_open_fails(dir.file("three.gguf"));
  fs::create_directory(dir.file("a_directory.gguf"));
  expect_open_fails(dir.file("a_directory.gguf"), "directory");
}

struct Corruption {
  const char* label;
  std::function<void(GgufSpec&)> apply;
  const char* fragment;  // expected in the message
};

TEST(Gguf, CorruptedHeaders) {
  const std::vector<Corruption> cases = {
      {"bad_magic", [](GgufSpec& s) { s.magic = "GGML"; }, "not a GGUF file"},
      {"version1", [](GgufSpec& s) { s.version = 1; }, "version 1"},
      {"version99", [](GgufSpec& s) { s.version = 99; }, "version 99"},
      {"version0", [](GgufSpec& s) { s.version = 0; }, "version 0 (only v2 and v3)"},
      {"byteswapped", [](GgufSpec& s) { s.version = 0x03000000; }, "big-endian"},
      {"huge_n_tensors", [](GgufSpec& s) { s.n_tensors = 1ull << 60; }, "tensors"},
      {"huge_n_kv", [](GgufSpec& s) { s.n_kv = ~0ull; }, "metadata entries"},
      {"extra_kv", [](GgufSpec& s) { s.n_kv = s.kvs.size() + 1; }, ""},
      {"huge_key_length",
       [](GgufSpec& s) { s.kvs.insert(s.kvs.begin(), [](Bytes& b) { b.put<uint64_t>(1ull << 62); }); },
       "string length"},
      {"huge_value_length",
       [](GgufSpec& s) { s.kv("x", kStr, [](Bytes& b) { b.put<uint64_t>(~0ull); }); }, "string length"},
      {"huge_array_count",
       [](GgufSpec& s) { s.kv("arr", kArr, [](Bytes& b) { b.put<uint32_t>(kU32).put<uint64_t>(1ull << 61); }); },
       "arr"},
      {"huge_string_array",
       [](GgufSpec& s) { s.kv("sarr", kArr, [](Bytes& b) { b.put<uint32_t>(kStr).put<uint64_t>(1ull << 40); }); },
       "sarr"},
      {"bad_value_type", [](GgufSpec& s) { s.kv("weird", 13, [](Bytes& b) { b.put<uint32_t>(0); }); },
       "invalid value type 13"},
      {"bad_array_type",
       [](GgufSpec& s) { s.kv("weird", kArr, [](Bytes& b) { b.put<uint32_t>(77).put<uint64_t>(0); }); },
       "invalid value type 77"},
      {"deep_nesting",
       [](GgufSpec& s) {
         s.kv("deep", kArr, [](Bytes& b) {
           for (int i = 0; i < 100; ++i) b.put<uint32_t>(kArr).put<uint64_t>(1);
           b.put<uint32_t>(kU8).put<uint64_t>(0);
         });
       },
       "deep"},
      {"duplicate_key",
       [](GgufSpec& s) { s.kv("test.u8", kU8, [](Bytes& b) { b.put<uint8_t>(1); }); },
       "duplicate metadata key 'test.u8'"},
      {"alignment_not_pow2",
       [](GgufSpec& s) { s.kv("general.alignment", kU32, [](Bytes& b) { b.put<uint32_t>(24); }); },
       "general.alignment 24"},
      {"alignment_zero",
       [](GgufSpec& s) { s.kv("general.alignment", kU32, [](Bytes& b) { b.put<uint32_t>(0); }); },
       "general.alignment"},
      {"alignment_string",
       [](GgufSpec& s) { s.kv("general.alignment", kStr, [](Bytes& b) { b.str("32"); }); },
       "general.alignment"},
      {"n_dims_5", [](GgufSpec& s) { s.tensors[0].ne = {1, 1, 1, 4, 3}; }, "5 dimensions"},
      {"dim_zero", [](GgufSpec& s) { s.tensors[0].ne = {4, 0}; }, "token_embd.weight"},
      {"dim_negative", [](GgufSpec& s) { s.tensors[0].ne = {4, ~0ull}; }, "token_embd.weight"},
      {"numel_overflow", [](GgufSpec& s) { s.tensors[0].ne = {1ull << 32, 1ull << 32}; }, "overflow"},
      {"bytes_overflow",
       [](GgufSpec& s) { s.tensors[0].ne = {1ull << 31, 1ull << 31}; }, "overflow"},
      {"offset_out_of_range", [](GgufSpec& s) { s.tensors[2].offset = 1ull << 40; }, "blk.0.ffn_down.weight"},
      {"offset_huge", [](GgufSpec& s) { s.tensors[2].offset = ~0ull - 31; }, "blk.0.ffn_down.weight"},
      {"offset_misaligned", [](GgufSpec& s) { s.tensors[1].offset = 4; }, "not a multiple of the alignment"},
      {"unknown_type",
       [](GgufSpec& s) { s.tensors[1].type = 99; },
       "tensor 'blk.0.attn_q.weight' has unknown ggml type 99"},
      {"iq_type", [](GgufSpec& s) { s.tensors[1].type = 16; }, "iq2_xxs"},
      {"partial_block", [](GgufSpec& s) { s.tensors[1].ne = {33, 2}; }, "blk.0.attn_q.weight"},
      {"duplicate_tensor", [](GgufSpec& s) { s.tensors[2].name = "token_embd.weight"; },
       "duplicate tensor name 'token_embd.weight'"},
      {"extra_tensor_count", [](GgufSpec& s) { s.n_tensors = 4; }, ""},
  };
  TempDir dir;
  for (const Corruption& c : cases) {
    SCOPED_TRACE(c.label);
    GgufSpec spec = full_spec();
    c.apply(spec);
    const std::string path = dir.file(std::string(c.label) + ".gguf");
    write_file(path, build_gguf(spec));
    expect_open_fails(path, c.fragment);
  }
}

TEST(Gguf, TensorDataPastEndOfFile) {
  TempDir dir;
  std::vector<uint8_t> bytes = build_gguf(full_spec());
  bytes.pop_back();
  write_file(dir.file("short.gguf"), bytes);
  expect_open_fails(dir.file("short.gguf"), "blk.0.ffn_down.weight");
}

// The real model truncated at every offset of its header and at a sample of offsets through
// its tensor data: each must be a clean tq::Error naming the file.
TEST(Gguf, TruncatedRealFileAlwaysFails) {
  TQ_REQUIRE_TESTDATA();
  const GgufFile full = GgufFile::open(kStories);
  const std::vector<uint8_t> bytes = read_file(kStories);
  // The tensors fill the data section to the end of this file, so the header region is
  // everything before the data's span.
  const uint8_t* lowest = full.tensors()[0].data;
  const uint8_t* highest = lowest;
  for (const TensorView& t : full.tensors()) {
    lowest = std::min(lowest, t.data);
    highest = std::max(highest, t.data + t.nbytes);
  }
  const size_t header_region = bytes.size() - static_cast<size_t>(highest - lowest);
  ASSERT_EQ(header_region, 14176u);  // data offset reported by the gguf Python package

  std::vector<size_t> lengths;
  for (size_t n = 0; n <= header_region + 64; ++n) lengths.push_back(n);
  for (size_t n = header_region + 64; n < bytes.size(); n += 997) lengths.push_back(n);
  lengths.push_back(bytes.size() - 1);

  TempDir dir;
  const std::string path = dir.file("truncated.gguf");
  write_file(path, bytes);
  // Shrink one file in place, longest first, rather than writing thousands of files.
  std::sort(lengths.rbegin(), lengths.rend());
  int failures = 0;
  for (size_t n : lengths) {
    ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(n)), 0);
    try {
      GgufFile::open(path);
      ADD_FAILURE() << "truncated at " << n << " opened";
      if (++failures > 5) return;
    } catch (const Error& e) {
      const std::string message = e.what();
      if (message.rfind(path, 0) != 0) {
        ADD_FAILURE() << "truncated at " << n << ": " << message;
        if (++failures > 5) return;
      }
    }
  }
}

TEST(Gguf, TruncatedVocabFileAlwaysFails) {
  TQ_REQUIRE_TESTDATA();
  const std::vector<uint8_t> bytes = read_file(kVocabDir + "/ggml-vocab-llama-spm.gguf");
  // Vocab-only: the header is everything up to the (aligned) end; padding may follow it.
  TempDir dir;
  const std::string path = dir.file("vocab.gguf");
  write_file(path, bytes);
  for (size_t n = bytes.size() - 32; n > 0; n -= std::min<size_t>(n, 1013)) {
    ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(n)), 0);
    EXPECT_THROW(GgufFile::open(path), Error) << "truncated at " << n;
  }
}

// Random byte corruption of a header must give either a valid file or tq::Error, never a crash
// (run under ASan/UBSan to make that check bite).
TEST(Gguf, RandomByteCorruptionNeverCrashes) {
  size_t header_bytes = 0;
  const std::vector<uint8_t> original = build_gguf(full_spec(), &header_bytes);
  std::mt19937 rng(1234);
  TempDir dir;
  const std::string path = dir.file("fuzz.gguf");
  write_file(path, original);
  // Patch bytes in place (and restore them) rather than rewriting the file: much faster.
  std::fstream file(path, std::ios::binary | std::ios::in | std::ios::out);
  auto patch = [&](size_t at, uint8_t value) {
    file.seekp(static_cast<std::streamoff>(at));
    file.put(static_cast<char>(value));
    file.flush();
  };
  int errors = 0;
  for (int iteration = 0; iteration < 3000; ++iteration) {
    std::vector<size_t> positions;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      const size_t at = rng() % header_bytes;
      positions.push_back(at);
      patch(at, (rng() % 2) ? static_cast<uint8_t>(rng()) : static_cast<uint8_t>(0xFF));
    }
    try {
      const GgufFile f = GgufFile::open(path);
      for (const TensorView& t : f.tensors()) {
        ASSERT_LE(t.nbytes, original.size());  // touching the data must be safe
        volatile uint8_t last = t.data[t.nbytes - 1];
        (void)last;
      }
    } catch (const Error& e) {
      ++errors;
      ASSERT_EQ(std::string(e.what()).rfind(path, 0), 0u) << e.what();
    }
    for (size_t at : positions) patch(at, original[at]);
  }
  EXPECT_GT(errors, 100);
}

// --- memory use of claimed array counts ------------------------------------------------------

// A claimed array count is bounded only by the bytes left in the file, and each element costs
// sizeof(GgufValue) (~100 bytes) in memory. These run in a child process whose memory is capped
// a little above what it already uses (memory_cap.h), so an allocation sized by the claim fails
// there as it would on a real machine with a multi-gigabyte file.

// Opens `path` under a memory cap of (current use + file size + headroom) and exits 0 when it
// fails with a tq::Error that names the file and contains every fragment.
[[noreturn]] void open_with_capped_memory(const std::string& path, uint64_t file_size,
                                          const std::vector<std::string>& fragments) {
  constexpr uint64_t kHeadroom = 256ull << 20;
  if (!test::set_memory_cap(test::memory_in_use() + file_size + kHeadroom)) ::_exit(10);
  try {
    GgufFile::open(path);
  } catch (const Error& e) {
    const std::string message = e.what();
    if (message.rfind(path, 0) != 0) {
      std::fprintf(stderr, "message does not start with the path: %s\n", message.c_str());
      ::_exit(2);
    }
    for (const std::string& fragment : fragments) {
      if (message.find(fragment) == std::string::npos) {
        std::fprintf(stderr, "message lacks '%s': %s\n", fragment.c_str(), message.c_str());
        ::_exit(3);
      }
    }
    ::_exit(0);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "std::bad_alloc escaped\n");
    ::_exit(4);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "not a tq::Error: %s\n", e.what());
    ::_exit(5);
  }
  std::fprintf(stderr, "no error\n");
  ::_exit(6);
}

// A string array claiming as many elements as the 64 MiB that follow could hold (8M), whose
// second string is corrupt: the error must be reported without first reserving 8M elements
// (~800 MB) for the claim.
TEST(GgufDeathTest, ArrayCountDoesNotReserveUpFront) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the process may have other threads
  TempDir dir;
  const std::string path = dir.file("claims_8m_strings.gguf");
  Bytes b;
  b.data = {'G', 'G', 'U', 'F'};
  b.put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(1);
  b.str("tokenizer.ggml.tokens").put<uint32_t>(kArr).put<uint32_t>(kStr);
  const size_t count_at = b.data.size();
  b.put<uint64_t>(0);  // patched below
  b.str("a").put<uint64_t>(1ull << 50);
  b.data.resize(count_at + 8 + (64ull << 20), 0);
  const uint64_t count = (b.data.size() - count_at - 8) / 8;  // the most the check lets through
  std::memcpy(b.data.data() + count_at, &count, 8);
  write_file(path, b.data);
  EXPECT_EXIT(open_with_capped_memory(path, b.data.size(), {"string length"}), ::testing::ExitedWithCode(0), "");
}

// A uint8 array whose 8M elements are all really there needs ~800 MB as GgufValues: running
// out of memory must be a tq::Error naming the file and the key, not an escaping bad_alloc.
TEST(GgufDeathTest, OutOfMemoryForAnArrayIsAnError) {
  if (test::kUnderAddressSanitizer) {
    GTEST_SKIP() << "needs an allocation to fail with bad_alloc; ASan ends the process instead";
  }
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the process may have other threads
  TempDir dir;
  const std::string path = dir.file("big_u8_array.gguf");
  constexpr uint64_t kCount = 8ull << 20;
  Bytes b;
  b.data = {'G', 'G', 'U', 'F'};
  b.put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(1);
  b.str("test.big_bytes").put<uint32_t>(kArr).put<uint32_t>(kU8).put<uint64_t>(kCount);
  b.data.resize(b.data.size() + kCount, 7);
  write_file(path, b.data);
  EXPECT_EXIT(open_with_capped_memory(path, b.data.size(), {"test.big_bytes", "out of memory"}),
              ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace tq
