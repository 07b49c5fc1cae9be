#include "kv/kv_presets.h"

namespace tq {

namespace {
constexpr KvPreset kPresets[] = {
    {"tq4", KvDtype::TQ4P, KvDtype::TQ4P},
    {"tq3", KvDtype::TQ3H, KvDtype::TQ3H},
    {"tq2", KvDtype::TQ2H, KvDtype::TQ2H},
};
}  // namespace

std::optional<KvPreset> find_kv_preset(std::string_view name) {
  for (const KvPreset& p : kPresets)
    if (p.name == name) return p;
  return std::nullopt;
}

std::string kv_preset_names() {
  std::string out;
  for (const KvPreset& p : kPresets) out += (out.empty() ? "" : ", ") + std::string(p.name);
  return out;
}

KvWindows default_kv_windows() {
  KvWindows w;
  w.sink_tokens = 4;
  w.recent_tokens = 24;
  w.dtype = KvDtype::Q8_0;
  return w;
}

bool kv_windows_apply_to(KvDtype dtype) { return !kv_dtype_is_fp(dtype) && dtype != KvDtype::Q8_0; }

}  // namespace tq
