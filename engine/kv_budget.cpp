#include "engine/kv_budget.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <fstream>
#include <sstream>

#include "errors/error.h"

namespace tq {

size_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  size_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

size_t parse_byte_size(const std::string& text, const std::string& flag) {
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (const std::exception&) {
    fail("{} '{}' is not a size (examples: 4GiB, 512MiB, 1000000)", flag, text);
  }
  std::string unit = text.substr(pos);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale = 1;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "k" || unit == "kb") scale = 1e3;
  else if (unit == "m" || unit == "mb") scale = 1e6;
  else if (unit == "g" || unit == "gb") scale = 1e9;
  else if (unit == "kib") scale = 1024.0;
  else if (unit == "mib") scale = 1024.0 * 1024;
  else if (unit == "gib") scale = 1024.0 * 1024 * 1024;
  else fail("{} '{}' has an unknown unit '{}' (B, KB, MB, GB, KiB, MiB, GiB)", flag, text, unit);
  if (!(value > 0) || !std::isfinite(value * scale)) fail("{} '{}' must be a positive size", flag, text);
  return static_cast<size_t>(value * scale);
}

int min_blocks_for(const KvSizing& s) { return (s.max_model_len + s.block_size - 1) / s.block_size; }

namespace {

[[noreturn]] void too_small(const KvSizing& s, size_t have_bytes, const std::string& what) {
  const size_t need = size_t(min_blocks_for(s)) * s.bytes_per_block;
  const size_t fits_tokens = have_bytes / s.bytes_per_block * s.block_size;
  fail("{}: one request of --max-model-len {} needs {:.1f} MiB of {} KV cache ({} bytes/token), but {:.1f} MiB {}. "
       "The longest context that fits is {} tokens: lower --max-model-len or give the cache more memory "
       "(--kv-cache-memory, --memory-utilization).",
       "not enough memory for the KV cache", s.max_model_len, double(need) / (1 << 20), s.mode,
       s.bytes_per_block / s.block_size, double(have_bytes) / (1 << 20), what, fits_tokens);
}

}  // namespace

std::unique_ptr<KvCache> allocate_kv_cache(const KvSizing& s, const std::function<std::unique_ptr<KvCache>(int)>& make,
                                           std::vector<std::string>* log) {
  if (s.bytes_per_block == 0 || s.block_size <= 0 || s.max_model_len <= 0) fail("KV sizing: empty block or context");
  const int min_blocks = min_blocks_for(s);
  const size_t budget_blocks = s.budget_bytes > s.fixed_bytes ? (s.budget_bytes - s.fixed_bytes) / s.bytes_per_block : 0;
  if (budget_blocks < size_t(min_blocks)) too_small(s, s.budget_bytes, "is the budget");
  int blocks = static_cast<int>(std::min<size_t>(budget_blocks, size_t(1) << 30));
  for (;;) {
    try {
      std::unique_ptr<KvCache> cache = make(blocks);
      cache->prefault();  // resident from the start: no growth under load, no late OOM
      return cache;
    } catch (const KvAllocationError& e) {
      if (log) log->push_back(fmt::format("{}; retrying with {} blocks", e.what(), std::max(blocks / 2, min_blocks)));
      if (blocks == min_blocks) too_small(s, size_t(blocks) * s.bytes_per_block, "could not be allocated");
      blocks = std::max(blocks / 2, min_blocks);
    }
  }
}

}  // namespace tq
