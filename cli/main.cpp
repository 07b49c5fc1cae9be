// tqserve: one binary, subcommands in the manner of vLLM and llama.cpp.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <functional>

#include "cli/commands.h"
#include "errors/error.h"

int main(int argc, char** argv) {
  // Worker threads sleep when idle instead of spinning: on a 2-core machine spinning threads
  // starve each other and anything else running.
  setenv("OMP_WAIT_POLICY", "PASSIVE", /*overwrite=*/0);
  CLI::App app{"tqserve: an LLM engine with a TurboQuant-compressed paged KV cache"};
  app.require_subcommand(1);
  std::function<int()> action;
  tq::register_generate(app, action);
  tq::register_chat(app, action);
  tq::register_info(app, action);
  tq::register_tokenize(app, action);
  tq::register_eval(app, action);
  tq::register_serve(app, action);
  tq::register_bench(app, action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return action ? action() : 0;
  } catch (const tq::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
