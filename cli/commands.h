// Each subcommand registers its flags and, when chosen, sets `action` to the code that runs it.
#pragma once
#include <CLI/CLI.hpp>

#include <functional>

namespace tq {

void register_generate(CLI::App& app, std::function<int()>& action);
void register_chat(CLI::App& app, std::function<int()>& action);
void register_info(CLI::App& app, std::function<int()>& action);
void register_tokenize(CLI::App& app, std::function<int()>& action);
void register_eval(CLI::App& app, std::function<int()>& action);
void register_serve(CLI::App& app, std::function<int()>& action);
void register_bench(CLI::App& app, std::function<int()>& action);
// `tqserve bench decode` (cmd_bench_decode.cpp), added to the bench command by register_bench.
void add_bench_decode(CLI::App* bench, std::function<int()>& action);

}  // namespace tq
