// `tqserve serve`'s HTTP side (cpp-httplib): the OpenAI-compatible endpoints, /tokenize and
// /detokenize, /health, /metrics and the chat page at /, over an AsyncEngine.
//
// Each completion request becomes one engine request per choice; its outputs are streamed as
// server-sent events (stream: true) or gathered into one response. A client that disconnects is
// noticed at the next write (a keep-alive comment, or for a non-streaming response a space
// before the JSON, goes out every second while nothing else does) and its engine requests are
// aborted, which frees their blocks at once.
#pragma once
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "engine/async_engine.h"
#include "server/metrics.h"
#include "server/openai_request.h"

namespace tq {

class GuardedHttpServer;

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (see HttpServer::port())
  std::string api_key;  // empty: no authentication
  size_t max_body_bytes = 8 << 20;    // 413 above
  size_t max_header_bytes = 32 << 10;  // request line + headers; 431 above
  int max_queued_requests = 1024;  // waiting beyond this: 503 with Retry-After
  int max_num_seqs = 64;           // the engine's running limit (to size the waiting queue)
  int max_connections = 512;       // connections served at once; 503 beyond (server/http_guard.h)
  int read_timeout_seconds = 30;   // a whole request must arrive within this; 408 after
  std::string kv_mode;  // reported in /v1/models and /metrics: "tq4", "f16", "k=tq4,v=q8_0"
  std::string kv_cache;  // reported in /v1/models: the whole layout (KvCacheShape::describe)
  std::vector<std::string> kv_layers;  // per-layer "k/v" dtypes (`auto`), reported in /v1/models; else empty
  // KV cache events (server/kv_event_publisher.h): where they are published, reported in
  // /kv_event_sources for routers that discover them; empty: none.
  std::string kv_events_endpoint;
  std::string kv_events_topic;
  RequestLimits limits;
};

class HttpServer {
 public:
  // Serves /health (503) at once; the API answers 503 until attach().
  explicit HttpServer(ServerConfig config);
  ~HttpServer();

  // Binds the socket; false (with the reason on stderr) when it cannot. Then port() is known.
  bool bind();
  int port() const { return port_; }
  // Serves until stop(); in-flight requests are finished before it returns.
  void run();
  // Stops accepting connections (thread-safe; the SIGINT/SIGTERM path). Also before run() has
  // started listening: run() then returns at once (a start-up that fails within milliseconds).
  void stop();
  // The loaded model and its engine; /health answers 200 and the API opens from now on.
  void attach(AsyncEngine& engine, ServedModel model, std::string kv_mode, std::string kv_cache = {},
              std::vector<std::string> kv_layers = {});

 private:
  void install_routes();

  AsyncEngine* engine_ = nullptr;  // set once by attach(), before ready_
  ServedModel model_;
  ServerConfig config_;
  ServerMetrics metrics_;
  std::unique_ptr<GuardedHttpServer> http_;
  std::atomic<bool> ready_{false};
  // stop() against a run() that has not started listening yet: httplib's stop() does nothing
  // until its listen loop runs (seq_cst: one side always sees the other's flag).
  std::atomic<bool> stop_requested_{false}, run_entered_{false}, run_returned_{false};
  int port_ = 0;
  int64_t started_ = 0;
};

}  // namespace tq
