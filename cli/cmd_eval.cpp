// `tqserve eval quant | kl | niah`: the fidelity measurements of the quantized KV cache
// (eval/quant_distortion.h, eval/kl_divergence.h, eval/niah.h), as tables, JSON and PNG plots.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>

#include "cli/commands.h"
#include "cli/session.h"
#include "errors/error.h"
#include "eval/kl_divergence.h"
#include "eval/niah.h"
#include "eval/plot.h"
#include "eval/quant_distortion.h"

namespace tq {
namespace {

std::string read_texts(const std::vector<std::string>& files) {
  if (files.empty()) fail("give at least one --text-file");
  std::string text;
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) fail("cannot read the text file '{}'", f);
    text.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    text += "\n";
  }
  return text;
}

int window_number(const std::string& item, size_t from, const std::string& mode) {
  try {
    size_t used = 0;
    const int n = std::stoi(item.substr(from), &used);
    if (n >= 0 && from + used == item.size()) return n;
  } catch (const std::exception&) {
  }
  fail("mode '{}': '{}' is not a window item (none, sN, rN, cA-B, cA-, clastN)", mode, item);
}

// The windows after a mode's '@': items joined by '+': "none", "s4" (sink rows), "r32" (recent
// rows), "q8" (window rows kept as q8_0 instead of f16), and for --breakdown "cA-B" / "cA-" (only rows [A, B) / from A coded) and "clastN" (only
// the last N rows coded).
KvWindows parse_mode_windows(const std::string& spec, const std::string& mode) {
  KvWindows w;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, '+')) {
    if (item == "none") continue;
    if (item == "q8") {
      w.dtype = KvDtype::Q8_0;
      continue;
    }
    if (item.rfind("clast", 0) == 0) {
      w.coded_last = window_number(item, 5, mode);
    } else if (item.size() > 1 && item[0] == 'c') {
      const size_t dash = item.find('-');
      if (dash == std::string::npos) window_number(item, item.size(), mode);  // fails, naming the item
      w.coded_from = window_number(item.substr(0, dash), 1, mode);
      if (dash + 1 < item.size()) w.coded_to = window_number(item, dash + 1, mode);
    } else if (item.size() > 1 && item[0] == 's') {
      w.sink_tokens = window_number(item, 1, mode);
    } else if (item.size() > 1 && item[0] == 'r') {
      w.recent_tokens = window_number(item, 1, mode);
    } else {
      window_number(item, item.size(), mode);
    }
  }
  return w;
}

// A mode is a dtype ("tq4", applied to K and V) or "K/V" ("tq4/q8_0"), optionally followed by
// "@windows" (parse_mode_windows); without it the --kv-sink-tokens / --kv-recent-tokens flags apply.
struct EvalMode {
  CacheOptions options;
  std::optional<KvWindows> windows;
};

EvalMode mode_options(CacheOptions base, const std::string& mode) {
  EvalMode m;
  const size_t at = mode.find('@');
  const std::string dtypes = mode.substr(0, at);
  if (at != std::string::npos) m.windows = parse_mode_windows(mode.substr(at + 1), mode);
  const size_t slash = dtypes.find('/');
  if (slash == std::string::npos) {
    base.kv_cache_dtype = dtypes;
    base.kv_cache_dtype_k.clear();
    base.kv_cache_dtype_v.clear();
  } else {
    base.kv_cache_dtype_k = dtypes.substr(0, slash);
    base.kv_cache_dtype_v = dtypes.substr(slash + 1);
  }
  m.options = base;
  return m;
}

// --breakdown: each mode quantizing only K or only V, over all rows and over one position
// range at a time (the first 4 rows, rows 4-63, the query's last 128 rows, the rest).
std::vector<std::string> breakdown_modes(const std::vector<std::string>& modes) {
  std::vector<std::string> out;
  for (const std::string& m : modes) {
    if (m.find_first_of("/@") != std::string::npos)
      fail("--breakdown takes plain dtypes (it quantizes K and V apart itself), not '{}'", m);
    for (const std::string& side : {m + "/f32", "f32/" + m})
      for (const char* range : {"@none", "@c0-4", "@c4-64", "@clast128", "@c64-+r128"}) out.push_back(side + range);
  }
  return out;
}

void progress_line(const std::string& s) {
  std::fprintf(stderr, "\r%s   ", s.c_str());
  std::fflush(stderr);
}

// ---- quant ---------------------------------------------------------------------------------

struct QuantFlags {
  int samples = 20000;
  std::string codebook = "beta";
  std::string rotation = "dense";
  bool json = false;
};

int run_quant(const QuantFlags& f) {
  QuantDistortionOptions o;
  o.samples = f.samples;
  o.codebook = parse_codebook_kind(f.codebook);
  o.rotation = parse_rotation_kind(f.rotation);
  const auto rows = measure_quant_distortion(o);
  nlohmann::json j = {{"samples", o.samples}, {"codebook", f.codebook}, {"rotation", f.rotation}, {"rows", nlohmann::json::array()}};
  for (const auto& r : rows)
    j["rows"].push_back({{"d", r.d}, {"bits", r.bits}, {"mse", r.mse}, {"mse_norm_corrected", r.mse_norm_corrected},
                         {"paper_mse", r.paper_mse}, {"lower_bound", r.lower_bound}, {"ip_error", r.ip_error},
                         {"ip_bias", r.ip_bias}, {"ip_error_prod", r.ip_error_prod}, {"ip_bias_prod", r.ip_bias_prod},
                         {"paper_ip_prod", r.paper_ip_prod}});
  if (f.json) {
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("TurboQuant on %d random unit vectors per row (%s codebook, %s rotation)\n", o.samples,
              f.codebook.c_str(), f.rotation.c_str());
  std::printf("%4s %4s %9s %9s %9s %9s | %10s %7s | %10s %7s %10s\n", "d", "bits", "mse", "mse_nc", "paper", "4^-b",
              "ip_err", "slope", "ip_prod", "slope", "paper_prod");
  for (const auto& r : rows)
    std::printf("%4d %4d %9.5f %9.5f %9.4f %9.5f | %10.3e %7.4f | %10.3e %7.4f %10.3e\n", r.d, r.bits, r.mse,
                r.mse_norm_corrected, r.paper_mse, r.lower_bound, r.ip_error, r.ip_bias, r.ip_error_prod, r.ip_bias_prod,
                r.paper_ip_prod);
  return 0;
}

// ---- kl ------------------------------------------------------------------------------------

struct KlFlags {
  ModelOptions model;
  CacheOptions cache;
  std::vector<std::string> text_files;
  int ctx = 1024;
  int max_windows = 0;
  int prefill_chunk = KlEvalOptions{}.chunk;
  std::string modes = "q8_0,q4_0,q4_0h,tq4,tq3.5,tq3,tq2.5,tq2";
  std::string reference = "f32";
  std::string plot = "kld_vs_bits.png";
  std::string from_json;  // re-print and re-plot a saved --json result instead of measuring
  bool json = false;
  bool breakdown = false;
};

int report_kl(const KlFlags& f, const KlEvalResult& r, size_t text_tokens);

// Before any measuring: a --plot that this build cannot draw (TQ_SLIM: no libgd) is an error.
void require_plots(const std::string& path) {
  if (!path.empty() && !png_plots_available())
    fail("--plot {}: this build has no PNG plots (configured with TQ_SLIM); give --plot ''", path);
}

// Modes differ only in dtypes, so they share one calibration (computed at the first mode that
// needs it).
CacheFactory factory(const CacheOptions& base, Session& s) {
  auto calibration = std::make_shared<std::optional<KvCalibration>>();
  auto auto_measurement = std::make_shared<std::optional<KvAutoMeasurement>>();
  return [&base, &s, calibration, auto_measurement](const std::string& mode, int blocks) {
    const EvalMode m = mode_options(base, mode);
    // auto measures its choice with the windows it will run with, which @windows would change after.
    if (m.windows && parse_kv_auto(m.options.kv_cache_dtype))
      fail("eval mode '{}': auto modes take the windows of --kv-sink-tokens/--kv-recent-tokens, not @windows", mode);
    KvCacheShape shape = resolve_cache_shape(m.options, s.model.config, *s.transformer, s.model.tokenizer.get(),
                                             calibration.get(), auto_measurement.get());
    if (m.windows) shape.windows = *m.windows;
    return make_cache(m.options, shape, blocks, *s.transformer, s.model.tokenizer.get(), calibration.get());
  };
}

KlEvalResult kl_result_from_json(const std::string& path, int* ctx, size_t* text_tokens) {
  std::ifstream in(path);
  if (!in) fail("cannot read '{}' (--from-json)", path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.contains("modes")) fail("'{}' is not the JSON of `tqserve eval kl --json`", path);
  KlEvalResult r;
  r.reference = j.value("reference", "");
  r.tokens = j.value("tokens", 0);
  r.windows = j.value("windows", 0);
  *ctx = j.value("ctx", 0);
  *text_tokens = j.value("text_tokens", size_t{0});
  for (const auto& m : j["modes"]) {
    KlModeResult x;
    x.mode = m.value("mode", "");
    x.bits_per_element = m.value("bits_per_element", 0.0);
    x.kv_bytes_per_token = m.value("kv_bytes_per_token", size_t{0});
    x.windows = m.value("windows", "none");
    x.kld_mean = m.value("kld_mean", 0.0), x.kld_median = m.value("kld_median", 0.0);
    x.kld_p99 = m.value("kld_p99", 0.0), x.kld_max = m.value("kld_max", 0.0);
    x.top1 = m.value("top1", 0.0), x.ppl = m.value("ppl", 0.0), x.ppl_ref = m.value("ppl_ref", 0.0);
    r.modes.push_back(x);
  }
  return r;
}

int run_kl(KlFlags& f) {
  f.cache.log_cache = false;
  require_plots(f.plot);
  if (!f.from_json.empty()) {
    size_t text_tokens = 0;
    const KlEvalResult r = kl_result_from_json(f.from_json, &f.ctx, &text_tokens);
    return report_kl(f, r, text_tokens);
  }
  auto session = open_session(f.model, f.cache);
  Session& s = *session;
  if (!s.model.tokenizer) fail("eval kl needs the model's tokenizer");
  const std::vector<TokenId> ids = s.model.tokenizer->encode(read_texts(f.text_files), false);
  KlEvalOptions o;
  o.ctx = f.ctx;
  o.chunk = f.prefill_chunk;
  o.max_windows = f.max_windows;
  auto modes = split_list(f.modes);
  if (modes.empty()) fail("--kv-cache-dtype lists no mode");
  if (f.breakdown) modes = breakdown_modes(modes);
  const KlEvalResult r = run_kl_eval(*s.transformer, ids, f.reference, modes, factory(f.cache, s), o, progress_line);
  std::fprintf(stderr, "\n");
  return report_kl(f, r, ids.size());
}

int report_kl(const KlFlags& f, const KlEvalResult& r, size_t text_tokens) {
  nlohmann::json j = {{"reference", r.reference}, {"tokens", r.tokens}, {"windows", r.windows}, {"ctx", f.ctx},
                      {"text_tokens", text_tokens}, {"modes", nlohmann::json::array()}};
  LineChart chart{"KL divergence from the " + f.reference + " KV cache", "stored bits per element",
                  "mean KLD (nats, log scale)", {}, true};
  for (const auto& m : r.modes) {
    j["modes"].push_back({{"mode", m.mode}, {"bits_per_element", m.bits_per_element},
                          {"kv_bytes_per_token", m.kv_bytes_per_token}, {"kld_mean", m.kld_mean},
                          {"kld_median", m.kld_median}, {"kld_p99", m.kld_p99}, {"kld_max", m.kld_max},
                          {"top1", m.top1}, {"ppl", m.ppl}, {"ppl_ref", m.ppl_ref}, {"windows", m.windows}});
    chart.series.push_back({m.mode, {m.bits_per_element}, {m.kld_mean}, false});
  }
  const bool plot = !f.plot.empty();
  if (plot) write_line_chart_png(chart, f.plot);
  if (f.json) {
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("KL divergence against the %s KV cache: %d scored positions in %d windows of %d tokens\n",
              r.reference.c_str(), r.tokens, r.windows, f.ctx);
  std::printf("%-22s %9s %11s %10s %10s %10s %8s %9s %9s\n", "mode", "bits/elem", "bytes/token", "kld_mean",
              "kld_median", "kld_p99", "top1", "ppl", "Δppl");
  for (const auto& m : r.modes)
    std::printf("%-22s %9.3f %11zu %10.5f %10.5f %10.5f %7.2f%% %9.4f %+9.4f\n", m.mode.c_str(), m.bits_per_element,
                m.kv_bytes_per_token, m.kld_mean, m.kld_median, m.kld_p99, 100 * m.top1, m.ppl, m.ppl - m.ppl_ref);
  if (!r.modes.empty()) std::printf("reference perplexity %.4f\n", r.modes[0].ppl_ref);
  if (plot) std::printf("plot: %s\n", f.plot.c_str());
  return 0;
}

// ---- niah ----------------------------------------------------------------------------------

struct NiahFlags {
  ModelOptions model;
  CacheOptions cache;
  std::vector<std::string> text_files;
  std::string contexts = "1024,2048,4096,8192";
  int depths = 10;
  std::string modes = "f16,q4_0h,tq4,tq3.5";
  std::string plot = "niah";
  bool json = false;
};

int run_niah_cmd(NiahFlags& f) {
  f.cache.log_cache = false;
  require_plots(f.plot);
  NiahOptions o;
  o.contexts.clear();
  for (const std::string& c : split_list(f.contexts)) {
    try {
      o.contexts.push_back(std::stoi(c));
    } catch (const std::exception&) {
      fail("--ctx '{}' is not a number", c);
    }
  }
  o.depths = f.depths;
  if (f.cache.max_model_len == 0) f.cache.max_model_len = *std::max_element(o.contexts.begin(), o.contexts.end());
  auto session = open_session(f.model, f.cache);
  Session& s = *session;
  if (!s.model.tokenizer) fail("eval niah needs the model's tokenizer");
  const bool plot = !f.plot.empty();
  const auto modes = split_list(f.modes);
  if (modes.empty()) fail("--kv-cache-dtype lists no mode");
  const auto results = run_niah(*s.transformer, *s.model.tokenizer, s.model.stop_ids, read_texts(f.text_files), modes,
                                factory(f.cache, s), o, progress_line);
  std::fprintf(stderr, "\n");
  nlohmann::json j = {{"modes", nlohmann::json::array()}};
  for (const auto& r : results) {
    nlohmann::json cells = nlohmann::json::array();
    for (const auto& c : r.cells)
      cells.push_back({{"ctx", c.ctx}, {"depth", c.depth}, {"found", c.found}, {"answer", c.answer}});
    j["modes"].push_back({{"mode", r.mode}, {"accuracy", r.accuracy}, {"cells", cells}});
    if (plot) {
      HeatMap map{"needle found (" + r.mode + ")", "context length", "depth", {}, {}, {}};
      for (int c : o.contexts) map.x_ticks.push_back(std::to_string(c));
      for (int d = 0; d < o.depths; ++d) {
        map.y_ticks.push_back(fmt::format("{:.2f}", double(d) / o.depths));
        std::vector<double> row;
        for (int c : o.contexts)
          for (const auto& cell : r.cells)
            if (cell.ctx == c && std::abs(cell.depth - double(d) / o.depths) < 1e-9) row.push_back(cell.found ? 1.0 : 0.0);
        map.cells.push_back(row);
      }
      std::string mode_name = r.mode;
      std::replace(mode_name.begin(), mode_name.end(), '/', '-');
      write_heat_map_png(map, f.plot + "_" + mode_name + ".png");
    }
  }
  if (f.json) {
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("%-10s", "mode");
  for (int c : o.contexts) std::printf(" %8d", c);
  std::printf(" %9s\n", "accuracy");
  for (const auto& r : results) {
    std::printf("%-10s", r.mode.c_str());
    for (int c : o.contexts) {
      int found = 0, total = 0;
      for (const auto& cell : r.cells)
        if (cell.ctx == c) found += cell.found, ++total;
      std::printf(" %4d/%-3d", found, total);
    }
    std::printf(" %8.1f%%\n", 100 * r.accuracy);
  }
  if (plot) std::printf("heat maps: %s_<mode>.png\n", f.plot.c_str());
  return 0;
}

}  // namespace

void register_eval(CLI::App& app, std::function<int()>& action) {
  CLI::App* eval = app.add_subcommand("eval", "measure the fidelity of quantized KV caches");
  eval->require_subcommand(1);

  auto q = std::make_shared<QuantFlags>();
  CLI::App* quant = eval->add_subcommand("quant", "TurboQuant distortion on random unit vectors vs the paper");
  quant->add_option("--samples", q->samples, "vectors per (d, bits)")->capture_default_str()->check(CLI::Range(1, 10000000));
  quant->add_option("--tq-codebook", q->codebook, "beta or gaussian")->capture_default_str();
  quant->add_option("--tq-rotation", q->rotation, "dense or hadamard")->capture_default_str();
  quant->add_flag("--json", q->json, "print one JSON object");
  quant->callback([q, &action] { action = [q] { return run_quant(*q); }; });

  auto k = std::make_shared<KlFlags>();
  CLI::App* kl = eval->add_subcommand("kl", "KL divergence, top-1 agreement and perplexity per KV mode");
  add_model_options(kl, k->model);
  add_device_option(kl, k->model);
  add_cache_options(kl, k->cache);
  kl->get_option("--kv-cache-dtype")->description("comma-separated modes to compare (a mode: DTYPE or KDTYPE/VDTYPE)");
  k->cache.kv_cache_dtype = k->modes;
  kl->add_option("--text-file", k->text_files, "text to score (repeatable; files are concatenated)");
  kl->add_option("--from-json", k->from_json, "print and plot a saved --json result instead of measuring");
  kl->add_option("--ctx", k->ctx, "window length in tokens")->capture_default_str()->check(CLI::Range(4, 1 << 20));
  kl->add_option("--prefill-chunk", k->prefill_chunk, "tokens per forward step when a window is run")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  kl->add_option("--max-windows", k->max_windows, "score at most this many windows (0: all)")->check(CLI::Range(0, 1 << 20));
  kl->add_option("--reference", k->reference, "KV dtype of the reference run")->capture_default_str();
  if (!png_plots_available()) k->plot.clear();  // TQ_SLIM: no plot unless asked for (and then refused)
  kl->add_option("--plot", k->plot, "PNG of mean KLD against bits per element ('' for none)")->capture_default_str();
  kl->add_flag("--json", k->json, "print one JSON object");
  kl->add_flag("--breakdown", k->breakdown,
               "for each mode, quantize only K or only V, over all rows and over one position range at a time "
               "(rows 0-3, rows 4-63, the query's last 128 rows, the rest), to find where its error comes from");
  kl->callback([k, &action] {
    action = [k] {
      k->modes = k->cache.kv_cache_dtype;
      k->cache.kv_cache_dtype = "f16";
      return run_kl(*k);
    };
  });

  auto n = std::make_shared<NiahFlags>();
  CLI::App* niah = eval->add_subcommand("niah", "needle-in-a-haystack retrieval per KV mode, context and depth");
  add_model_options(niah, n->model);
  add_device_option(niah, n->model);
  add_cache_options(niah, n->cache);
  niah->get_option("--kv-cache-dtype")->description("comma-separated modes to compare (a mode: DTYPE or KDTYPE/VDTYPE)");
  n->cache.kv_cache_dtype = n->modes;
  niah->add_option("--text-file", n->text_files, "haystack text (repeatable; files are concatenated)")->required();
  niah->add_option("--ctx", n->contexts, "comma-separated context lengths")->capture_default_str();
  niah->add_option("--depths", n->depths, "needle depths per context (k/N, k = 0..N-1)")->capture_default_str()->check(CLI::Range(1, 100));
  if (!png_plots_available()) n->plot.clear();
  niah->add_option("--plot", n->plot, "heat map PNG prefix ('' for none)")->capture_default_str();
  niah->add_flag("--json", n->json, "print one JSON object");
  niah->callback([n, &action] {
    action = [n] {
      n->modes = n->cache.kv_cache_dtype;
      n->cache.kv_cache_dtype = "f16";
      return run_niah_cmd(*n);
    };
  });
}

}  // namespace tq
