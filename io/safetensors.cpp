// safetensors reader: <u64 LE header length><JSON header><data>. The JSON maps tensor names to
// {dtype, shape, data_offsets=[begin, end)} with offsets relative to the start of the data.
#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "errors/error.h"

namespace tq {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

struct SafetensorsDType {
  DType dtype;
  size_t elem_bytes;
};

std::optional<SafetensorsDType> parse_dtype(const std::string& name) {
  if (name == "F32") return SafetensorsDType{DType::F32, 4};
  if (name == "F16") return SafetensorsDType{DType::F16, 2};
  if (name == "BF16") return SafetensorsDType{DType::BF16, 2};
  return std::nullopt;
}

// A JSON value that must be a non-negative integer (nlohmann stores those as unsigned).
uint64_t header_uint(const json& value, const std::string& path, const std::string& tensor,
                     const char* field) {
  if (!value.is_number_unsigned()) {
    fail("{}: tensor '{}' field '{}' holds {}, expected a non-negative integer", path, tensor,
         field, value.dump());
  }
  return value.get<uint64_t>();
}

json parse_json(const uint8_t* begin, size_t size, const std::string& path, const char* what) {
  try {
    return json::parse(begin, begin + size);
  } catch (const json::exception& e) {
    fail("{}: invalid {} JSON: {}", path, what, e.what());
  }
}

}  // namespace

SafetensorsSet SafetensorsSet::open_file(const std::string& file) {
  SafetensorsSet set;
  set.add_file(file);
  return set;
}

SafetensorsSet SafetensorsSet::open_dir(const std::string& dir) {
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);
  if (!fs::exists(status)) fail("{}: no such directory", dir);
  if (!fs::is_directory(status)) fail("{}: not a directory", dir);

  SafetensorsSet set;
  const fs::path root(dir);
  if (fs::exists(root / kSingleFile)) {
    set.add_file((root / kSingleFile).string());
    return set;
  }

  const std::string index_path = (root / kIndexFile).string();
  if (fs::exists(index_path)) {
    const MappedFile index_file(index_path);
    const json index = parse_json(index_file.data(), index_file.size(), index_path, "index");
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      fail("{}: expected an object with a 'weight_map' object", index_path);
    }
    const json& weight_map = index["weight_map"];
    std::set<std::string> shards;  // each shard is opened once, in a stable order
    for (const auto& [name, shard] : weight_map.items()) {
      if (!shard.is_string()) {
        fail("{}: weight_map entry '{}' is {}, expected a shard file name", index_path, name,
             shard.dump());
      }
      shards.insert(shard.get<std::string>());
    }
    for (const std::string& shard : shards) {
      const std::string shard_path = (root / shard).string();
      try {
        set.add_file(shard_path);
      } catch (const Error& e) {
        fail("{}: shard '{}' cannot be read: {}", index_path, shard, e.what());
      }
    }
    for (const auto& [name, shard] : weight_map.items()) {
      const std::string shard_path = (root / shard.get<std::string>()).string();
      auto it = set.tensor_file_.find(name);
      if (it == set.tensor_file_.end() || it->second != shard_path) {
        fail("{}: tensor '{}' is listed in the index but missing from its shard {}", index_path,
             name, shard_path);
      }
    }
    return set;
  }

  // No index: take every *.safetensors file, in name order so the result is reproducible.
  std::vector<std::string> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(root, ec)) {
    if (entry.path().extension() == ".safetensors" && entry.is_regular_file()) {
      files.push_back(entry.path().string());
    }
  }
  if (ec) fail("{}: cannot list directory: {}", dir, ec.message());
  if (files.empty()) {
    fail("{}: no {}, {} or *.safetensors files in the directory", dir, kSingleFile, kIndexFile);
  }
  std::sort(files.begin(), files.end());
  for (const std::string& file : files) set.add_file(file);
  return set;
}

void SafetensorsSet::add_file(const std::string& path) {
  auto file = std::make_shared<MappedFile>(path);
  const size_t size = file->size();
  if (size < 8) fail("{}: {} bytes is too short for a safetensors header", path, size);
  uint64_t header_len;
  std::memcpy(&header_len, file->data(), sizeof header_len);  // little-endian on disk and host
  if (header_len > size - 8) {
    fail("{}: header length {} runs past the end of the file ({} bytes)", path, header_len, size);
  }
  const json header = parse_json(file->data() + 8, static_cast<size_t>(header_len), path, "header");
  if (!header.is_object()) fail("{}: header is not a JSON object", path);

  const uint8_t* data = file->data() + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  std::vector<TensorView> views;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;  // free-form strings; nothing the engine needs
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("data_offsets")) {
      fail("{}: tensor '{}' entry needs 'dtype', 'shape' and 'data_offsets'", path, name);
    }
    const json& dtype_json = entry["dtype"];
    if (!dtype_json.is_string()) fail("{}: tensor '{}' dtype is not a string", path, name);
    const std::string dtype_name = dtype_json.get<std::string>();
    const std::optional<SafetensorsDType> dtype = parse_dtype(dtype_name);
    if (!dtype) {
      fail("{}: tensor '{}' has unsupported dtype '{}' (supported: F32, F16, BF16)", path, name,
           dtype_name);
    }

    const json& shape = entry["shape"];
    if (!shape.is_array()) fail("{}: tensor '{}' shape is not an array", path, name);
    TensorView view;
    view.name = name;
    view.dtype = dtype->dtype;
    uint64_t numel = 1;
    for (const json& extent_json : shape) {
      const uint64_t extent = header_uint(extent_json, path, name, "shape");
      if (extent > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(numel, extent, &numel)) {
        fail("{}: tensor '{}' element count overflows 64 bits", path, name);
      }
      view.dims.push_back(static_cast<int64_t>(extent));
    }

    const json& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2) {
      fail("{}: tensor '{}' data_offsets must be [begin, end]", path, name);
    }
    const uint64_t begin = header_uint(offsets[0], path, name, "data_offsets");
    const uint64_t end = header_uint(offsets[1], path, name, "data_offsets");
    if (begin > end || end > data_size) {
      fail("{}: tensor '{}' data_offsets [{}, {}] are outside the {} data bytes", path, name,
           begin, end, data_size);
    }
    uint64_t expected_bytes;
    if (__builtin_mul_overflow(numel, dtype->elem_bytes, &expected_bytes)) {
      fail("{}: tensor '{}' byte size overflows 64 bits", path, name);
    }
    if (expected_bytes != end - begin) {
      fail("{}: tensor '{}' of shape {} and dtype {} needs {} bytes but data_offsets span {}",
           path, name, shape.dump(), dtype_name, expected_bytes, end - begin);
    }
    view.data = data + begin;
    view.nbytes = static_cast<size_t>(end - begin);
    views.push_back(std::move(view));
  }

  // No two tensors may share bytes (the safetensors library refuses such files too).
  std::vector<const TensorView*> by_offset;
  for (const TensorView& v : views)
    if (v.nbytes > 0) by_offset.push_back(&v);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorView* a, const TensorView* b) { return a->data < b->data; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorView& prev = *by_offset[i - 1];
    const TensorView& next = *by_offset[i];
    if (next.data < prev.data + prev.nbytes) {
      fail("{}: tensor '{}' data_offsets [{}, {}] overlap tensor '{}' [{}, {}]", path, next.name, next.data - data,
           next.data - data + next.nbytes, prev.name, prev.data - data, prev.data - data + prev.nbytes);
    }
  }

  for (TensorView& view : views) {
    auto existing = tensor_file_.find(view.name);
    if (existing != tensor_file_.end()) {
      fail("{}: tensor '{}' is also in {}", path, view.name, existing->second);
    }
    tensor_file_.emplace(view.name, path);
    std::string name = view.name;
    tensors_.emplace(std::move(name), std::move(view));
  }
  files_.push_back(std::move(file));
}

const TensorView* SafetensorsSet::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::vector<std::string> SafetensorsSet::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& entry : tensors_) out.push_back(entry.first);
  return out;
}

const std::string& SafetensorsSet::source_of(const std::string& name) const {
  auto it = tensor_file_.find(name);
  if (it == tensor_file_.end()) fail("no tensor named '{}' in the safetensors files", name);
  return it->second;
}

}  // namespace tq
