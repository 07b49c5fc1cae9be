#include "server/http_server.h"

#include <httplib.h>
#include <fmt/format.h>

#include <chrono>
#include <cstdio>

#include "engine/chat_prompt.h"
#include "errors/error.h"
#include "server/chat_page.h"
#include "server/completion_job.h"
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

}  // namespace

HttpServer::HttpServer(ServerConfig config) : config_(std::move(config)), http_(std::make_unique<httplib::Server>()) {
  started_ = unix_now();
  const int workers = std::max(8, config_.max_connections);
  http_->new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
  http_->set_payload_max_length(config_.max_body_bytes);
  http_->set_read_timeout(config_.read_timeout_seconds, 0);
  http_->set_keep_alive_max_count(1000);
  install_routes();
}

HttpServer::~HttpServer() = default;

bool HttpServer::bind() {
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
  return true;
}

void HttpServer::attach(AsyncEngine& engine, ServedModel model, std::string kv_mode) {
  engine_ = &engine;
  model_ = std::move(model);
  config_.kv_mode = std::move(kv_mode);
  ready_ = true;
}

void HttpServer::run() { http_->listen_after_bind(); }

void HttpServer::stop() { http_->stop(); }

void HttpServer::install_routes() {
  httplib::Server& s = *http_;

  // Authentication for the API; /health, /metrics and the page stay open.
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    const bool api = req.path.rfind("/v1/", 0) == 0 || req.path == "/tokenize" || req.path == "/detokenize" ||
                     req.path == "/tokenizer_info";
    if (!ready_ && (api || req.path == "/metrics")) {
      res.set_header("Retry-After", "5");
      send_error(res, ApiError(503, "server_loading", "the model is still loading"));
      return httplib::Server::HandlerResponse::Handled;
    }
    if (config_.api_key.empty() || !api) return httplib::Server::HandlerResponse::Unhandled;
    if (req.get_header_value("Authorization") == "Bearer " + config_.api_key)
      return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, ApiError(401, "authentication_error",
                             req.has_header("Authorization") ? "invalid API key" : "missing API key (Authorization: Bearer ...)"));
    return httplib::Server::HandlerResponse::Handled;
  });
  // Errors httplib raises itself (no route, body too large, bad request line) get a JSON body.
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message;
    std::string type = "invalid_request_error";
    switch (res.status) {
      case 404: message = fmt::format("no route {} {}", req.method, req.path), type = "not_found_error"; break;
      case 413: message = "the request body is too large"; break;
      case 405: message = fmt::format("method {} is not allowed on {}", req.method, req.path); break;
      default: message = fmt::format("HTTP error {}", res.status);
    }
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
    res.set_content(metrics_.render(engine_->stats(), model_.name, config_.kv_mode), "text/plain; version=0.0.4");
  });
  s.Get("/", [](const httplib::Request&, httplib::Response& res) { res.set_content(chat_page_html(), "text/html"); });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    json m = {{"id", model_.name},        {"object", "model"},           {"created", started_},
              {"owned_by", "tqserve"},    {"root", model_.name},         {"max_model_len", model_.max_model_len},
              {"kv_cache_dtype", config_.kv_mode}};
    res.set_content(dump_json({{"object", "list"}, {"data", json::array({m})}}), "application/json");
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
                 {"chat_template", model_.chat_template.empty() ? json(nullptr) : json(model_.chat_template)}};
    res.set_content(dump_json(info), "application/json");
  });

  const auto parse_body = [](const httplib::Request& req) {
    json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded()) throw bad_request("the request body is not valid JSON");
    if (!body.is_object()) throw bad_request("the request body must be a JSON object");
    return body;
  };

  s.Post("/tokenize", [this, parse_body](const httplib::Request& req, httplib::Response& res) {
    try {
      const json body = parse_body(req);
      std::vector<TokenId> ids;
      if (body.contains("messages")) {
        ApiRequest r = parse_chat_request(body, model_, config_.limits);
        ids = r.prompts[0];
      } else {
        if (!body.contains("prompt") || !body["prompt"].is_string()) throw bad_request("'prompt' must be a string", "prompt");
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
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= model_.vocab_size)
          throw bad_request(fmt::format("token id {} is outside the vocabulary (0..{})", t.dump(), model_.vocab_size - 1),
                            "tokens");
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
      api = chat ? parse_chat_request(body, model_, config_.limits) : parse_completion_request(body, model_, config_.limits);
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
