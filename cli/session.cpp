#include "cli/session.h"

#ifdef TQ_HAVE_OPENBLAS
#include <cblas.h>
#endif
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>

#include "errors/error.h"
#include "eval/kv_auto.h"
#include "kv/kv_presets.h"

namespace tq {

void add_model_options(CLI::App* cmd, ModelOptions& o) {
  cmd->add_option("-m,--model", o.model, "GGUF file or Hugging Face model folder (default: bundled SmolLM2-135M-Instruct)");
  cmd->add_option("-t,--threads", o.threads, "threads (default: all cores)")->check(CLI::Range(0, 1024));
  cmd->add_flag("--dequantize-weights", o.dequantize_weights,
                "convert every weight to fp32 at load: the exact float maths of transformers over the dequantized "
                "tensors (default: weights stay as stored, multiplied with 8-bit activations as llama.cpp does)");
  cmd->add_flag("--no-repack", o.no_repack,
                "keep Q4_1, Q8_0, Q4_K and Q6_K matrices in the file's row layout instead of regrouping them 16 "
                "(AVX-512 VNNI) or 8 (AVX2, Q4_1) rows at a time for the GEMV (same results; for comparing the kernels)");
}

void add_device_option(CLI::App* cmd, ModelOptions& o) {
  cmd->add_option("--device", o.device,
                  "where the forward pass runs: cpu, or cuda (the first NVIDIA GPU; weights and the f16/f32 KV "
                  "cache on the device)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
}

namespace {

// Fails naming the mode when `device` cannot hold the cache the flags ask for.
void refuse_device_cache(ComputeDevice device, const CacheOptions& co, const ModelConfig& c) {
  if (device == ComputeDevice::Cpu) return;
  const char* name = compute_device_name(device);
  if (co.kv_cache_dtype.rfind("auto", 0) == 0)
    fail("--device {}: --kv-cache-dtype {} chooses among quantized formats, which the {} backend lacks so far",
         name, co.kv_cache_dtype, name);
  if (const std::string why = device_cache_unsupported(device, cache_shape_for(co, c)); !why.empty())
    fail("--device {}: {}", name, why);
}

}  // namespace

void check_device_cache_flags(const ModelOptions& mo, const CacheOptions& co, const ModelConfig& c) {
  refuse_device_cache(parse_compute_device(mo.device), co, c);
}

void attach_device(const ModelOptions& o, Transformer& model) {
  const ComputeDevice device = parse_compute_device(o.device);
  if (device == ComputeDevice::Cpu) return;
  model.use_device(device);
  std::fprintf(stderr, "tqserve: %s\n", model.describe_device().c_str());
}

void add_cache_options(CLI::App* cmd, CacheOptions& o) {
  cmd->add_option("--kv-cache-dtype", o.kv_cache_dtype,
                  "KV cache mode: a preset (" + kv_preset_names() + ") or a row format for K and V: " +
                      kv_dtype_choices())
      ->capture_default_str();
  cmd->add_option("--kv-cache-dtype-k", o.kv_cache_dtype_k, "element type of keys (default: --kv-cache-dtype)");
  cmd->add_option("--kv-cache-dtype-v", o.kv_cache_dtype_v, "element type of values (default: --kv-cache-dtype)");
  cmd->add_option("--kv-protect-layers", o.protect_layers,
                  "keep the first and last N layers' K/V in f16 (full precision)")
      ->check(CLI::Range(0, 1 << 16));
  const KvWindows w = default_kv_windows();
  cmd->add_option("--kv-sink-tokens", o.sink_tokens,
                  fmt::format("quantized KV: every query reads the first N rows (attention sinks) at full precision "
                              "(default {}; 0: none)", w.sink_tokens))
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--kv-recent-tokens", o.recent_tokens,
                  fmt::format("quantized KV: a query reads its own and the W - 1 rows before it at full precision "
                              "(default {}; 0: none)", w.recent_tokens))
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--kv-window-dtype", o.window_dtype,
                  fmt::format("how window rows are kept, in storage space: f16 or q8_0 (default {})",
                              kv_dtype_name(w.dtype)));
  cmd->add_option("--tq-rotation", o.tq_rotation, "TurboQuant rotation: dense (QR of a Gaussian) or hadamard")
      ->capture_default_str();
  cmd->add_option("--tq-codebook", o.tq_codebook,
                  "TurboQuant codebook law: beta (exact coordinate law) or gaussian (N(0, 1/d))")
      ->capture_default_str();
  cmd->add_option("--tq-seed", o.tq_seed, "seed of the per-layer rotations")->capture_default_str();
  cmd->add_option("--tq-scale", o.tq_scale,
                  "TurboQuant row scale: norm-corrected (exact norm), norm (the paper's), least-squares")
      ->capture_default_str();
  cmd->add_option("--tq-keys", o.tq_keys,
                  "TurboQuant key preconditioning from calibration: plain, centered (mean key row subtracted) or "
                  "smoothed (centered, and channels scaled by key/query energy)")
      ->capture_default_str();
  cmd->add_flag("--tq-center-values", o.tq_center_values, "subtract the calibrated mean value row too");
  cmd->add_option("--kv-chunk-rows", o.kv_chunk_rows,
                  "quantized KV: a prefill chunk reads its own K/V rows as stored (stored: chunking-invariant) "
                  "or unquantized (exact)")
      ->capture_default_str();
  cmd->add_option("--fp-attention", o.fp_attention,
                  "full-precision KV layers: the fast kernel over context parts (fast) or the plain loop's "
                  "arithmetic, one position at a time (exact)")
      ->capture_default_str();
  cmd->add_option("--kv-key-scores", o.kv_key_scores,
                  "2- to 4-bit TurboQuant keys: scores from int8 forms of the query and the codebook with AVX-512 VNNI "
                  "(int8), or from keys decoded to fp32 (fp32)")
      ->capture_default_str();
  cmd->add_option("--kv-value-sums", o.kv_value_sums,
                  "2- to 4-bit TurboQuant values: weighted sums from byte weights and the int8 codebook with AVX-512 "
                  "VNNI (int8), or from values decoded to fp32 (fp32)")
      ->capture_default_str();
  cmd->add_option("--kv-calibration-file", o.calibration_file,
                  "text whose f32 prefill gives the tq modes' per-head centers and outlier channels")
      ->capture_default_str();
  cmd->add_option("--block-size", o.block_size, "tokens per KV cache block")->capture_default_str()->check(CLI::Range(1, 1024));
  cmd->add_option("--max-model-len", o.max_model_len, "context length (default: the model's, at most 8192)")
      ->check(CLI::Range(0, 1 << 24));
}

void apply_threads(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  omp_set_num_threads(threads);
#ifdef TQ_HAVE_OPENBLAS
  openblas_set_num_threads(threads);
#endif
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) items.push_back(item);
  return items;
}

void require_device(const ModelOptions& o) {
  if (const std::string why = compute_device_unavailable(parse_compute_device(o.device)); !why.empty()) {
    std::fprintf(stderr, "tqserve: --device %s: %s\n", o.device.c_str(), why.c_str());
    std::exit(2);
  }
}

LoadedModel load_model_for_cli(const ModelOptions& o, bool with_weights) {
  require_device(o);
  apply_threads(o.threads);
  const std::string path = o.model.empty() ? find_default_model() : o.model;
  const bool tty = isatty(STDERR_FILENO);
  const auto t0 = std::chrono::steady_clock::now();
  int last_percent = -1;
  auto progress = [&](double fraction) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int percent = static_cast<int>(fraction * 100);
    if (!tty || elapsed < 0.3 || percent == last_percent) return;  // only when it takes a moment
    last_percent = percent;
    const int width = 30, filled = percent * width / 100;
    std::fprintf(stderr, "\rloading %s [%.*s%*s] %3d%%", path.c_str(), filled, "##############################",
                 width - filled, "", percent);
    std::fflush(stderr);
  };
  LoadOptions options;
  options.with_weights = with_weights;
  options.dequantize_weights = o.dequantize_weights;
  options.interleave_weights = !o.no_repack;
  LoadedModel m = load_model(path, options, progress);
  if (last_percent >= 0) std::fprintf(stderr, "\n");
  return m;
}

namespace {
KvDtype dtype_flag(const std::string& value, const char* flag) {
  const auto d = parse_kv_dtype(value);
  if (!d) fail("{} '{}' is not one of: {}", flag, value, kv_dtype_choices());
  return *d;
}
}  // namespace

KvCacheShape cache_shape_for(const CacheOptions& o, const ModelConfig& c) {
  KvCacheShape shape;
  shape.num_layers = c.num_layers;
  shape.num_kv_heads = c.num_kv_heads;
  shape.head_dim = c.head_dim;
  shape.block_size = o.block_size;
  const std::optional<KvPreset> preset = find_kv_preset(o.kv_cache_dtype);
  const std::optional<KvAutoTarget> auto_target = parse_kv_auto(o.kv_cache_dtype);
  KvDtype k = KvDtype::F16, v = KvDtype::F16;
  if (preset) {
    k = preset->k, v = preset->v;
  } else if (auto_target) {
    // Per-layer dtypes come from resolve_cache_shape(); tq4h stands for them until then (it
    // turns the windows on, as every candidate below q8_0 does).
    if (!o.kv_cache_dtype_k.empty() || !o.kv_cache_dtype_v.empty())
      fail("--kv-cache-dtype {} chooses K and V per layer; drop --kv-cache-dtype-k/-v", o.kv_cache_dtype);
    k = v = KvDtype::TQ4H;
    shape.preset = auto_target->name();
  } else {
    const auto d = parse_kv_dtype(o.kv_cache_dtype);
    if (!d)
      fail("--kv-cache-dtype '{}' is not a preset ({}), auto[:KLD] or one of: {}", o.kv_cache_dtype, kv_preset_names(),
           kv_dtype_choices());
    k = v = *d;
  }
  if (preset && o.kv_cache_dtype_k.empty() && o.kv_cache_dtype_v.empty()) shape.preset = preset->name;
  shape.k_dtype = o.kv_cache_dtype_k.empty() ? k : dtype_flag(o.kv_cache_dtype_k, "--kv-cache-dtype-k");
  shape.v_dtype = o.kv_cache_dtype_v.empty() ? v : dtype_flag(o.kv_cache_dtype_v, "--kv-cache-dtype-v");
  if (2 * o.protect_layers > c.num_layers)
    fail("--kv-protect-layers {} protects the first and last {} layers, but the model has only {} layers",
         o.protect_layers, o.protect_layers, c.num_layers);
  shape.protect_layers = o.protect_layers;
  const KvWindows defaults = default_kv_windows();
  if (kv_windows_apply_to(shape.k_dtype) || kv_windows_apply_to(shape.v_dtype)) {
    shape.windows.sink_tokens = o.sink_tokens >= 0 ? o.sink_tokens : defaults.sink_tokens;
    shape.windows.recent_tokens = o.recent_tokens >= 0 ? o.recent_tokens : defaults.recent_tokens;
    shape.windows.dtype = o.window_dtype.empty() ? defaults.dtype : dtype_flag(o.window_dtype, "--kv-window-dtype");
    if (shape.windows.dtype != KvDtype::F16 && shape.windows.dtype != KvDtype::Q8_0)
      fail("--kv-window-dtype {} is not one of: f16, q8_0", o.window_dtype);
    // The default q8_0 window rows need head_dim % 32 == 0; other models keep them as f16.
    if (o.window_dtype.empty() && c.head_dim % 32 != 0) shape.windows.dtype = KvDtype::F16;
  }
  const bool hadamard = parse_rotation_kind(o.tq_rotation) == RotationKind::hadamard;
  check_kv_dtype(shape.k_dtype, c.head_dim, hadamard);
  check_kv_dtype(shape.v_dtype, c.head_dim, hadamard);
  return shape;
}

KvQuantOptions quant_options_for(const CacheOptions& o) {
  KvQuantOptions q;
  q.rotation = parse_rotation_kind(o.tq_rotation);
  q.codebook = parse_codebook_kind(o.tq_codebook);
  q.seed = o.tq_seed;
  q.scale_mode = parse_tq_scale_mode(o.tq_scale);
  if (o.tq_keys != "plain" && o.tq_keys != "centered" && o.tq_keys != "smoothed")
    fail("--tq-keys '{}' is not one of: plain, centered, smoothed", o.tq_keys);
  q.center_keys = o.tq_keys != "plain";
  q.scale_keys = o.tq_keys == "smoothed";
  q.center_values = o.tq_center_values;
  if (o.kv_chunk_rows != "stored" && o.kv_chunk_rows != "exact")
    fail("--kv-chunk-rows '{}' is not one of: stored, exact", o.kv_chunk_rows);
  q.exact_chunk_rows = o.kv_chunk_rows == "exact";
  if (o.fp_attention != "fast" && o.fp_attention != "exact")
    fail("--fp-attention '{}' is not one of: fast, exact", o.fp_attention);
  q.exact_fp_attention = o.fp_attention == "exact";
  if (o.kv_key_scores != "int8" && o.kv_key_scores != "fp32")
    fail("--kv-key-scores '{}' is not one of: int8, fp32", o.kv_key_scores);
  q.int8_key_scores = o.kv_key_scores == "int8";
  if (o.kv_value_sums != "int8" && o.kv_value_sums != "fp32")
    fail("--kv-value-sums '{}' is not one of: int8, fp32", o.kv_value_sums);
  q.int8_value_sums = o.kv_value_sums == "int8";
  return q;
}

namespace {
// Whether any layer stores its K (V) side with a dtype for which `pred` holds.
template <class Pred>
bool any_layer(const KvCacheShape& shape, bool keys, Pred pred) {
  for (int l = 0; l < shape.num_layers; ++l)
    if (pred(keys ? shape.k_dtype_of(l) : shape.v_dtype_of(l))) return true;
  return false;
}

std::vector<TokenId> calibration_ids(const CacheOptions& o, const Tokenizer* tokenizer) {
  if (!tokenizer) fail("tq modes need the model's tokenizer to calibrate the cache (or --tq-keys plain without split modes)");
  std::ifstream in(o.calibration_file, std::ios::binary);
  if (!in) fail("cannot read the KV calibration text '{}' (--kv-calibration-file)", o.calibration_file);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return tokenizer->encode_prompt(text, false);
}
}  // namespace

std::unique_ptr<KvCache> make_cache(const CacheOptions& o, const KvCacheShape& shape, int num_blocks,
                                    Transformer& model, const Tokenizer* tokenizer,
                                    std::optional<KvCalibration>* reuse) {
  if (const std::string why = device_cache_unsupported(model.device(), shape); !why.empty())
    fail("--device {}: {}", compute_device_name(model.device()), why);
  const KvQuantOptions q = quant_options_for(o);
  auto either = [&](auto pred) { return any_layer(shape, true, pred) || any_layer(shape, false, pred); };
  const bool split = either(kv_dtype_is_split);
  const bool tq = either(kv_dtype_is_tq);
  const bool affine = q.center_keys || q.scale_keys || q.center_values;
  const bool channels = either(kv_dtype_is_channel_bits);
  std::optional<KvCalibration> local;
  std::optional<KvCalibration>& calibrated = reuse ? *reuse : local;
  // A reused calibration without spectra is redone with them (the affine maps and outlier
  // channels come out the same: they use the text's first max_tokens either way).
  if ((split || (tq && affine) || channels) && (!calibrated || (channels && calibrated->k_spectra.empty()))) {
    KvCalibrationOptions co;
    co.center_keys = q.center_keys;
    co.scale_keys = q.scale_keys;
    co.center_values = q.center_values;
    co.channel_spectra = channels;
    calibrated = calibrate_kv(model, calibration_ids(o, tokenizer), co);
  }
  const KvCalibration cal = calibrated.value_or(KvCalibration{});
  // Affine maps only for TurboQuant sides (KvCache gives them to the layers stored as tq); the
  // q8_0 / q4_0 / q4_0h baselines stay as llama.cpp has them.
  KvAffine affine_maps;
  if (any_layer(shape, true, kv_dtype_is_tq)) {
    affine_maps.k_mean = cal.affine.k_mean;
    affine_maps.k_scale = cal.affine.k_scale;
  }
  if (any_layer(shape, false, kv_dtype_is_tq)) affine_maps.v_mean = cal.affine.v_mean;
  KvChannelCodings codings;
  const int k_bits = kv_dtype_tq_bits(shape.k_dtype).first, v_bits = kv_dtype_tq_bits(shape.v_dtype).first;
  if (kv_dtype_is_channel_bits(shape.k_dtype)) codings.k = channel_codings(cal.k_spectra, k_bits);
  if (kv_dtype_is_channel_bits(shape.v_dtype)) codings.v = channel_codings(cal.v_spectra, v_bits);
  const KvPageHome home = model.device() == ComputeDevice::Cpu ? KvPageHome::Host : KvPageHome::Device;
  return std::make_unique<KvCache>(shape, num_blocks, q, cal.outliers, affine_maps, codings, home);
}

KvCacheShape resolve_cache_shape(const CacheOptions& o, const ModelConfig& c, Transformer& model,
                                 const Tokenizer* tokenizer, std::optional<KvCalibration>* reuse,
                                 std::optional<KvAutoMeasurement>* reuse_auto) {
  refuse_device_cache(model.device(), o, c);  // eval's modes come here without the CLI's check
  KvCacheShape shape = cache_shape_for(o, c);
  const std::optional<KvAutoTarget> target = parse_kv_auto(o.kv_cache_dtype);
  if (!target) return shape;
  std::optional<KvCalibration> local;
  std::optional<KvCalibration>& calibrated = reuse ? *reuse : local;
  std::optional<KvAutoMeasurement> local_auto;
  std::optional<KvAutoMeasurement>& measured = reuse_auto ? *reuse_auto : local_auto;
  const auto factory = [&](const KvCacheShape& s, int blocks) { return make_cache(o, s, blocks, model, tokenizer, &calibrated); };
  const std::vector<TokenId> ids = calibration_ids(o, tokenizer);  // read and tokenized once for both steps
  const KvAutoOptions auto_options;
  if (!measured) {
    measured = measure_kv_layers(model, ids, shape, factory, auto_options, [](const std::string& p) {
      std::fprintf(stderr, "\r%s", p.c_str());
    });
    std::fprintf(stderr, "\n");
  }
  const KvAutoChoice choice =
      choose_kv_layers(model, ids, shape, factory, *measured, *target, auto_options);
  shape.k_layers = choice.k;
  shape.v_layers = choice.v;
  std::string layers;
  for (const std::string& m : shape.layer_modes()) layers += (layers.empty() ? "" : " ") + m;
  const std::string kept = target->bits > 0 ? fmt::format("at {:.2f} bits per element (budget {:g})",
                                                         shape.bits_per_element_at(1024), target->bits)
                                           : fmt::format("{} {:g} x {:g}",
                                                         choice.measured_kld <= target->kld * auto_options.calibration_margin
                                                             ? "within"
                                                             : "OVER",
                                                         auto_options.calibration_margin, target->kld);
  std::fprintf(stderr, "KV auto: KLD %.4f %s on the calibration text (predicted %.4f); layers (k/v): %s\n",
               choice.measured_kld, kept.c_str(), choice.predicted_kld, layers.c_str());
  return shape;
}

std::string describe_cache(const KvCache& cache) {
  const KvCacheShape& s = cache.shape();
  std::string out = fmt::format("KV cache: {}, {} blocks of {} tokens ({} tokens), {:.1f} MiB, {} bytes/token",
                                s.describe(), cache.num_blocks(), s.block_size, cache.num_blocks() * s.block_size,
                                double(cache.total_bytes()) / (1 << 20), s.bytes_per_token());
  if (const KvWindowStore* w = cache.window_store())
    out += fmt::format(" (windows: {} window blocks, {:.1f} MiB)", w->num_window_blocks(),
                       double(cache.window_arena_bytes()) / (1 << 20));
  return out;
}

int resolve_max_model_len(const CacheOptions& o, const ModelConfig& c) {
  const int len = o.max_model_len > 0 ? o.max_model_len : std::min(c.max_position, 8192);
  if (len > c.max_position) fail("--max-model-len {} exceeds the model's context length {}", len, c.max_position);
  return len;
}

std::unique_ptr<Session> open_session(const ModelOptions& mo, const CacheOptions& co) {
  auto session = std::make_unique<Session>();
  Session& s = *session;
  s.model = load_model_for_cli(mo);
  const ModelConfig& c = s.model.config;
  s.max_model_len = resolve_max_model_len(co, c);
  const int blocks = (s.max_model_len + co.block_size - 1) / co.block_size;
  s.transformer = std::make_unique<Transformer>(s.model.config, s.model.weights);
  check_device_cache_flags(mo, co, c);
  attach_device(mo, *s.transformer);  // before the cache, whose rows then live on the device
  std::optional<KvCalibration> calibration;
  const KvCacheShape shape = resolve_cache_shape(co, c, *s.transformer, s.model.tokenizer.get(), &calibration);
  s.cache = make_cache(co, shape, blocks, *s.transformer, s.model.tokenizer.get(), &calibration);
  s.transformer->prepare_cache(*s.cache);
  if (co.log_cache) std::fprintf(stderr, "%s\n", describe_cache(*s.cache).c_str());
  return session;
}

}  // namespace tq
