// `tqserve chat`: an interactive conversation with the model's own chat template, streamed.
// Lines typed are user turns; "/reset" starts over, "/exit" or end of input leaves.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/sampling_flags.h"
#include "cli/session.h"
#include "engine/chat_prompt.h"
#include "engine/generator.h"
#include "errors/error.h"

namespace tq {
namespace {

struct ChatFlags {
  ModelOptions model;
  CacheOptions cache;
  SamplingFlags sampling;
  std::string system;
  std::string template_kwargs;
};

int run_chat(const ChatFlags& f) {
  const SamplingParams params = sampling_params(f.sampling);
  params.validate();
  nlohmann::json extra = nlohmann::json::object();
  if (!f.template_kwargs.empty()) {
    extra = nlohmann::json::parse(f.template_kwargs, nullptr, false);
    if (extra.is_discarded() || !extra.is_object()) fail("--chat-template-kwargs must be a JSON object");
  }
  auto session = open_session(f.model, f.cache);
  LoadedModel& m = session->model;
  if (!m.tokenizer) fail("{}: the model has no tokenizer", m.path);
  if (m.chat_template.empty()) fail("{}: the model has no chat template; use `tqserve generate --prompt`", m.path);
  const ChatPrompt chat_prompt(m.chat_template);
  Generator generator(*session->transformer, *session->cache, m.tokenizer.get(), m.stop_ids, session->max_model_len);

  const bool interactive = isatty(STDIN_FILENO);
  nlohmann::json messages = nlohmann::json::array();
  if (!f.system.empty()) messages.push_back({{"role", "system"}, {"content", f.system}});
  if (interactive) std::fprintf(stderr, "chatting with %s (/reset to start over, /exit or Ctrl-D to leave)\n", m.path.c_str());
  std::string line;
  while (true) {
    if (interactive) {
      std::fprintf(stderr, "> ");
      std::fflush(stderr);
    }
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      messages = nlohmann::json::array();
      if (!f.system.empty()) messages.push_back({{"role", "system"}, {"content", f.system}});
      continue;
    }
    if (line.empty()) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    try {
      const std::vector<TokenId> prompt = chat_prompt.ids(*m.tokenizer, messages, true, extra);
      const GenerationOutput out = generator.generate(prompt, params, [](const std::string& piece) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      });
      std::printf("\n");
      std::fflush(stdout);
      const double tps = out.decode_seconds > 0 && out.ids.size() > 1 ? (out.ids.size() - 1) / out.decode_seconds : 0;
      std::fprintf(stderr, "[%zu tokens, %.1f tok/s]\n", out.ids.size(), tps);
      messages.push_back({{"role", "assistant"}, {"content", out.text}});
    } catch (const Error& e) {
      // A turn that cannot run (context full) is reported; the conversation goes on.
      std::fprintf(stderr, "error: %s\n", e.what());
      messages.erase(messages.end() - 1);
    }
  }
  return 0;
}

}  // namespace

void register_chat(CLI::App& app, std::function<int()>& action) {
  auto flags = std::make_shared<ChatFlags>();
  CLI::App* cmd = app.add_subcommand("chat", "interactive chat using the model's chat template");
  add_model_options(cmd, flags->model);
  add_device_option(cmd, flags->model);
  add_cache_options(cmd, flags->cache);
  add_sampling_flags(cmd, flags->sampling, 512);
  cmd->add_option("--system", flags->system, "system message");
  cmd->add_option("--chat-template-kwargs", flags->template_kwargs, "extra chat template variables as JSON");
  cmd->callback([flags, &action] { action = [flags] { return run_chat(*flags); }; });
}

}  // namespace tq
