// Calibration of the TurboQuant cache: per layer and KV head, the affine change of variables
// applied before quantizing (kv/kv_row_codec.h KvAffine: mean K and V rows, per-channel key
// scales from the key and query energies) and the outlier channels of the split modes.
//
// A split row spends more bits on one half of its channels, so which half matters. Keys are not
// isotropic: a few channels of each KV head carry most of the energy (SmolLM2-135M: the top half
// of RoPE pairs holds 75-93 % of the key energy, and which pairs differ per head and layer; see
// docs/FIDELITY.md), and the same channels do so for every token. So the outlier group is fixed
// per layer and KV head by calibration: one full-precision prefill of a fixed text at start-up;
// the group is the half of the channels with the largest mean square. For keys, channels are
// ranked in RoPE pairs (a pair's energy does not change with position, so both members move
// together); values are ranked channel by channel. Being a pure function of the model and the
// text, the grouping is the same in every process, so outputs are reproducible and the prefix
// cache can share blocks across requests.
#pragma once
#include <string>
#include <vector>

#include "kv/kv_row_codec.h"
#include "model/transformer.h"

namespace tq {

// Default calibration text: the GNU GPL version 3, shipped by Debian's base-files on every system.
inline constexpr const char* kDefaultCalibrationFile = "/usr/share/common-licenses/GPL-3";

struct KvCalibration {
  KvAffine affine;            // what was asked for (empty vectors otherwise)
  OutlierPartition outliers;  // channels ranked by the energy of the rows the quantizer will see
  // Channel-bit dtypes (quant/channel_bits.h), when asked: per layer and KV head, the principal
  // axes of the rows the quantizer will see (after the affine map). Keys: each row weighted by
  // the attention the calibration text's queries pay it while it is coded (outside the default
  // windows), the axes ranked with the query energy along them; values: plain second moment.
  std::vector<std::vector<ChannelSpectrum>> k_spectra, v_spectra;  // [layer][kv head]
};

struct KvCalibrationOptions {
  bool center_keys = true;
  bool scale_keys = false;
  bool center_values = false;
  int max_tokens = 512;       // tokens for the affine maps and outlier channels
  bool channel_spectra = false;
  int channel_tokens = 1024;  // tokens for the channel spectra (fewer measured worse, docs/FIDELITY.md)
};

// Per layer, the codings a channel-bit side at `bits` uses (empty spectra: empty result).
std::vector<ChannelCoding> channel_codings(const std::vector<std::vector<ChannelSpectrum>>& spectra, int bits);

// Runs `ids` (its first max_tokens, or channel_tokens when spectra are asked and that is more)
// through the model with an f32 cache, observing post-RoPE queries and keys, and derives the
// cache's affine maps, outlier channels and, when asked, channel spectra.
KvCalibration calibrate_kv(Transformer& model, const std::vector<TokenId>& ids, const KvCalibrationOptions& options);

// The key scale of one KV head from per-channel key variance and query energy (both averaged
// over RoPE pairs): s_j = (var_k / e_q)^(1/4), normalized to geometric mean 1, ratios clamped to
// [1e-3, 1e3] around it.
std::vector<float> key_scale(const std::vector<double>& key_var, const std::vector<double>& query_energy,
                             RopePairing pairing);

// Channel order from per-channel energies: outliers (the larger half) first, both halves in
// ascending channel order. pairs: rank RoPE pairs (pairing as given) instead of single channels.
std::vector<int> outlier_order(const std::vector<double>& energy, bool pairs, RopePairing pairing);

}  // namespace tq
