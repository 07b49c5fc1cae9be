#include "server/http_server.h"

#include <httplib.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "engine/chat_prompt.h"
#include "errors/error.h"
#include "model/token_ids.h"
#include "server/chat_page.h"
#include "server/completion_job.h"
#include "server/http_guard.h"
#include "server/openai_response.h"

namespace tq {

using nlohmann::json;

namespace {

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string random_suffix() {
  static std::atomic<uint64_t> counter{0};
  return fmt::format("{:x}{:06x}", unix_now(), counter.fetch_add(1) & 0xffffff);
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump_json(e.to_json()), "application/json");
}

// Writes everything or reports the client gone.
bool write_all(httplib::DataSink& sink, const std::string& s) { return sink.write(s.data(), s.size()); }

// The routes and their methods: a known path with another method is 405, not 404.
const std::map<std::string, std::string> kRouteMethods = {
    {"/", "GET"},           {"/health", "GET"},        {"/metrics", "GET"},
    {"/v1/models", "GET"},  {"/tokenizer_info", "GET"}, {"/tokenize", "POST"},
    {"/detokenize", "POST"}, {"/v1/completions", "POST"}, {"/v1/chat/completions", "POST"},
    {"/server_info", "GET"}, {"/get_server_info", "GET"}, {"/kv_event_sources", "GET"},
};

bool has_body(const httplib::Request& req) {
  return std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10) > 0 ||
         req.has_header("Transfer-Encoding");
}

// JSON bodies only: application/json (or any application/...+json), or no Content-Type at all
// (what vLLM's FastAPI accepts). A form or text body is refused by name instead of failing as
// "not JSON".
void check_content_type(const httplib::Request& req) {
  std::string type = req.get_header_value("Content-Type");
  type = type.substr(0, type.find(';'));
  while (!type.empty() && type.back() == ' ') type.pop_back();
  std::transform(type.begin(), type.end(), type.begin(), [](unsigned char c) { return std::tolower(c); });
  if (type.empty() || type == "application/json") return;
  if (type.rfind("application/", 0) == 0 && type.size() > 5 && type.compare(type.size() - 5, 5, "+json") == 0) return;
  throw bad_request(fmt::format("Content-Type '{}' is not supported: send the body as application/json",
                                req.get_header_value("Content-Type")));
}

std::string truncate_message(std::string m, size_t max = 300) {
  if (m.size() > max) m = m.substr(0, max) + "...";
  return m;
}

}  // namespace

namespace {
HttpGuardLimits guard_limits(const ServerConfig& c) {
  HttpGuardLimits l;
  l.max_connections = c.max_connections;
  l.request_timeout_seconds = c.read_timeout_seconds;
  l.max_header_bytes = c.max_header_bytes;
  l.max_body_bytes = c.max_body_bytes;
  return l;
}
}  // namespace

HttpServer::HttpServer(ServerConfig config)
    : config_(std::move(config)),
      http_(std::make_unique<GuardedHttpServer>(guard_limits(config_), [this] { metrics_.count_http(503); })) {
  started_ = unix_now();
  http_->set_keep_alive_max_count(1000);
  install_routes();
}

HttpServer::~HttpServer() = default;

bool HttpServer::bind() {
  // httplib 0.11.4 listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, fixed in the .so): a
  // burst of connects (the soak's 200 clients, or 500 at once) overflowed the accept queue and
  // clients saw SYN retries of seconds, then resets. The listening socket is kept here to raise
  // the backlog after the bind. And only SO_REUSEADDR: httplib's default also sets SO_REUSEPORT,
  // with which a second server on the same port started fine and took half the connections.
  socket_t listening = INVALID_SOCKET;
  http_->set_socket_options([&listening](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, reinterpret_cast<const void*>(&yes), sizeof(yes));
    listening = sock;
  });
  if (config_.port == 0) {
    port_ = http_->bind_to_any_port(config_.host.c_str());
  } else {
    port_ = http_->bind_to_port(config_.host.c_str(), config_.port) ? config_.port : -1;
  }
  if (port_ <= 0) {
    std::fprintf(stderr, "error: cannot listen on %s:%d (in use, or not an address of this machine)\n",
                 config_.host.c_str(), config_.port);
    return false;
  }
  if (listening != INVALID_SOCKET) ::listen(listening, SOMAXCONN);
  return true;
}

void HttpServer::attach(AsyncEngine& engine, ServedModel model, std::string kv_mode, std::string kv_cache,
                        std::vector<std::string> kv_layers) {
  config_.kv_cache = kv_cache.empty() ? kv_mode : std::move(kv_cache);
  config_.kv_layers = std::move(kv_layers);
  engine_ = &engine;
  model_ = std::move(model);
  config_.kv_mode = std::move(kv_mode);
  ready_ = true;
}

void HttpServer::run() {
  run_entered_ = true;
  if (!stop_requested_) http_->listen_after_bind();
  run_returned_ = true;
}

void HttpServer::stop() {
  stop_requested_ = true;
  if (!run_entered_) return;  // run() will see stop_requested_
  // run() is listening or about to: wait until its loop runs (httplib's stop() is a no-op before)
  // or it returned having seen stop_requested_.
  while (!http_->is_running() && !run_returned_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  http_->stop();
}

void HttpServer::install_routes() {
  httplib::Server& s = *http_;

  // Authentication for the API; /health, /metrics and the page stay open.
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    GuardedHttpServer::headers_received(req);
    const auto handled = [&] {
      // Answered without reading the body: the connection cannot carry another request.
      if (has_body(req)) {
        res.set_header("Connection", "close");
        GuardedHttpServer::close_after_response();
      }
      return httplib::Server::HandlerResponse::Handled;
    };
    const bool api = req.path.rfind("/v1/", 0) == 0 || req.path == "/tokenize" || req.path == "/detokenize" ||
                     req.path == "/tokenizer_info";
    if (!ready_ && (api || req.path == "/metrics" || req.path == "/server_info" || req.path == "/get_server_info" ||
                    req.path == "/kv_event_sources")) {
      res.set_header("Retry-After", "5");
      send_error(res, ApiError(503, "server_loading", "the model is still loading"));
      return handled();
    }
    if (config_.api_key.empty() || !api) return httplib::Server::HandlerResponse::Unhandled;
    if (req.get_header_value("Authorization") == "Bearer " + config_.api_key)
      return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, ApiError(401, "authentication_error",
                             req.has_header("Authorization") ? "invalid API key" : "missing API key (Authorization: Bearer ...)"));
    return handled();
  });
  // Errors httplib raises itself (no route, body too large, bad request line) and those of the
  // connection guard (timeout, header and body limits) get a JSON body that names the problem.
  s.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;  // a handler's own error
    std::string message;
    std::string type = "invalid_request_error";
    const ReadFault fault = GuardedHttpServer::fault();
    if (fault == ReadFault::timeout) {
      res.status = 408;
      message = fmt::format("the request did not arrive within {} seconds (--request-timeout); closing the connection",
                            config_.read_timeout_seconds);
    } else if (fault == ReadFault::headers_too_large) {
      res.status = 431;
      message = fmt::format("the request line and headers exceed {} bytes (--max-header-bytes)", config_.max_header_bytes);
    } else if (fault == ReadFault::body_too_large || res.status == 413) {
      res.status = 413;
      message = fmt::format("the request body exceeds {} bytes (--max-request-body)", config_.max_body_bytes);
    } else if (res.status == 414) {
      message = fmt::format("the request URI is longer than {} bytes", GuardedHttpServer::kHttplibUriMax);
    } else if (res.status == 400 && !GuardedHttpServer::headers_complete()) {
      if (GuardedHttpServer::longest_header_line() > GuardedHttpServer::kHttplibHeaderLineMax) {
        res.status = 431;
        message = fmt::format("a request header line is longer than {} bytes", GuardedHttpServer::kHttplibHeaderLineMax);
      } else {
        message = "malformed HTTP request line or headers";
      }
    } else if (res.status == 400) {
      message = "the request body could not be read (truncated, or bad chunked encoding)";
    } else if (res.status == 404 && kRouteMethods.count(req.path)) {
      res.status = 405;
      res.set_header("Allow", kRouteMethods.at(req.path));
      message = fmt::format("method {} is not allowed on {} (use {})", req.method, req.path, kRouteMethods.at(req.path));
    } else if (res.status == 404) {
      message = fmt::format("no route {} {}", req.method, req.path);
      type = "not_found_error";
    } else {
      message = fmt::format("HTTP error {}", res.status);
    }
    if (fault != ReadFault::none) res.set_header("Connection", "close");
    res.set_content(dump_json(ApiError(res.status, type, message).to_json()), "application/json");
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string message = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      message = e.what();
    } catch (...) {
    }
    send_error(res, ApiError(500, "internal_error", message));
  });
  s.set_logger([this](const httplib::Request&, const httplib::Response& res) { metrics_.count_http(res.status); });

  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    res.status = ready_ ? 200 : 503;
    res.set_content(ready_ ? "" : "loading", "text/plain");
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.render(engine_->stats(), model_.name, config_.kv_mode,
                                    {http_->active_connections(), http_->worker_threads()}), "text/plain; version=0.0.4");
  });
  s.Get("/", [](const httplib::Request&, httplib::Response& res) { res.set_content(chat_page_html(), "text/html"); });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    json m = {{"id", model_.name},        {"object", "model"},           {"created", started_},
              {"owned_by", "tqserve"},    {"root", model_.name},         {"max_model_len", model_.max_model_len},
              {"kv_cache_dtype", config_.kv_mode}, {"kv_cache", config_.kv_cache}};
    if (!config_.kv_layers.empty()) m["kv_cache_layers"] = config_.kv_layers;
    res.set_content(dump_json({{"object", "list"}, {"data", json::array({m})}}), "application/json");
  });

  // The serving configuration, as vLLM's /server_info gives its own (routers and operators read
  // the cache layout from it).
  s.Get("/server_info", [this](const httplib::Request&, httplib::Response& res) {
    const EngineStats e = engine_->stats();
    json info = {{"model", model_.name},
                 {"max_model_len", model_.max_model_len},
                 {"kv_cache_dtype", config_.kv_mode},
                 {"kv_cache", config_.kv_cache},
                 {"block_size", e.block_size},
                 {"num_gpu_blocks", e.num_blocks},
                 {"enable_prefix_caching", e.prefix_caching},
                 {"engine", "tqserve"}};
    if (!config_.kv_layers.empty()) info["kv_cache_layers"] = config_.kv_layers;
    res.set_content(dump_json(info), "application/json");
  });

  // What a KV-aware router asks a replica before it subscribes to its KV cache events
  // (vllm-router's kv_index discovery): the block size and identity of the cache...
  s.Get("/get_server_info", [this](const httplib::Request&, httplib::Response& res) {
    const EngineStats e = engine_->stats();
    res.set_content(dump_json({{"model_id", model_.name},
                               {"model_path", std::filesystem::path(model_.path).filename().string()},
                               {"kv_block_size", e.block_size}}),
                    "application/json");
  });
  // ...and where they are published, per data-parallel rank (one here), as vLLM's KVEventsConfig.
  s.Get("/kv_event_sources", [this](const httplib::Request&, httplib::Response& res) {
    json sources = json::object();
    if (!config_.kv_events_endpoint.empty())
      sources["0"] = {{"enable_kv_cache_events", true}, {"publisher", "zmq"},       {"endpoint", config_.kv_events_endpoint},
                      {"topic", config_.kv_events_topic}, {"encoding", "msgpack"}, {"schema_version", 1},
                      {"hwm", 100000}};
    res.set_content(dump_json(sources), "application/json");
  });

  // vLLM's tokenizer description (lm-eval's remote tokenizer reads it).
  s.Get("/tokenizer_info", [this](const httplib::Request&, httplib::Response& res) {
    const Tokenizer& tok = *model_.tokenizer;
    const auto name = [&](const std::optional<TokenId>& id) { return id ? json(tok.token_text(*id)) : json(nullptr); };
    json info = {{"tokenizer_class", "tqserve"},
                 {"eos_token", name(tok.special().eos)},
                 {"bos_token", name(tok.special().bos)},
                 {"pad_token", name(tok.special().pad)},
                 {"add_bos_token", tok.special().add_bos},
                 {"model_max_length", model_.max_model_len},
                 {"chat_template", model_.chat_prompt.has_template() ? json(model_.chat_prompt.source()) : json(nullptr)}};
    res.set_content(dump_json(info), "application/json");
  });

  const auto parse_body = [this](const httplib::Request& req) {
    // A chunked body is only capped roughly while it is read (server/http_guard.h).
    if (req.body.size() > config_.max_body_bytes)
      throw ApiError(413, "invalid_request_error",
                     fmt::format("the request body exceeds {} bytes (--max-request-body)", config_.max_body_bytes));
    check_content_type(req);
    if (req.body.empty()) throw bad_request("the request body is empty: send a JSON object");
    json body;
    try {
      body = json::parse(req.body);
    } catch (const json::exception& e) {
      // "[json.exception.parse_error.101] parse error at line 1, column 9: ..." without the tag.
      std::string detail = e.what();
      if (detail.rfind("[json.exception.", 0) == 0 && detail.find("] ") != std::string::npos)
        detail = detail.substr(detail.find("] ") + 2);
      throw bad_request("the request body is not valid JSON: " + truncate_message(detail));
    }
    if (!body.is_object())
      throw bad_request(fmt::format("the request body must be a JSON object, not {}", body.type_name()));
    return body;
  };

  s.Post("/tokenize", [this, parse_body](const httplib::Request& req, httplib::Response& res) {
    try {
      const json body = parse_body(req);
      std::vector<TokenId> ids;
      if (body.contains("messages")) {
        ApiRequest r = parse_chat_request(body, model_, config_.limits, req.body);
        ids = r.prompts[0];
      } else {
        if (!body.contains("prompt") || !body["prompt"].is_string()) throw bad_request("'prompt' must be a string", "prompt");
        if (body.contains("add_special_tokens") && !body["add_special_tokens"].is_boolean())
          throw bad_request("'add_special_tokens' must be a boolean", "add_special_tokens");
        const bool special = body.value("add_special_tokens", true);
        const std::string text = body["prompt"].get<std::string>();
        ids = special ? model_.tokenizer->encode_prompt(text, true) : model_.tokenizer->encode(text, true);
      }
      res.set_content(dump_json({{"tokens", ids}, {"count", ids.size()}, {"max_model_len", model_.max_model_len}}),
                      "application/json");
    } catch (const ApiError& e) {
      send_error(res, e);
    }
  });
  s.Post("/detokenize", [this, parse_body](const httplib::Request& req, httplib::Response& res) {
    try {
      const json body = parse_body(req);
      if (!body.contains("tokens") || !body["tokens"].is_array()) throw bad_request("'tokens' must be a list of token ids", "tokens");
      std::vector<TokenId> ids;
      for (const json& t : body["tokens"]) {
        if (!t.is_number_integer() || !token_id_in_vocab(t.get<int64_t>(), model_.vocab_size))
          throw bad_request(token_id_outside_vocab("token id", t.dump(), model_.vocab_size), "tokens");
        ids.push_back(t.get<TokenId>());
      }
      res.set_content(dump_json({{"prompt", model_.tokenizer->decode(ids, false)}}), "application/json");
    } catch (const ApiError& e) {
      send_error(res, e);
    }
  });

  const auto completion = [this, parse_body](const httplib::Request& req, httplib::Response& res, bool chat) {
    ApiRequest api;
    try {
      const json body = parse_body(req);
      api = chat ? parse_chat_request(body, model_, config_.limits, req.body)
                 : parse_completion_request(body, model_, config_.limits, req.body);
      const int waiting = engine_->num_unfinished() - config_.max_num_seqs;
      if (waiting >= config_.max_queued_requests) {
        res.set_header("Retry-After", "1");
        throw ApiError(503, "server_overloaded",
                       fmt::format("the server is busy: {} requests are waiting (limit {}); retry later", waiting,
                                   config_.max_queued_requests));
      }
    } catch (const ApiError& e) {
      send_error(res, e);
      return;
    }
    auto job = std::make_shared<CompletionJob>(*engine_, metrics_, std::move(api));
    job->start();
    const std::string id = (chat ? "chatcmpl-" : "cmpl-") + random_suffix();
    auto builder = std::make_shared<ResponseBuilder>(job->request(), model_, id, unix_now());
    const bool stream = job->request().stream;
    // The releaser runs however the response ends: whatever is unfinished is aborted.
    const auto release = [job](bool) { job->abort_unfinished(); };
    const auto provider = [job, builder, stream](size_t, httplib::DataSink& sink) {
      std::optional<ApiError> failure;
      while (!job->all_finished()) {
        const auto outputs = job->wait(std::chrono::milliseconds(1000));
        if (outputs.empty()) {
          // Nothing new for a second: probe the connection so a vanished client is noticed.
          if (!write_all(sink, stream ? std::string(": keep-alive\n\n") : std::string(" "))) return false;
          continue;
        }
        for (const auto& [choice, out] : outputs) {
          if (out.finish == FinishReason::error || out.finish == FinishReason::abort) {
            failure = ApiError(out.finish == FinishReason::error ? 500 : 503, "server_error",
                               out.error.empty() ? "the request was aborted" : out.error);
          }
          builder->add(choice, out);
          if (!stream) continue;
          for (const std::string& chunk : builder->stream_chunks(choice, out))
            if (!write_all(sink, "data: " + chunk + "\n\n")) return false;
        }
      }
      if (stream) {
        if (failure) {
          if (!write_all(sink, "data: " + dump_json(failure->to_json()) + "\n\n")) return false;
        } else {
          for (const std::string& chunk : builder->stream_end())
            if (!write_all(sink, "data: " + chunk + "\n\n")) return false;
        }
        if (!write_all(sink, "data: [DONE]\n\n")) return false;
      } else {
        if (!write_all(sink, dump_json(failure ? failure->to_json() : builder->response()))) return false;
      }
      sink.done();
      return true;
    };
    if (stream) {
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider("text/event-stream", provider, release);
    } else {
      res.set_chunked_content_provider("application/json", provider, release);
    }
  };
  s.Post("/v1/completions", [completion](const httplib::Request& req, httplib::Response& res) { completion(req, res, false); });
  s.Post("/v1/chat/completions",
         [completion](const httplib::Request& req, httplib::Response& res) { completion(req, res, true); });
}

}  // namespace tq
