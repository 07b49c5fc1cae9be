// Sampling flags shared by `generate` and `chat` (llama.cpp's defaults).
#pragma once
#include <CLI/CLI.hpp>

#include "engine/sampler.h"

namespace tq {

struct SamplingFlags {
  SamplingParams params;
  int64_t seed = -1;  // -1: random
};

inline void add_sampling_flags(CLI::App* cmd, SamplingFlags& f, int default_max_tokens) {
  f.params.temperature = 0.8f;
  f.params.top_k = 40;
  f.params.top_p = 0.95f;
  f.params.min_p = 0.05f;
  f.params.max_tokens = default_max_tokens;
  cmd->add_option("-n,--max-tokens", f.params.max_tokens, "tokens to generate at most")->capture_default_str();
  cmd->add_option("--temperature,--temp", f.params.temperature, "0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", f.params.top_k, "0 = off")->capture_default_str();
  cmd->add_option("--top-p", f.params.top_p)->capture_default_str();
  cmd->add_option("--min-p", f.params.min_p)->capture_default_str();
  cmd->add_option("--repetition-penalty", f.params.repetition_penalty)->capture_default_str();
  cmd->add_option("--presence-penalty", f.params.presence_penalty)->capture_default_str();
  cmd->add_option("--frequency-penalty", f.params.frequency_penalty)->capture_default_str();
  cmd->add_option("--seed", f.seed, "random seed (-1: random)")->capture_default_str();
  cmd->add_option("--stop", f.params.stop, "stop string (repeatable)");
  cmd->add_option("--stop-token-ids", f.params.stop_token_ids, "token ids that stop generation")->delimiter(',');
  cmd->add_flag("--ignore-eos", f.params.ignore_eos, "keep generating past end-of-sequence tokens");
}

inline SamplingParams sampling_params(const SamplingFlags& f) {
  SamplingParams p = f.params;
  if (f.seed >= 0) p.seed = static_cast<uint64_t>(f.seed);
  return p;
}

}  // namespace tq
