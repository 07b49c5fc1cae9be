// `tqserve tokenize`: raw token ids (no BOS) of each input, one JSON array per line.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>

#include "cli/commands.h"
#include "cli/session.h"
#include "errors/error.h"

namespace tq {
namespace {

struct TokenizeFlags {
  ModelOptions model;
  std::string text;
  std::string jsonl;
  bool special = false;
  bool text_given = false;
};

int run_tokenize(const TokenizeFlags& f) {
  if (f.text_given == !f.jsonl.empty()) fail("give exactly one of --text and --jsonl");
  std::vector<std::string> inputs;
  if (f.text_given) {
    inputs.push_back(f.text);
  } else {
    std::ifstream in(f.jsonl, std::ios::binary);
    if (!in) fail("{}: cannot open", f.jsonl);
    std::string line;
    int line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      if (line.empty() || line == "\r") continue;
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_string()) fail("{}:{}: each line must be one JSON string", f.jsonl, line_no);
      inputs.push_back(j.get<std::string>());
    }
  }
  const LoadedModel m = load_model_for_cli(f.model, /*with_weights=*/false);
  if (!m.tokenizer) fail("{}: the model has no tokenizer", m.path);
  for (const std::string& text : inputs) {
    const nlohmann::json ids = m.tokenizer->encode(text, f.special);
    std::printf("%s\n", ids.dump().c_str());
  }
  return 0;
}

}  // namespace

void register_tokenize(CLI::App& app, std::function<int()>& action) {
  auto flags = std::make_shared<TokenizeFlags>();
  CLI::App* cmd = app.add_subcommand("tokenize", "print token ids of text (raw: no BOS)");
  add_model_options(cmd, flags->model);
  cmd->add_option("--text", flags->text, "text to tokenize")->each([flags](const std::string&) { flags->text_given = true; });
  cmd->add_option("--jsonl", flags->jsonl, "file with one JSON string per line");
  cmd->add_flag("--special", flags->special, "parse special tokens in the text");
  cmd->callback([flags, &action] { action = [flags] { return run_tokenize(*flags); }; });
}

}  // namespace tq
