// tqserve bench decode: prefill and decode speed of one sequence at several context lengths, per
// KV cache mode, with the model loaded once. For each mode one sequence of random token ids grows
// through the contexts in order: prefill up to context c (in chunks, timed), then N one-token
// forward steps at positions c .. c+N-1 (timed: that is a decode step, LM head included), then
// on to the next context. `llama-bench -d` measures the same thing for llama.cpp. As there, an
// untimed warm-up pass runs first, and the cache is made resident before it, as the server does.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "cli/commands.h"
#include "cli/session.h"
#include "errors/error.h"
#include "kv/block_pool.h"

namespace tq {
namespace {

struct BenchDecodeFlags {
  ModelOptions model;
  CacheOptions cache;
  std::string modes = "f16,tq4";
  std::string contexts = "512,2048,8192";
  int new_tokens = 16;
  int prefill_chunk = 512;
  uint64_t seed = 0;
  bool json = false;
};

std::vector<int> parse_contexts(const std::string& text) {
  std::vector<int> out;
  for (const std::string& item : split_list(text)) {
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v < 1) fail("--contexts: '{}' is not a positive token count", item);
    out.push_back(v);
  }
  if (out.empty()) fail("--contexts is empty");
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

int run_bench_decode(const BenchDecodeFlags& f) {
  const std::vector<int> contexts = parse_contexts(f.contexts);
  const std::vector<std::string> modes = split_list(f.modes);
  if (modes.empty()) fail("--kv-cache-dtype lists no mode");
  LoadedModel m = load_model_for_cli(f.model);
  const ModelConfig& c = m.config;
  const int total = contexts.back() + f.new_tokens;
  if (total > c.max_position)
    fail("--contexts: {} + {} new tokens exceeds the model's context of {}", contexts.back(), f.new_tokens,
         c.max_position);
  for (size_t i = 1; i < contexts.size(); ++i)
    if (contexts[i] < contexts[i - 1] + f.new_tokens)
      fail("--contexts: {} comes too soon after {}: the {} decoded tokens already reach {}", contexts[i],
           contexts[i - 1], f.new_tokens, contexts[i - 1] + f.new_tokens);
  Transformer model(m.config, m.weights);
  std::mt19937_64 rng(f.seed);
  std::uniform_int_distribution<TokenId> pick(std::min(1000, c.vocab_size - 1), std::min(20000, c.vocab_size) - 1);
  std::vector<TokenId> ids(total);  // [total]: the sequence every mode runs
  for (TokenId& id : ids) id = pick(rng);

  const auto mode_options = [&](const std::string& mode) {  // the cache flags of one mode
    CacheOptions co = f.cache;
    co.kv_cache_dtype = mode;
    co.kv_cache_dtype_k.clear();
    co.kv_cache_dtype_v.clear();
    co.max_model_len = total;
    return co;
  };
  for (const std::string& mode : modes) check_device_cache_flags(f.model, mode_options(mode), c);  // all before the first runs
  attach_device(f.model, model);  // the weights go to the GPU once, for every mode
  nlohmann::json rows = nlohmann::json::array();
  std::vector<float> logits;
  for (const std::string& mode : modes) {
    const CacheOptions co = mode_options(mode);
    std::optional<KvCalibration> calibration;
    auto cache = make_cache(co, resolve_cache_shape(co, c, model, m.tokenizer.get(), &calibration),
                            (total + co.block_size - 1) / co.block_size, model, m.tokenizer.get(), &calibration);
    cache->prefault();  // resident before timing, as the server makes it (engine/kv_budget.cpp)
    model.prepare_cache(*cache);  // the device's pages (--device cuda)
    BlockPool pool(*cache);
    ScopedBlockTable sequence(pool);
    if (!sequence.allocate(total)) fail("bench decode: the KV cache cannot hold {} tokens", total);
    BlockTable& table = sequence.table();
    {  // warm-up, untimed (llama-bench warms up too): the first chunk, whose rows the timed prefill
       // then writes again with the same values
      ForwardBatch batch;
      const int end = std::min(contexts.front(), f.prefill_chunk);
      for (int p = 0; p < end; ++p) batch.add(ids[p], p, &table, p + 1 == end);
      model.forward(batch, *cache, logits);
    }
    int position = 0;
    for (int ctx : contexts) {
      const int prefilled_from = position;
      const auto t_prefill = std::chrono::steady_clock::now();
      while (position < ctx) {
        ForwardBatch batch;
        const int end = std::min(ctx, position + f.prefill_chunk);
        for (; position < end; ++position) batch.add(ids[position], position, &table, position + 1 == end);
        model.forward(batch, *cache, logits);
      }
      const double prefill_s = seconds_since(t_prefill);
      const auto t_decode = std::chrono::steady_clock::now();
      for (int i = 0; i < f.new_tokens; ++i, ++position) {
        ForwardBatch batch;
        batch.add(ids[position], position, &table, true);
        model.forward(batch, *cache, logits);
      }
      const double decode_s = seconds_since(t_decode);
      table.num_tokens = position;
      nlohmann::json row = {{"kv", mode},
                            {"ctx", ctx},
                            {"prefill_tokens", ctx - prefilled_from},
                            {"prefill_tok_s", prefill_s > 0 ? (ctx - prefilled_from) / prefill_s : 0.0},
                            {"decode_tokens", f.new_tokens},
                            {"decode_tok_s", decode_s > 0 ? f.new_tokens / decode_s : 0.0}};
      if (!f.json)
        std::printf("%-8s ctx %6d  prefill %5d tokens %8.1f tok/s  decode %3d tokens %7.1f tok/s\n", mode.c_str(), ctx,
                    ctx - prefilled_from, row["prefill_tok_s"].get<double>(), f.new_tokens,
                    row["decode_tok_s"].get<double>());
      std::fflush(stdout);
      rows.push_back(row);
    }
  }
  if (f.json)
    std::printf("%s\n", nlohmann::json{{"model", m.path}, {"device", model.describe_device()}, {"rows", rows}}.dump().c_str());
  return 0;
}

}  // namespace

void add_bench_decode(CLI::App* bench, std::function<int()>& action) {
  auto f = std::make_shared<BenchDecodeFlags>();
  f->cache.log_cache = false;
  CLI::App* cmd = bench->add_subcommand("decode", "prefill and decode speed of one sequence at several contexts, per KV mode");
  add_model_options(cmd, f->model);
  add_device_option(cmd, f->model);
  add_cache_options(cmd, f->cache);
  cmd->add_option("--modes", f->modes, "KV cache modes to run, comma-separated (overrides --kv-cache-dtype)")
      ->capture_default_str();
  cmd->add_option("--contexts", f->contexts, "context lengths to decode at, comma-separated")->capture_default_str();
  cmd->add_option("--new-tokens", f->new_tokens, "decode steps timed at each context")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--prefill-chunk", f->prefill_chunk, "tokens per prefill step")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--seed", f->seed, "seed of the random token ids")->capture_default_str();
  cmd->add_flag("--json", f->json, "print one JSON object");
  cmd->callback([f, &action] { action = [f] { return run_bench_decode(*f); }; });
}

}  // namespace tq
