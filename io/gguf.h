// GGUF v2/v3 reader (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md).
// Every offset, count and shape is bounds-checked; a malformed file throws tq::Error whose
// message starts with the file path and names the problem (never a crash, never UB).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/mapped_file.h"
#include "io/tensor_view.h"

namespace tq {

enum class GgufValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};

struct GgufValue {
  GgufValueType type = GgufValueType::UINT8;
  // Scalars: integers in `i` (unsigned values that fit), floats in `f`, bools in `i` (0/1).
  int64_t i = 0;
  uint64_t u = 0;  // unsigned integers also here, exact
  double f = 0;
  std::string s;
  GgufValueType array_type = GgufValueType::UINT8;  // when type == ARRAY
  std::vector<GgufValue> array;
};

class GgufFile {
 public:
  static GgufFile open(const std::string& path);  // throws tq::Error

  uint32_t version() const { return version_; }
  const std::string& path() const { return path_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const std::vector<TensorView>& tensors() const { return tensors_; }

  bool has(const std::string& key) const { return metadata_.count(key) != 0; }
  const TensorView* find_tensor(const std::string& name) const;  // nullptr if absent

  // Typed accessors: throw tq::Error (file + key + expected type) when the key is missing or
  // of another type. The *_or variants return `fallback` when missing.
  std::string get_string(const std::string& key) const;
  std::optional<std::string> get_string_opt(const std::string& key) const;
  int64_t get_int(const std::string& key) const;  // any integer type
  int64_t get_int_or(const std::string& key, int64_t fallback) const;
  double get_float(const std::string& key) const;  // float or integer types
  double get_float_or(const std::string& key, double fallback) const;
  bool get_bool_or(const std::string& key, bool fallback) const;
  std::vector<std::string> get_string_array(const std::string& key) const;
  std::vector<double> get_float_array(const std::string& key) const;
  std::vector<int64_t> get_int_array(const std::string& key) const;

 private:
  std::string path_;
  uint32_t version_ = 0;
  std::shared_ptr<MappedFile> file_;
  std::map<std::string, GgufValue> metadata_;
  std::vector<TensorView> tensors_;
};

}  // namespace tq
