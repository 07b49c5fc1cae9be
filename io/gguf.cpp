// GGUF reader. The whole header is parsed from the memory map through a bounds-checked cursor;
// nothing is trusted: every count is capped by the bytes that remain, every product is
// overflow-checked, and every tensor must lie inside the file.
#include "io/gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <new>
#include <unordered_set>

#include "errors/error.h"

namespace tq {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader loads little-endian fields directly");

namespace {

constexpr uint32_t kMaxDims = 4;
constexpr uint64_t kDefaultAlignment = 32;
constexpr int kMaxArrayNesting = 8;  // real files nest at most once; bounds the recursion

const char* value_type_name(GgufValueType type) {
  switch (type) {
    case GgufValueType::UINT8: return "uint8";
    case GgufValueType::INT8: return "int8";
    case GgufValueType::UINT16: return "uint16";
    case GgufValueType::INT16: return "int16";
    case GgufValueType::UINT32: return "uint32";
    case GgufValueType::INT32: return "int32";
    case GgufValueType::FLOAT32: return "float32";
    case GgufValueType::BOOL: return "bool";
    case GgufValueType::STRING: return "string";
    case GgufValueType::ARRAY: return "array";
    case GgufValueType::UINT64: return "uint64";
    case GgufValueType::INT64: return "int64";
    case GgufValueType::FLOAT64: return "float64";
  }
  return "invalid";
}

bool is_valid_value_type(uint32_t raw) { return raw <= static_cast<uint32_t>(GgufValueType::FLOAT64); }

bool is_integer_type(GgufValueType type) {
  switch (type) {
    case GgufValueType::UINT8: case GgufValueType::INT8: case GgufValueType::UINT16:
    case GgufValueType::INT16: case GgufValueType::UINT32: case GgufValueType::INT32:
    case GgufValueType::UINT64: case GgufValueType::INT64:
      return true;
    default:
      return false;
  }
}

bool is_float_type(GgufValueType type) {
  return type == GgufValueType::FLOAT32 || type == GgufValueType::FLOAT64;
}

// The fewest bytes one value of `type` can occupy: lets a claimed element count be checked
// against the bytes left before anything is allocated for it.
uint64_t min_encoded_size(GgufValueType type) {
  switch (type) {
    case GgufValueType::UINT8: case GgufValueType::INT8: case GgufValueType::BOOL: return 1;
    case GgufValueType::UINT16: case GgufValueType::INT16: return 2;
    case GgufValueType::UINT32: case GgufValueType::INT32: case GgufValueType::FLOAT32: return 4;
    case GgufValueType::UINT64: case GgufValueType::INT64: case GgufValueType::FLOAT64: return 8;
    case GgufValueType::STRING: return 8;   // length prefix
    case GgufValueType::ARRAY: return 12;   // element type + count
  }
  return 1;
}

// ggml type ids that ggml knows but tqserve does not; named in errors so the user learns what
// the file holds rather than just a number.
const char* foreign_ggml_type_name(uint32_t id) {
  switch (id) {
    case 4: case 5: return "removed q4_2/q4_3";
    case 16: return "iq2_xxs";
    case 17: return "iq2_xs";
    case 18: return "iq3_xxs";
    case 19: return "iq1_s";
    case 20: return "iq4_nl";
    case 21: return "iq3_s";
    case 22: return "iq2_s";
    case 23: return "iq4_xs";
    case 29: return "iq1_m";
    case 34: return "tq1_0";
    case 35: return "tq2_0";
    case 39: return "mxfp4";
    default: return nullptr;
  }
}

class Cursor {
 public:
  Cursor(const std::string& path, const uint8_t* data, size_t size)
      : path_(path), data_(data), size_(size) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }
  void set_context(std::string context) { context_ = std::move(context); }

  template <typename T>
  T read() {
    require(sizeof(T));
    T value;
    std::memcpy(&value, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  std::string read_string() {
    const uint64_t length = read<uint64_t>();
    if (length > remaining()) {
      fail("{}: string length {} at offset {} exceeds the {} bytes left in the file ({})", path_,
           length, pos_ - 8, remaining(), context_);
    }
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(length));
    pos_ += static_cast<size_t>(length);
    return s;
  }

 private:
  void require(size_t n) {
    if (n > remaining()) {
      fail("{}: truncated: {} needs {} bytes at offset {} but the file ends at {}", path_,
           context_, n, pos_, size_);
    }
  }

  const std::string& path_;
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  std::string context_ = "the header";
};

GgufValue read_value(Cursor& cursor, GgufValueType type, const std::string& path,
                     const std::string& key, int depth) {
  GgufValue value;
  value.type = type;
  auto set_signed = [&](int64_t v) {
    value.i = v;
    value.u = v >= 0 ? static_cast<uint64_t>(v) : 0;
  };
  auto set_unsigned = [&](uint64_t v) {
    value.u = v;
    value.i = v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                  ? static_cast<int64_t>(v) : 0;
  };
  switch (type) {
    case GgufValueType::UINT8: set_unsigned(cursor.read<uint8_t>()); break;
    case GgufValueType::INT8: set_signed(cursor.read<int8_t>()); break;
    case GgufValueType::UINT16: set_unsigned(cursor.read<uint16_t>()); break;
    case GgufValueType::INT16: set_signed(cursor.read<int16_t>()); break;
    case GgufValueType::UINT32: set_unsigned(cursor.read<uint32_t>()); break;
    case GgufValueType::INT32: set_signed(cursor.read<int32_t>()); break;
    case GgufValueType::UINT64: set_unsigned(cursor.read<uint64_t>()); break;
    case GgufValueType::INT64: set_signed(cursor.read<int64_t>()); break;
    case GgufValueType::FLOAT32: value.f = cursor.read<float>(); break;
    case GgufValueType::FLOAT64: value.f = cursor.read<double>(); break;
    case GgufValueType::BOOL: set_unsigned(cursor.read<uint8_t>() != 0 ? 1 : 0); break;
    case GgufValueType::STRING: value.s = cursor.read_string(); break;
    case GgufValueType::ARRAY: {
      if (depth >= kMaxArrayNesting) {
        fail("{}: metadata key '{}' nests arrays deeper than {} levels", path, key,
             kMaxArrayNesting);
      }
      const uint32_t raw_elem_type = cursor.read<uint32_t>();
      if (!is_valid_value_type(raw_elem_type)) {
        fail("{}: metadata key '{}' is an array of invalid value type {}", path, key,
             raw_elem_type);
      }
      value.array_type = static_cast<GgufValueType>(raw_elem_type);
      const uint64_t count = cursor.read<uint64_t>();
      const uint64_t max_count = cursor.remaining() / min_encoded_size(value.array_type);
      if (count > max_count) {
        fail("{}: metadata key '{}' claims {} {} elements but only {} bytes remain", path, key,
             count, value_type_name(value.array_type), cursor.remaining());
      }
      // The claim is only bounded by the bytes left (which may be gigabytes of tensor data),
      // and each element costs sizeof(GgufValue) in memory, far more than its encoding: reserve
      // a bounded amount and let push_back grow as elements are actually read.
      constexpr uint64_t kMaxArrayReserve = uint64_t{1} << 16;
      try {
        value.array.reserve(static_cast<size_t>(std::min({count, max_count, kMaxArrayReserve})));
        for (uint64_t n = 0; n < count; ++n) {
          value.array.push_back(read_value(cursor, value.array_type, path, key, depth + 1));
        }
      } catch (const std::bad_alloc&) {
        fail("{}: out of memory reading the {} {} elements of metadata key '{}'", path, count,
             value_type_name(value.array_type), key);
      }
      break;
    }
  }
  return value;
}

uint64_t read_alignment(const std::map<std::string, GgufValue>& metadata, const std::string& path) {
  auto it = metadata.find("general.alignment");
  if (it == metadata.end()) return kDefaultAlignment;
  const GgufValue& v = it->second;
  if (!is_integer_type(v.type)) {
    fail("{}: general.alignment has type {}, expected an unsigned integer", path,
         value_type_name(v.type));
  }
  // Negative signed values were stored with u == 0, so this one test rejects them too.
  if (v.u == 0 || !std::has_single_bit(v.u) || v.u > (uint64_t{1} << 30)) {
    fail("{}: general.alignment {} is not a power of two between 1 and 2^30", path,
         v.u != 0 ? fmt::format("{}", v.u) : fmt::format("{}", v.i));
  }
  return v.u;
}

// Multiplies into `acc`; false on int64 overflow.
bool checked_mul(int64_t& acc, int64_t factor) { return !__builtin_mul_overflow(acc, factor, &acc); }

const GgufValue& expect_array(const GgufValue& v, const std::string& path, const std::string& key,
                              const char* expected) {
  if (v.type != GgufValueType::ARRAY) {
    fail("{}: metadata key '{}' has type {}, expected {}", path, key, value_type_name(v.type),
         expected);
  }
  return v;
}

}  // namespace

GgufFile GgufFile::open(const std::string& path) {
  GgufFile gguf;
  gguf.path_ = path;
  gguf.file_ = std::make_shared<MappedFile>(path);
  const uint8_t* base = gguf.file_->data();
  const size_t file_size = gguf.file_->size();
  Cursor cursor(gguf.path_, base, file_size);

  // --- fixed header ---
  if (file_size < 4 || std::memcmp(base, "GGUF", 4) != 0) {
    fail("{}: not a GGUF file (the first 4 bytes are not 'GGUF')", path);
  }
  cursor.read<uint32_t>();
  cursor.set_context("the GGUF version");
  gguf.version_ = cursor.read<uint32_t>();
  if (gguf.version_ == 1) {
    fail("{}: GGUF version 1 is no longer supported (only v2 and v3); re-convert the model", path);
  }
  if (gguf.version_ != 2 && gguf.version_ != 3) {
    const bool looks_byte_swapped = gguf.version_ != 0 && (gguf.version_ & 0xFFFFu) == 0;
    fail("{}: unsupported GGUF version {} (only v2 and v3){}", path, gguf.version_,
         looks_byte_swapped ? "; the file may be big-endian" : "");
  }
  cursor.set_context("the tensor and metadata counts");
  const uint64_t n_tensors = cursor.read<uint64_t>();
  const uint64_t n_kv = cursor.read<uint64_t>();
  // Smallest possible entries: key/name length prefix + type + 1 byte of value, and
  // name length prefix + n_dims + type + offset.
  constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
  constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;
  if (n_kv > cursor.remaining() / kMinKvBytes) {
    fail("{}: header claims {} metadata entries but the remaining {} bytes cannot hold them",
         path, n_kv, cursor.remaining());
  }

  // --- metadata ---
  for (uint64_t k = 0; k < n_kv; ++k) {
    cursor.set_context(fmt::format("metadata entry {}", k));
    std::string key = cursor.read_string();
    cursor.set_context(fmt::format("metadata key '{}'", key));
    if (gguf.metadata_.count(key) != 0) fail("{}: duplicate metadata key '{}'", path, key);
    const uint32_t raw_type = cursor.read<uint32_t>();
    if (!is_valid_value_type(raw_type)) {
      fail("{}: metadata key '{}' has invalid value type {}", path, key, raw_type);
    }
    GgufValue value = read_value(cursor, static_cast<GgufValueType>(raw_type), path, key, 0);
    gguf.metadata_.emplace(std::move(key), std::move(value));
  }
  const uint64_t alignment = read_alignment(gguf.metadata_, path);

  // --- tensor infos ---
  struct PendingTensor {
    TensorView view;
    uint64_t offset;
  };
  std::vector<PendingTensor> pending;
  if (n_tensors > cursor.remaining() / kMinTensorInfoBytes) {
    fail("{}: header claims {} tensors but the remaining {} bytes cannot hold their infos", path,
         n_tensors, cursor.remaining());
  }
  pending.reserve(static_cast<size_t>(n_tensors));
  std::unordered_set<std::string> seen_names;
  for (uint64_t t = 0; t < n_tensors; ++t) {
    cursor.set_context(fmt::format("tensor info {}", t));
    TensorView view;
    view.name = cursor.read_string();
    cursor.set_context(fmt::format("tensor '{}'", view.name));
    if (!seen_names.insert(view.name).second) fail("{}: duplicate tensor name '{}'", path, view.name);

    const uint32_t n_dims = cursor.read<uint32_t>();
    if (n_dims > kMaxDims) {
      fail("{}: tensor '{}' has {} dimensions (at most {})", path, view.name, n_dims, kMaxDims);
    }
    std::vector<int64_t> ne(n_dims);  // innermost first, as stored
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t extent = cursor.read<uint64_t>();
      if (extent == 0 || extent > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail("{}: tensor '{}' has invalid size {} in dimension {}", path, view.name,
             static_cast<int64_t>(extent), d);
      }
      ne[d] = static_cast<int64_t>(extent);
      if (!checked_mul(numel, ne[d])) {
        fail("{}: tensor '{}' element count overflows 64 bits", path, view.name);
      }
    }

    const uint32_t type_id = cursor.read<uint32_t>();
    const std::optional<DTypeTraits> traits = dtype_traits(type_id);
    if (!traits) {
      const char* foreign = foreign_ggml_type_name(type_id);
      if (foreign != nullptr) {
        fail("{}: tensor '{}' has unknown ggml type {} ({}, not supported by tqserve)", path,
             view.name, type_id, foreign);
      }
      fail("{}: tensor '{}' has unknown ggml type {}", path, view.name, type_id);
    }
    view.dtype = static_cast<DType>(type_id);
    const int64_t row = n_dims > 0 ? ne[0] : 1;
    if (row % traits->block_elems != 0) {
      fail("{}: tensor '{}' rows of {} elements are not a whole number of {} blocks ({} elements)",
           path, view.name, row, traits->name, traits->block_elems);
    }
    int64_t nbytes = numel / traits->block_elems;
    if (!checked_mul(nbytes, traits->block_bytes)) {
      fail("{}: tensor '{}' byte size overflows 64 bits", path, view.name);
    }
    view.nbytes = static_cast<size_t>(nbytes);
    view.dims.assign(ne.rbegin(), ne.rend());

    const uint64_t offset = cursor.read<uint64_t>();
    if (offset % alignment != 0) {
      fail("{}: tensor '{}' has offset {}, not a multiple of the alignment {}", path, view.name,
           offset, alignment);
    }
    pending.push_back({std::move(view), offset});
  }

  // --- data section: starts at the next multiple of the alignment ---
  const uint64_t header_end = cursor.pos();
  const uint64_t data_start = (header_end + alignment - 1) / alignment * alignment;
  for (PendingTensor& p : pending) {
    const uint64_t available = data_start <= file_size ? file_size - data_start : 0;
    if (p.offset > available || p.view.nbytes > available - p.offset) {
      fail("{}: tensor '{}' data (offset {} + {} bytes after the data start {}) runs past the end "
           "of the file ({} bytes)",
           path, p.view.name, p.offset, p.view.nbytes, data_start, file_size);
    }
    p.view.data = base + data_start + p.offset;
  }
  // No two tensors may share bytes (llama.cpp requires them packed in order; a file whose
  // offsets overlap is corrupt, and a write through one view would change another).
  std::vector<const PendingTensor*> by_offset;
  by_offset.reserve(pending.size());
  for (const PendingTensor& p : pending) by_offset.push_back(&p);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const PendingTensor* a, const PendingTensor* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const PendingTensor& prev = *by_offset[i - 1];
    const PendingTensor& next = *by_offset[i];
    if (next.offset < prev.offset + prev.view.nbytes) {
      fail("{}: tensor '{}' data [{}, {}) overlaps tensor '{}' data [{}, {})", path, next.view.name, next.offset,
           next.offset + next.view.nbytes, prev.view.name, prev.offset, prev.offset + prev.view.nbytes);
    }
  }
  for (PendingTensor& p : pending) gguf.tensors_.push_back(std::move(p.view));
  return gguf;
}

const TensorView* GgufFile::find_tensor(const std::string& name) const {
  for (const TensorView& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

namespace {

const GgufValue& require_key(const std::map<std::string, GgufValue>& metadata,
                             const std::string& path, const std::string& key,
                             const char* expected) {
  auto it = metadata.find(key);
  if (it == metadata.end()) fail("{}: metadata key '{}' ({}) is missing", path, key, expected);
  return it->second;
}

int64_t as_int(const GgufValue& v, const std::string& path, const std::string& key) {
  if (!is_integer_type(v.type)) {
    fail("{}: metadata key '{}' has type {}, expected an integer", path, key,
         value_type_name(v.type));
  }
  if (v.type == GgufValueType::UINT64 &&
      v.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    fail("{}: metadata key '{}' value {} does not fit a signed 64-bit integer", path, key, v.u);
  }
  return v.i;
}

double as_float(const GgufValue& v, const std::string& path, const std::string& key) {
  if (is_float_type(v.type)) return v.f;
  if (v.type == GgufValueType::UINT64) return static_cast<double>(v.u);
  if (is_integer_type(v.type)) return static_cast<double>(v.i);
  fail("{}: metadata key '{}' has type {}, expected a number", path, key,
       value_type_name(v.type));
}

}  // namespace

std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue& v = require_key(metadata_, path_, key, "string");
  if (v.type != GgufValueType::STRING) {
    fail("{}: metadata key '{}' has type {}, expected string", path_, key,
         value_type_name(v.type));
  }
  return v.s;
}

std::optional<std::string> GgufFile::get_string_opt(const std::string& key) const {
  if (!has(key)) return std::nullopt;
  return get_string(key);
}

int64_t GgufFile::get_int(const std::string& key) const {
  return as_int(require_key(metadata_, path_, key, "integer"), path_, key);
}

int64_t GgufFile::get_int_or(const std::string& key, int64_t fallback) const {
  return has(key) ? get_int(key) : fallback;
}

double GgufFile::get_float(const std::string& key) const {
  return as_float(require_key(metadata_, path_, key, "number"), path_, key);
}

double GgufFile::get_float_or(const std::string& key, double fallback) const {
  return has(key) ? get_float(key) : fallback;
}

bool GgufFile::get_bool_or(const std::string& key, bool fallback) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) return fallback;
  if (it->second.type != GgufValueType::BOOL) {
    fail("{}: metadata key '{}' has type {}, expected bool", path_, key,
         value_type_name(it->second.type));
  }
  return it->second.i != 0;
}

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
  const char* expected = "array of string";
  const GgufValue& v = expect_array(require_key(metadata_, path_, key, expected), path_, key,
                                    expected);
  if (v.array_type != GgufValueType::STRING) {
    fail("{}: metadata key '{}' is an array of {}, expected {}", path_, key,
         value_type_name(v.array_type), expected);
  }
  std::vector<std::string> out;
  out.reserve(v.array.size());
  for (const GgufValue& e : v.array) out.push_back(e.s);
  return out;
}

std::vector<double> GgufFile::get_float_array(const std::string& key) const {
  const char* expected = "array of numbers";
  const GgufValue& v = expect_array(require_key(metadata_, path_, key, expected), path_, key,
                                    expected);
  if (!is_float_type(v.array_type) && !is_integer_type(v.array_type)) {
    fail("{}: metadata key '{}' is an array of {}, expected {}", path_, key,
         value_type_name(v.array_type), expected);
  }
  std::vector<double> out;
  out.reserve(v.array.size());
  for (const GgufValue& e : v.array) out.push_back(as_float(e, path_, key));
  return out;
}

std::vector<int64_t> GgufFile::get_int_array(const std::string& key) const {
  const char* expected = "array of integers";
  const GgufValue& v = expect_array(require_key(metadata_, path_, key, expected), path_, key,
                                    expected);
  if (!is_integer_type(v.array_type)) {
    fail("{}: metadata key '{}' is an array of {}, expected {}", path_, key,
         value_type_name(v.array_type), expected);
  }
  std::vector<int64_t> out;
  out.reserve(v.array.size());
  for (const GgufValue& e : v.array) out.push_back(as_int(e, path_, key));
  return out;
}

}  // namespace tq
