// The KV cache modes users pick by size (`--kv-cache-dtype tq4 | tq3 | tq2`), and the windows
// every quantized mode gets by default. Each preset is the configuration that measured best in
// its class on SmolLM2-135M (docs/FIDELITY.md, "Presets"): at most 4.5, 3.5 and 2.6 bits per
// element at 1024 tokens, windows included. The row formats stay reachable on their own through
// `--kv-cache-dtype-k/-v` (tq4 there is the fp32-norm format).
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "kv/kv_dtype.h"
#include "kv/kv_windows.h"

namespace tq {

struct KvPreset {
  std::string_view name;
  KvDtype k, v;
};

// The preset of that name, or none.
std::optional<KvPreset> find_kv_preset(std::string_view name);
// "tq4, tq3, tq2"
std::string kv_preset_names();

// The default windows: 4 sink rows and the 24 most recent rows, kept as q8_0 in storage space
// (at 1024 tokens 0.23 bits per element at head_dim 64). q8_0 rows spent on more recent rows
// measured better than f16 rows at the same bits.
KvWindows default_kv_windows();
// Whether windows apply to a side stored as `dtype`: quantized below the window rows' q8_0
// (full-precision and q8_0 sides are read as stored).
bool kv_windows_apply_to(KvDtype dtype);

}  // namespace tq
