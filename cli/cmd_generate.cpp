// `tqserve generate`: one prompt in, generated text out (streamed, or one JSON object).
#include <nlohmann/json.hpp>

#include <cstdio>
#include <sstream>

#include "cli/commands.h"
#include "cli/sampling_flags.h"
#include "cli/session.h"
#include "engine/chat_prompt.h"
#include "engine/generator.h"
#include "errors/error.h"

namespace tq {
namespace {

struct GenerateFlags {
  ModelOptions model;
  CacheOptions cache;
  SamplingFlags sampling;
  std::string prompt;
  std::string prompt_ids;
  bool chat = false;
  std::string system;
  std::string template_kwargs;
  bool json = false;
};

std::vector<TokenId> parse_id_list(const std::string& text) {
  std::vector<TokenId> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    if (b == std::string::npos) fail("--prompt-ids: empty entry in '{}'", text);
    item = item.substr(b, e - b + 1);
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v < INT32_MIN || v > INT32_MAX) fail("--prompt-ids: '{}' is not a token id", item);
    ids.push_back(static_cast<TokenId>(v));
  }
  if (ids.empty()) fail("--prompt-ids is empty");
  return ids;
}

nlohmann::json parse_kwargs(const std::string& text) {
  if (text.empty()) return nlohmann::json::object();
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail("--chat-template-kwargs must be a JSON object, got '{}'", text);
  return j;
}

int run_generate(const GenerateFlags& f) {
  if (f.prompt.empty() == f.prompt_ids.empty()) fail("give exactly one of --prompt and --prompt-ids");
  if (f.chat && !f.prompt_ids.empty()) fail("--chat needs --prompt (text), not --prompt-ids");
  const SamplingParams params = sampling_params(f.sampling);
  params.validate();
  auto session = open_session(f.model, f.cache);
  LoadedModel& m = session->model;
  if (!m.tokenizer && f.prompt_ids.empty()) fail("{}: the model has no tokenizer; use --prompt-ids", m.path);

  std::vector<TokenId> prompt;
  if (!f.prompt_ids.empty()) {
    prompt = parse_id_list(f.prompt_ids);
  } else if (f.chat) {
    nlohmann::json messages = nlohmann::json::array();
    if (!f.system.empty()) messages.push_back({{"role", "system"}, {"content", f.system}});
    messages.push_back({{"role", "user"}, {"content", f.prompt}});
    prompt = ChatPrompt(m.chat_template).ids(*m.tokenizer, messages, true, parse_kwargs(f.template_kwargs));
  } else {
    prompt = m.tokenizer->encode_prompt(f.prompt, /*parse_special=*/true);
  }

  Generator generator(*session->transformer, *session->cache, m.tokenizer.get(), m.stop_ids, session->max_model_len);
  auto stream = [&](const std::string& piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  };
  const GenerationOutput out = generator.generate(prompt, params, f.json ? nullptr : std::function(stream));
  if (f.json) {
    nlohmann::json j = {{"prompt_ids", prompt}, {"ids", out.ids}, {"text", out.text}, {"finish_reason", out.finish_reason}};
    if (params.logprobs >= 0) {
      nlohmann::json steps = nlohmann::json::array();
      for (size_t i = 0; i < out.logprobs.size(); ++i)
        steps.push_back({{"id", out.ids[i]}, {"logprob", out.logprobs[i].logprob}, {"top", out.logprobs[i].top}});
      j["logprobs"] = steps;
    }
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("\n");
  }
  const double decode_tps = out.decode_seconds > 0 ? (out.ids.size() > 1 ? out.ids.size() - 1 : 0) / out.decode_seconds : 0;
  std::fprintf(stderr, "prompt: %zu tokens, %.1f tok/s | generated: %zu tokens, %.1f tok/s | finish: %s\n",
               prompt.size(), out.prefill_seconds > 0 ? prompt.size() / out.prefill_seconds : 0.0, out.ids.size(),
               decode_tps, out.finish_reason.c_str());
  return 0;
}

}  // namespace

void register_generate(CLI::App& app, std::function<int()>& action) {
  auto flags = std::make_shared<GenerateFlags>();
  CLI::App* cmd = app.add_subcommand("generate", "generate text from a prompt");
  add_model_options(cmd, flags->model);
  add_device_option(cmd, flags->model);
  add_cache_options(cmd, flags->cache);
  add_sampling_flags(cmd, flags->sampling, 128);
  cmd->add_option("-p,--prompt", flags->prompt, "prompt text");
  cmd->add_option("--prompt-ids", flags->prompt_ids, "prompt as comma-separated token ids, e.g. \"1,2,3\"");
  cmd->add_flag("--chat", flags->chat, "wrap the prompt as a user message in the model's chat template");
  cmd->add_option("--system", flags->system, "system message (with --chat)");
  cmd->add_option("--chat-template-kwargs", flags->template_kwargs,
                  "extra chat template variables as JSON, e.g. '{\"enable_thinking\":false}'");
  cmd->add_flag("--json", flags->json, "print one JSON object {prompt_ids, ids, text} instead of streaming");
  cmd->add_option("--logprobs", flags->sampling.params.logprobs,
                  "with --json: log-probabilities of each chosen token and of the N most likely (0-20)");
  cmd->callback([flags, &action] { action = [flags] { return run_generate(*flags); }; });
}

}  // namespace tq
