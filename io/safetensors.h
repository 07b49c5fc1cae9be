// Hugging Face safetensors: one file, or the shards listed by model.safetensors.index.json.
// Memory-mapped; header JSON, dtypes, shapes and offsets are checked against the file size.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/mapped_file.h"
#include "io/tensor_view.h"

namespace tq {

class SafetensorsSet {
 public:
  // `dir` holds model.safetensors, or model.safetensors.index.json and its shards, or
  // (fallback) any *.safetensors files. Throws tq::Error naming the file and problem.
  static SafetensorsSet open_dir(const std::string& dir);
  static SafetensorsSet open_file(const std::string& file);

  const TensorView* find(const std::string& name) const;  // nullptr if absent
  std::vector<std::string> names() const;                 // sorted
  const std::string& source_of(const std::string& name) const;  // path of the file holding it

 private:
  void add_file(const std::string& path);
  std::vector<std::shared_ptr<MappedFile>> files_;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> tensor_file_;
};

}  // namespace tq
