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
// A Prometheus label value: backslash, double quote and newline escaped.
std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

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
  const std::string labels = fmt::format("model_name=\"{}\"", escape_label(model));
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
                     labels, escape_label(kv_mode));
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
  // One histogram family, the model label added to every sample line.
  const auto histogram = [&](const std::string& prefix, const char* name, const char* help, const Histogram& h) {
    out += fmt::format("# HELP {}:{} {}\n# TYPE {}:{} histogram\n", prefix, name, help, prefix, name);
    std::string body;
    h.render(fmt::format("{}:{}", prefix, name), body);
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
  histogram("tqserve", "time_to_first_token_seconds", "Time to first token.", ttft_);
  histogram("tqserve", "inter_token_latency_seconds", "Time between consecutive output tokens.", itl_);
  histogram("tqserve", "e2e_request_latency_seconds", "Arrival to finish.", e2e_);

  // The same quantities under vLLM's names, which routers and dashboards built for vLLM scrape
  // (vllm-router, llm-d's endpoint picker, the vLLM production stack's Grafana boards). The older
  // gpu_* names are kept beside the current ones, as vLLM kept them for a while.
  const auto vllm = [&](const char* name, const char* type, const char* help, const std::string& value) {
    out += fmt::format("# HELP vllm:{} {}\n# TYPE vllm:{} {}\nvllm:{}{{{}}} {}\n", name, help, name, type, name, labels,
                       value);
  };
  vllm("num_requests_running", "gauge", "Number of requests in model execution batches.", std::to_string(e.num_running));
  vllm("num_requests_waiting", "gauge", "Number of requests waiting to be processed.", std::to_string(e.num_waiting));
  vllm("kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", fmt::format("{}", e.kv_usage));
  vllm("gpu_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage (older name).",
       fmt::format("{}", e.kv_usage));
  vllm("prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens.",
       std::to_string(e.prefix.queries));
  vllm("prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.",
       std::to_string(e.prefix.hits));
  vllm("gpu_prefix_cache_queries_total", "counter", "Prefix cache queries in tokens (older name).",
       std::to_string(e.prefix.queries));
  vllm("gpu_prefix_cache_hits_total", "counter", "Prefix cache hits in tokens (older name).", std::to_string(e.prefix.hits));
  vllm("prompt_tokens_total", "counter", "Number of prefill tokens processed.", std::to_string(e.prompt_tokens));
  vllm("generation_tokens_total", "counter", "Number of generation tokens processed.", std::to_string(e.generation_tokens));
  vllm("num_preemptions_total", "counter", "Cumulative number of preemptions from the engine.", std::to_string(e.preemptions));
  out += fmt::format("# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
                     "# TYPE vllm:cache_config_info gauge\n"
                     "vllm:cache_config_info{{{},block_size=\"{}\",num_gpu_blocks=\"{}\",cache_dtype=\"{}\","
                     "enable_prefix_caching=\"{}\"}} 1\n",
                     labels, e.block_size, e.num_blocks, escape_label(kv_mode), e.prefix_caching ? "True" : "False");
  histogram("vllm", "time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttft_);
  histogram("vllm", "inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itl_);
  histogram("vllm", "e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", e2e_);
  return out;
}

}  // namespace tq
