// safetensors reader: single files, sharded sets with an index, the *.safetensors fallback, and
// malformed files, all written into a temporary directory by the test.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "errors/error.h"
#include "io/safetensors.h"
#include "kernels/dequantize.h"

namespace tq {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "tq_safetensors_test_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string str() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// <u64 LE header length><header><data>; `header_len` overrides the true length when given.
void write_raw(const std::string& path, const std::string& header, const std::string& data,
               std::optional<uint64_t> header_len = std::nullopt) {
  const uint64_t len = header_len.value_or(header.size());
  std::string bytes(reinterpret_cast<const char*>(&len), 8);
  write_bytes(path, bytes + header + data);
}

struct Tensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string data;  // raw little-endian bytes
};

std::string f32_bytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4);
}

std::string u16_bytes(const std::vector<uint16_t>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * 2);
}

// Like the safetensors library, pads the header with spaces to a multiple of 8 bytes so that
// the data start (and every tensor, given offsets that are multiples of their element size)
// is aligned; `pad_header = false` makes a valid but unaligned file.
void write_safetensors(const std::string& path, const std::vector<Tensor>& tensors,
                       bool pad_header = true) {
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::string data;
  for (const Tensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + t.data.size()}}};
    data += t.data;
  }
  std::string text = header.dump();
  if (pad_header) text.resize((text.size() + 7) / 8 * 8, ' ');
  write_raw(path, text, data);
}

// One tensor entry with explicit fields, for malformed headers.
void write_one(const std::string& path, const json& entry, const std::string& data) {
  write_raw(path, json{{"w", entry}}.dump(), data);
}

template <typename Fn>
void expect_error(Fn&& call, const std::vector<std::string>& fragments) {
  try {
    call();
    ADD_FAILURE() << "expected an error mentioning " << fragments.at(0);
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const std::string& fragment : fragments) {
      EXPECT_NE(message.find(fragment), std::string::npos)
          << "message lacks '" << fragment << "': " << message;
    }
  }
}

TEST(Safetensors, SingleFile) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  write_safetensors(path, {
      {"lm_head.weight", "F32", {2, 3}, f32_bytes({1, 2, 3, 4, 5, 6})},
      {"norm.weight", "F16", {4}, u16_bytes({0x3C00, 0xC000, 0x0000, 0x7BFF})},
      {"embed.weight", "BF16", {2, 2}, u16_bytes({0x3F80, 0xC040, 0x0000, 0x4000})},
      {"scalar", "F32", {}, f32_bytes({7.5f})},
      {"empty", "F32", {0, 4}, ""},
  });
  for (const SafetensorsSet& set :
       {SafetensorsSet::open_dir(dir.str()), SafetensorsSet::open_file(path)}) {
    EXPECT_EQ(set.names(), (std::vector<std::string>{"embed.weight", "empty", "lm_head.weight",
                                                     "norm.weight", "scalar"}));
    const TensorView* head = set.find("lm_head.weight");
    ASSERT_NE(head, nullptr);
    EXPECT_EQ(head->dtype, DType::F32);
    EXPECT_EQ(head->dims, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(head->nbytes, 24u);
    EXPECT_EQ(reinterpret_cast<const float*>(head->data)[5], 6.0f);

    const TensorView* norm = set.find("norm.weight");
    ASSERT_NE(norm, nullptr);
    EXPECT_EQ(norm->dtype, DType::F16);
    std::vector<float> values(4);
    dequantize_row(norm->dtype, norm->data, values.data(), 4);
    EXPECT_EQ(values, (std::vector<float>{1.0f, -2.0f, 0.0f, 65504.0f}));

    const TensorView* embed = set.find("embed.weight");
    ASSERT_NE(embed, nullptr);
    EXPECT_EQ(embed->dtype, DType::BF16);
    dequantize_row(embed->dtype, embed->data, values.data(), 4);
    EXPECT_EQ(values, (std::vector<float>{1.0f, -3.0f, 0.0f, 2.0f}));

    for (const std::string& name : set.names()) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(set.find(name)->data) % 4, 0u) << name;
    }
    EXPECT_TRUE(set.find("scalar")->dims.empty());
    EXPECT_EQ(set.find("scalar")->numel(), 1);
    EXPECT_EQ(set.find("empty")->nbytes, 0u);
    EXPECT_EQ(set.find("__metadata__"), nullptr);
    EXPECT_EQ(set.find("missing"), nullptr);
    EXPECT_EQ(set.source_of("norm.weight"), path);
    expect_error([&] { set.source_of("missing"); }, {"missing"});
  }
}

TEST(Safetensors, UnpaddedHeaderIsAcceptedUnaligned) {
  TempDir dir;
  const std::string path = dir.file("odd.safetensors");
  write_safetensors(path, {{"w", "F32", {3}, f32_bytes({1, 2, 3})}}, /*pad_header=*/false);
  const SafetensorsSet set = SafetensorsSet::open_file(path);
  const TensorView* w = set.find("w");
  ASSERT_NE(w, nullptr);
  std::vector<float> values(3);
  std::memcpy(values.data(), w->data, w->nbytes);  // the data may be misaligned here
  EXPECT_EQ(values, (std::vector<float>{1, 2, 3}));
}

TEST(Safetensors, ShardedWithIndex) {
  TempDir dir;
  const std::string shard1 = dir.file("model-00001-of-00002.safetensors");
  const std::string shard2 = dir.file("model-00002-of-00002.safetensors");
  write_safetensors(shard1, {{"a.weight", "F32", {2}, f32_bytes({1, 2})},
                             {"b.weight", "F32", {1}, f32_bytes({3})}});
  write_safetensors(shard2, {{"c.weight", "BF16", {1}, u16_bytes({0x3F80})}});
  // Not in the index: must be ignored, even though its tensor names collide.
  write_safetensors(dir.file("stray.safetensors"), {{"a.weight", "F32", {1}, f32_bytes({9})}});
  const json index = {{"metadata", {{"total_size", 14}}},
                      {"weight_map",
                       {{"a.weight", "model-00001-of-00002.safetensors"},
                        {"b.weight", "model-00001-of-00002.safetensors"},
                        {"c.weight", "model-00002-of-00002.safetensors"}}}};
  write_bytes(dir.file("model.safetensors.index.json"), index.dump(2));

  const SafetensorsSet set = SafetensorsSet::open_dir(dir.str());
  EXPECT_EQ(set.names(), (std::vector<std::string>{"a.weight", "b.weight", "c.weight"}));
  EXPECT_EQ(set.source_of("a.weight"), shard1);
  EXPECT_EQ(set.source_of("c.weight"), shard2);
  EXPECT_EQ(reinterpret_cast<const float*>(set.find("a.weight")->data)[1], 2.0f);
  EXPECT_EQ(reinterpret_cast<const float*>(set.find("b.weight")->data)[0], 3.0f);
  EXPECT_EQ(set.find("c.weight")->dtype, DType::BF16);
}

TEST(Safetensors, FallbackToAllFilesSorted) {
  TempDir dir;
  write_safetensors(dir.file("b.safetensors"), {{"y", "F32", {1}, f32_bytes({2})}});
  write_safetensors(dir.file("a.safetensors"), {{"x", "F32", {1}, f32_bytes({1})}});
  write_bytes(dir.file("README.md"), "not a tensor file");
  const SafetensorsSet set = SafetensorsSet::open_dir(dir.str());
  EXPECT_EQ(set.names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(set.source_of("x"), dir.file("a.safetensors"));

  // The same tensor in two files is ambiguous.
  write_safetensors(dir.file("c.safetensors"), {{"x", "F32", {1}, f32_bytes({3})}});
  expect_error([&] { SafetensorsSet::open_dir(dir.str()); },
               {dir.file("c.safetensors"), "'x'", dir.file("a.safetensors")});
}

TEST(Safetensors, MissingPaths) {
  TempDir dir;
  expect_error([&] { SafetensorsSet::open_dir(dir.file("nope")); }, {dir.file("nope")});
  write_bytes(dir.file("plain"), "x");
  expect_error([&] { SafetensorsSet::open_dir(dir.file("plain")); }, {dir.file("plain"), "not a directory"});
  fs::create_directory(dir.file("empty_dir"));
  expect_error([&] { SafetensorsSet::open_dir(dir.file("empty_dir")); },
               {dir.file("empty_dir"), "*.safetensors"});
  expect_error([&] { SafetensorsSet::open_file(dir.file("missing.safetensors")); },
               {dir.file("missing.safetensors"), "No such file"});
}

TEST(Safetensors, MalformedFiles) {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  const std::string four_floats = f32_bytes({1, 2, 3, 4});
  auto open = [&] { SafetensorsSet::open_file(path); };

  write_bytes(path, "");
  expect_error(open, {path, "too short"});
  write_bytes(path, "abc");
  expect_error(open, {path, "too short"});

  write_raw(path, "{\"w\": {\"dtype\": ", four_floats);
  expect_error(open, {path, "invalid header JSON"});
  write_raw(path, "[1, 2]", "");
  expect_error(open, {path, "not a JSON object"});
  write_raw(path, "{}", "", 1ull << 40);
  expect_error(open, {path, "header length"});
  write_raw(path, "{}", "", ~0ull);
  expect_error(open, {path, "header length"});

  const json good = {{"dtype", "F32"}, {"shape", {2, 2}}, {"data_offsets", {0, 16}}};
  write_one(path, good, four_floats);
  EXPECT_NO_THROW(open());

  struct Case {
    const char* label;
    json entry;
    std::vector<std::string> fragments;
  };
  const std::vector<Case> cases = {
      {"beyond", {{"dtype", "F32"}, {"shape", {2, 4}}, {"data_offsets", {0, 32}}}, {"'w'", "data_offsets"}},
      {"begin_after_end", {{"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {8, 4}}}, {"'w'", "data_offsets"}},
      {"huge_offsets", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {~0ull - 3, ~0ull}}}, {"'w'"}},
      {"shape_mismatch", {{"dtype", "F32"}, {"shape", {3}}, {"data_offsets", {0, 16}}}, {"'w'", "needs 12 bytes"}},
      {"dtype_width_mismatch", {{"dtype", "F16"}, {"shape", {2, 2}}, {"data_offsets", {0, 16}}}, {"'w'", "F16"}},
      {"shape_overflow", {{"dtype", "F32"}, {"shape", {1ull << 62, 1ull << 62}}, {"data_offsets", {0, 16}}}, {"'w'", "overflow"}},
      {"i64", {{"dtype", "I64"}, {"shape", {2}}, {"data_offsets", {0, 16}}}, {"'w'", "unsupported dtype 'I64'"}},
      {"f64", {{"dtype", "F64"}, {"shape", {2}}, {"data_offsets", {0, 16}}}, {"'w'", "unsupported dtype 'F64'"}},
      {"f8", {{"dtype", "F8_E4M3"}, {"shape", {16}}, {"data_offsets", {0, 16}}}, {"unsupported dtype 'F8_E4M3'"}},
      {"dtype_not_string", {{"dtype", 5}, {"shape", {4}}, {"data_offsets", {0, 16}}}, {"'w'", "dtype"}},
      {"negative_dim", {{"dtype", "F32"}, {"shape", {-4}}, {"data_offsets", {0, 16}}}, {"'w'", "shape"}},
      {"float_dim", {{"dtype", "F32"}, {"shape", {4.0}}, {"data_offsets", {0, 16}}}, {"'w'", "shape"}},
      {"shape_not_array", {{"dtype", "F32"}, {"shape", 4}, {"data_offsets", {0, 16}}}, {"'w'", "shape"}},
      {"three_offsets", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0, 8, 16}}}, {"'w'", "data_offsets"}},
      {"negative_offset", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {-16, 0}}}, {"'w'", "data_offsets"}},
      {"missing_offsets", {{"dtype", "F32"}, {"shape", {4}}}, {"'w'", "data_offsets"}},
      {"not_object", json::array({1, 2}), {"'w'"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    write_one(path, c.entry, four_floats);
    std::vector<std::string> fragments = c.fragments;
    fragments.push_back(path);
    expect_error(open, fragments);
  }
}

TEST(Safetensors, BrokenIndex) {
  TempDir dir;
  const std::string index_path = dir.file("model.safetensors.index.json");
  write_safetensors(dir.file("shard1.safetensors"), {{"a", "F32", {1}, f32_bytes({1})}});

  write_bytes(index_path, "{\"weight_map\": {");
  expect_error([&] { SafetensorsSet::open_dir(dir.str()); }, {index_path, "invalid index JSON"});

  write_bytes(index_path, R"({"metadata": {}})");
  expect_error([&] { SafetensorsSet::open_dir(dir.str()); }, {index_path, "weight_map"});

  write_bytes(index_path, R"({"weight_map": {"a": 3}})");
  expect_error([&] { SafetensorsSet::open_dir(dir.str()); }, {index_path, "'a'"});

  write_bytes(index_path, R"({"weight_map": {"a": "shard1.safetensors", "b": "shard2.safetensors"}})");
  expect_error([&] { SafetensorsSet::open_dir(dir.str()); },
               {index_path, "shard2.safetensors", "No such file"});

  write_bytes(index_path, R"({"weight_map": {"a": "shard1.safetensors", "z": "shard1.safetensors"}})");
  expect_error([&] { SafetensorsSet::open_dir(dir.str()); },
               {index_path, "'z'", dir.file("shard1.safetensors")});

  // A broken shard is reported through the index.
  write_raw(dir.file("shard2.safetensors"), "{not json", "");
  write_bytes(index_path, R"({"weight_map": {"a": "shard1.safetensors", "b": "shard2.safetensors"}})");
  expect_error([&] { SafetensorsSet::open_dir(dir.str()); },
               {index_path, dir.file("shard2.safetensors"), "invalid header JSON"});
}

}  // namespace
}  // namespace tq
