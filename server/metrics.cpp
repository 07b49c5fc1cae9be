#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace tq {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(const std::string& name, std::string& out) const {
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cumulative);
  }
  cumulative += counts_.back();
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, cumulative, name, sum_, name, count_);
}

namespace {
// vLLM's bucket bounds (seconds).
const std::vector<double> kTtftBounds = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                         0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0};
const std::vector<double> kItlBounds = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4,
                                        0.5,  0.75,  1.0,  2.5,   5.0, 7.5,  10.0, 20.0, 40.0, 80.0};
const std::vector<double> kE2eBounds = {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                                        120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}  // namespace

ServerMetrics::ServerMetrics() : ttft_(kTtftBounds), itl_(kItlBounds), e2e_(kE2eBounds) {}

void ServerMetrics::observe_ttft(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  ttft_.observe(s);
}
void ServerMetrics::observe_itl(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  itl_.observe(s);
}
void ServerMetrics::observe_e2e(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  e2e_.observe(s);
}
void ServerMetrics::count_finished(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  ++finished_[reason];
}
void ServerMetrics::count_http(int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++http_[status];
}

std::string ServerMetrics::render(const EngineStats& e, const std::string& model, const std::string& kv_mode,
                                  const HttpGauges& http) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  const std::string labels = fmt::format("model_name=\"{}\"", model);
  const auto metric = [&](const char* name, const char* type, const char* help, const std::string& value) {
    out += fmt::format("# HELP tqserve:{} {}\n# TYPE tqserve:{} {}\ntqserve:{}{{{}}} {}\n", name, help, name, type, name,
                       labels, value);
  };
  metric("num_requests_running", "gauge", "Requests computing or generating.", std::to_string(e.num_running));
  metric("num_requests_waiting", "gauge", "Requests waiting to be scheduled.", std::to_string(e.num_waiting));
  metric("kv_cache_usage_perc", "gauge", "Fraction of KV cache blocks in use (1 = all).", fmt::format("{}", e.kv_usage));
  metric("kv_cache_blocks_in_use", "gauge", "KV cache blocks held by requests.", std::to_string(e.blocks_in_use));
  metric("kv_cache_blocks_total", "gauge", "KV cache blocks.", std::to_string(e.num_blocks));
  out += fmt::format("# HELP tqserve:kv_cache_info KV cache mode.\n# TYPE tqserve:kv_cache_info gauge\n"
                     "tqserve:kv_cache_info{{{},kv_cache_dtype=\"{}\"}} 1\n",
                     labels, kv_mode);
  metric("prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.",
         std::to_string(e.prefix.queries));
  metric("prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.", std::to_string(e.prefix.hits));
  metric("prompt_tokens_total", "counter", "Prompt tokens received.", std::to_string(e.prompt_tokens));
  metric("generation_tokens_total", "counter", "Tokens generated.", std::to_string(e.generation_tokens));
  metric("num_preemptions_total", "counter", "Requests preempted (to be recomputed).", std::to_string(e.preemptions));
  metric("kv_cache_consistency_checks_total", "counter", "Block pool and prefix cache checks run when the engine fell idle.",
         std::to_string(e.consistency_checks));
  metric("kv_cache_consistent", "gauge", "1 while every idle-time block pool and prefix cache check passed, 0 after a failure.",
         e.consistency_failures == 0 ? "1" : "0");
  metric("http_connections_open", "gauge", "HTTP connections being served.", std::to_string(http.open_connections));
  metric("http_worker_threads", "gauge", "HTTP worker threads alive (they start with the load and exit when idle).",
         std::to_string(http.worker_threads));
  out += "# HELP tqserve:request_success_total Finished requests by finish reason.\n"
         "# TYPE tqserve:request_success_total counter\n";
  for (const char* reason : {"stop", "length", "abort", "error"}) {
    auto it = finished_.find(reason);
    out += fmt::format("tqserve:request_success_total{{{},finished_reason=\"{}\"}} {}\n", labels, reason,
                       it == finished_.end() ? 0 : it->second);
  }
  out += "# HELP tqserve:http_responses_total HTTP responses by status code.\n"
         "# TYPE tqserve:http_responses_total counter\n";
  for (const auto& [status, n] : http_)
    out += fmt::format("tqserve:http_responses_total{{{},status=\"{}\"}} {}\n", labels, status, n);
  const auto histogram = [&](const char* name, const char* help, const Histogram& h) {
    out += fmt::format("# HELP tqserve:{} {}\n# TYPE tqserve:{} histogram\n", name, help, name);
    std::string body;
    h.render(fmt::format("tqserve:{}", name), body);
    // Add the model label to every sample line.
    size_t pos = 0;
    while (pos < body.size()) {
      const size_t end = body.find('\n', pos);
      std::string line = body.substr(pos, end - pos);
      const size_t brace = line.find('{');
      const size_t space = line.find(' ');
      if (brace != std::string::npos && brace < space) {
        line.insert(brace + 1, labels + ",");
      } else {
        line.insert(space, "{" + labels + "}");
      }
      out += line + "\n";
      pos = end + 1;
    }
  };
  histogram("time_to_first_token_seconds", "Time to first token.", ttft_);
  histogram("inter_token_latency_seconds", "Time between consecutive output tokens.", itl_);
  histogram("e2e_request_latency_seconds", "Arrival to finish.", e2e_);
  return out;
}

}  // namespace tq
