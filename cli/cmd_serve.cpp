// tqserve serve [MODEL]: the OpenAI-compatible server. The socket opens first (/health answers
// 503 while the model loads), then the KV cache is sized from the memory budget, then the
// engine starts and the API opens. SIGINT/SIGTERM stop accepting, finish what is in flight
// and exit 0.
#include <signal.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <cerrno>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <thread>

#include "cli/commands.h"
#include "cli/session.h"
#include "engine/async_engine.h"
#include "engine/chat_prompt.h"
#include "engine/engine_core.h"
#include "engine/kv_budget.h"
#include "engine/structured_output.h"
#include "errors/error.h"
#include "server/http_server.h"
#include "server/kv_event_publisher.h"

namespace tq {
namespace {

constexpr const char* kNeedsPrefixCaching =
    "--kv-events-endpoint reports the prefix cache's blocks: it needs prefix caching, which "
    "--no-enable-prefix-caching and --kv-chunk-rows exact turn off";

struct ServeFlags {
  ModelOptions model;
  CacheOptions cache;
  std::string model_positional;
  std::string served_model_name;
  ServerConfig server;
  int max_num_batched_tokens = 2048;
  int max_num_seqs = 64;
  std::string kv_cache_memory;       // bytes, e.g. "2GiB"
  double memory_utilization = 0;     // fraction of available memory for the KV cache
  bool no_prefix_caching = false;
  int64_t structured_output_cache_mib = StructuredOutputCompiler::kDefaultCacheBytes >> 20;
  std::string chat_template;  // a file, or the template itself (vLLM's --chat-template)
};

// --chat-template: a file's contents, or the text itself when it is a template (as vLLM reads it).
ChatPrompt chat_prompt_from_flag(const std::string& value) {
  std::string text;
  std::error_code not_a_path;  // a template's text is usually no valid path at all
  if (std::filesystem::is_regular_file(value, not_a_path)) {
    std::ifstream in(value, std::ios::binary);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) fail("--chat-template: cannot read '{}'", value);
  } else if (value.find("{{") != std::string::npos || value.find("{%") != std::string::npos) {
    text = value;
  } else {
    fail("--chat-template: '{}' is neither a file nor a template", value);
  }
  if (text.empty()) fail("--chat-template: '{}' is empty", value);
  ChatPrompt prompt(text);
  try {
    prompt.check_parsed();
  } catch (const std::exception& e) {
    fail("--chat-template: {}", e.what());
  }
  return prompt;
}

// The default budget without flags: a quarter of the memory available now, at most 4 GiB
// (vLLM's CPU default KV space).
size_t default_budget() {
  const size_t available = available_memory_bytes();
  const size_t cap = size_t(4) << 30;
  return available ? std::min(cap, available / 4) : cap;
}

// SIGINT/SIGTERM may land on any thread (OpenBLAS starts its threads before main), so the
// handler only writes the signal number to a pipe that one thread waits on.
int g_signal_pipe[2] = {-1, -1};

void on_stop_signal(int sig) {
  const unsigned char byte = static_cast<unsigned char>(sig);
  [[maybe_unused]] ssize_t n = write(g_signal_pipe[1], &byte, 1);
}

int run_serve(ServeFlags& f) {
#if defined(__GLIBC__)
  // Fixed allocator thresholds (setting them turns glibc's dynamic ones off). Dynamically, freeing
  // one large buffer raises the mmap threshold to its size and the trim threshold to twice that
  // (up to 64 MiB): later large buffers then come from the threads' arenas, and what is freed at
  // the top of a thread arena stays resident, which malloc_trim does not release for any arena but
  // the main one. With the thresholds fixed, buffers from 128 KiB live in their own mappings and an
  // arena's free top goes back to the system past 128 KiB, so an idle server's RSS is what it holds
  // (scripts/soak.py: the arenas' resident size moved by +-15 MiB between idle readings).
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  mallopt(M_TRIM_THRESHOLD, 128 * 1024);
#endif
  require_device(f.model);  // before the port is bound
  if (pipe(g_signal_pipe) != 0) fail("cannot create the signal pipe");
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a vanished client is a failed write, not a dead server

  if (!f.model_positional.empty()) {
    if (!f.model.model.empty() && f.model.model != f.model_positional)
      fail("the model is given twice: '{}' and --model '{}'", f.model_positional, f.model.model);
    f.model.model = f.model_positional;
  }
  f.server.max_num_seqs = f.max_num_seqs;
  // Checked before any thread starts: a bad template ends the start-up with its reason.
  const std::optional<ChatPrompt> chat_template_flag =
      f.chat_template.empty() ? std::nullopt : std::optional<ChatPrompt>(chat_prompt_from_flag(f.chat_template));
  HttpServer server(f.server);
  if (!server.bind()) return 1;
  std::fprintf(stderr, "tqserve: listening on http://%s:%d (loading the model)\n", f.server.host.c_str(), server.port());
  std::atomic<bool> stopping{false};
  std::thread signal_thread([&] {
    unsigned char sig = 0;
    while (read(g_signal_pipe[0], &sig, 1) < 0 && errno == EINTR) {
    }
    if (sig != 0) {
      std::fprintf(stderr, "tqserve: signal %d: finishing in-flight requests\n", int(sig));
      stopping = true;
      server.stop();
    }
  });
  std::thread http_thread([&] { server.run(); });
  const auto shutdown_threads = [&] {
    if (!stopping) {
      stopping = true;
      server.stop();
      const unsigned char none = 0;  // wake the signal thread
      [[maybe_unused]] ssize_t n = write(g_signal_pipe[1], &none, 1);
    }
    http_thread.join();
    signal_thread.join();
  };

  // Tests hold the server in its loading state until they create this file, so what it answers
  // while loading is checked without racing the load.
  if (const char* gate = std::getenv("TQSERVE_TEST_LOADING_GATE")) {
    std::fprintf(stderr, "tqserve: TQSERVE_TEST_LOADING_GATE: loading waits for %s to exist\n", gate);
    while (!stopping && access(gate, F_OK) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (stopping) {
      shutdown_threads();
      return 0;
    }
  }

  std::unique_ptr<Session> session;
  std::unique_ptr<KvCache> cache;
  std::unique_ptr<EngineCore> core;
  std::unique_ptr<KvEventPublisher> kv_events;  // outlives the engine that feeds it
  std::unique_ptr<AsyncEngine> engine;
  try {
    // A bad events endpoint or flag combination fails before the model and the cache are loaded.
    if (!f.server.kv_events_endpoint.empty()) {
      if (f.no_prefix_caching || f.cache.kv_chunk_rows == "exact") fail(kNeedsPrefixCaching);
      kv_events = std::make_unique<KvEventPublisher>(f.server.kv_events_endpoint, f.server.kv_events_topic);
      std::fprintf(stderr, "tqserve: KV cache events on %s (topic '%s')\n", f.server.kv_events_endpoint.c_str(),
                   f.server.kv_events_topic.c_str());
    }
    LoadedModel loaded = load_model_for_cli(f.model);
    session = std::make_unique<Session>();
    session->model = std::move(loaded);
    const ModelConfig& c = session->model.config;
    if (!session->model.tokenizer) fail("{}: the model has no tokenizer; the server needs one", session->model.path);
    session->max_model_len = resolve_max_model_len(f.cache, c);
    session->transformer = std::make_unique<Transformer>(c, session->model.weights);
    check_device_cache_flags(f.model, f.cache, c);
    attach_device(f.model, *session->transformer);  // the weights first: the KV budget is what they leave
    // and the working memory of the largest step, allocated now so that it is counted as used.
    session->transformer->reserve_device_steps(f.max_num_batched_tokens, session->max_model_len);
    const DeviceForward::Memory device = session->transformer->device_memory();

    std::optional<KvCalibration> calibration;
    KvCacheShape shape = resolve_cache_shape(f.cache, c, *session->transformer, session->model.tokenizer.get(), &calibration);
    KvSizing sizing;
    sizing.bytes_per_block = shape.bytes_per_block();
    sizing.block_size = shape.block_size;
    sizing.max_model_len = session->max_model_len;
    sizing.mode = shape.describe();
    if (!f.kv_cache_memory.empty() && f.memory_utilization > 0)
      fail("give --kv-cache-memory or --memory-utilization, not both");
    if (!f.kv_cache_memory.empty()) {
      sizing.budget_bytes = parse_byte_size(f.kv_cache_memory, "--kv-cache-memory");
      if (device.total > 0 && sizing.budget_bytes > device.free)
        fail("--kv-cache-memory {}: the GPU has {:.2f} GiB free after the weights and the step buffers", f.kv_cache_memory,
             double(device.free) / double(1ull << 30));
    } else if (device.total > 0) {
      // On a GPU, as vLLM's --gpu-memory-utilization: this process may use the fraction of the
      // device's memory (0.9 by default); what the weights and others use now is not KV.
      const double fraction = f.memory_utilization > 0 ? f.memory_utilization : 0.9;
      const double used = double(device.total - device.free), allowed = fraction * double(device.total);
      if (allowed <= used)
        fail("--memory-utilization {}: {:.1f} GiB of the device's {:.1f} GiB are in use already", fraction,
             used / double(1ull << 30), double(device.total) / double(1ull << 30));
      sizing.budget_bytes = size_t(allowed - used);
    } else if (f.memory_utilization > 0) {
      sizing.budget_bytes = size_t(f.memory_utilization * double(available_memory_bytes()));
    } else {
      sizing.budget_bytes = default_budget();
    }
    if (shape.windows.any()) {
      // Window blocks: enough for every sequence that can run (kv/kv_window_store.h), and never
      // more than the data blocks; when the budget cannot hold that many beside the data blocks,
      // one window block per data block.
      const int running = window_blocks_for_serving(shape.windows.sink_tokens, shape.windows.recent_tokens,
                                                    shape.block_size, f.max_num_seqs, f.max_num_batched_tokens,
                                                    std::numeric_limits<int>::max());
      const size_t fixed = size_t(running) * shape.window_block_bytes();
      if (sizing.budget_bytes > fixed && (sizing.budget_bytes - fixed) / sizing.bytes_per_block >= size_t(running)) {
        shape.windows.window_blocks = running;
        sizing.fixed_bytes = fixed;
      } else {
        shape.windows.window_blocks = 0;
        sizing.bytes_per_block += shape.window_block_bytes();
      }
    }
    CacheOptions co = f.cache;
    co.log_cache = false;
    std::vector<std::string> retries;
    cache = allocate_kv_cache(
        sizing,
        [&](int blocks) {
          return make_cache(co, shape, blocks, *session->transformer, session->model.tokenizer.get(), &calibration);
        },
        &retries);
    for (const std::string& line : retries) std::fprintf(stderr, "tqserve: %s\n", line.c_str());
    session->transformer->prepare_cache(*cache);
    const int tokens = cache->num_blocks() * shape.block_size;
    std::fprintf(stderr, "%s; max concurrency for %d-token requests: %.2fx\n", describe_cache(*cache).c_str(),
                 session->max_model_len, double(tokens) / session->max_model_len);

    EngineConfig ec;
    ec.scheduler.max_num_batched_tokens = f.max_num_batched_tokens;
    ec.scheduler.max_num_seqs = f.max_num_seqs;
    ec.max_model_len = session->max_model_len;
    ec.enable_prefix_caching = !f.no_prefix_caching;
    AsyncEngine::KvEventListener on_kv_events;
    if (kv_events) {
      ec.kv_events = true;
      on_kv_events = [publisher = kv_events.get()](std::vector<KvCacheEvent> events) { publisher->publish(std::move(events)); };
    }
    core = std::make_unique<EngineCore>(*session->transformer, *cache, session->model.tokenizer.get(),
                                        session->model.stop_ids, ec);
    if (kv_events && !core->pool().prefix_caching()) fail(kNeedsPrefixCaching);
    engine = std::make_unique<AsyncEngine>(*core, std::move(on_kv_events));
  } catch (...) {
    shutdown_threads();
    throw;
  }

  ServedModel served;
  served.name = f.served_model_name.empty() ? std::filesystem::path(session->model.path).stem().string()
                                            : f.served_model_name;
  served.tokenizer = session->model.tokenizer.get();
  served.chat_prompt = chat_template_flag ? *chat_template_flag : ChatPrompt(session->model.chat_template);
  served.max_model_len = session->max_model_len;
  served.vocab_size = session->model.config.vocab_size;
  served.path = session->model.path;
  if (session->model.tokenizer)
    served.structured_output = std::make_shared<StructuredOutputCompiler>(
        *session->model.tokenizer, session->model.config.vocab_size, session->model.stop_ids,
        StructuredOutputCompiler::kDefaultCompileLimit, f.structured_output_cache_mib << 20);
  server.attach(*engine, served, cache->shape().mode_name(), cache->shape().describe(), cache->shape().layer_modes());
  std::fprintf(stderr, "tqserve: serving %s on http://%s:%d\n", served.name.c_str(), f.server.host.c_str(), server.port());

  http_thread.join();  // returns after a signal stopped the server and in-flight requests ended
  signal_thread.join();
  engine->wait_idle();
  engine->stop();
  std::fprintf(stderr, "tqserve: stopped\n");
  return 0;
}

}  // namespace

void register_serve(CLI::App& app, std::function<int()>& action) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching");
  cmd->add_option("model_path", f->model_positional, "GGUF file or Hugging Face folder (same as --model)");
  add_model_options(cmd, f->model);
  add_device_option(cmd, f->model);
  add_cache_options(cmd, f->cache);
  cmd->add_option("--host", f->server.host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", f->server.port, "port (0: any free port)")->capture_default_str()->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", f->server.api_key, "require 'Authorization: Bearer KEY' on the API");
  cmd->add_option("--served-model-name", f->served_model_name, "model id in the API (default: the file's name)");
  cmd->add_option("--max-num-batched-tokens", f->max_num_batched_tokens, "tokens computed per engine step")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--chat-template", f->chat_template,
                  "Jinja chat template (a file, or the template itself) used instead of the model's own");
  cmd->add_option("--structured-output-cache-mib", f->structured_output_cache_mib,
                  "memory for compiled JSON schemas and grammars kept for reuse (least recently used go first; 0: none)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  cmd->add_option("--max-num-seqs", f->max_num_seqs, "requests running at once")->capture_default_str()->check(CLI::Range(1, 4096));
  cmd->add_option("--kv-cache-memory", f->kv_cache_memory,
                  "KV cache budget, e.g. 2GiB (default: a quarter of available memory, at most 4 GiB; with --device cuda "
                  "0.9 of the GPU's memory less what is in use, as --memory-utilization)");
  cmd->add_option("--memory-utilization", f->memory_utilization, "KV cache budget as a fraction of available memory (with --device cuda: the fraction of the GPU's memory the process may use, weights included; default 0.9)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_flag("--no-enable-prefix-caching", f->no_prefix_caching, "do not share cached prompt prefixes");
  cmd->add_option("--kv-events-endpoint", f->server.kv_events_endpoint,
                  "publish KV cache events (vLLM's format) on a ZeroMQ publisher socket bound here, e.g. tcp://*:5557");
  cmd->add_option("--kv-events-topic", f->server.kv_events_topic, "topic frame of every KV cache event message");
  cmd->add_option("--max-queued-requests", f->server.max_queued_requests,
                  "waiting requests beyond which new ones get 503")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--max-request-body", f->server.max_body_bytes, "largest request body in bytes (413 above)")
      ->capture_default_str()
      ->check(CLI::Range(size_t(1), size_t(1) << 40));
  cmd->add_option("--max-header-bytes", f->server.max_header_bytes,
                  "largest request line + headers in bytes (431 above; one header line is at most 8192 bytes)")
      ->capture_default_str()
      ->check(CLI::Range(size_t(1024), size_t(1) << 24));
  cmd->add_option("--max-connections", f->server.max_connections,
                  "connections served at once (one worker thread each); more get 503")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--request-timeout", f->server.read_timeout_seconds,
                  "seconds for a whole request (line, headers, body) to arrive; 408 and the connection closes after")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  cmd->add_option("--max-tokens-limit", f->server.limits.max_tokens,
                  "most completion tokens one request may ask for (0: only the context length limits)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 30));
  cmd->callback([f, &action] { action = [f] { return run_serve(*f); }; });
}

}  // namespace tq
