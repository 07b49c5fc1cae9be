// Prometheus metrics of the server (text exposition format 0.0.4), names prefixed "tqserve:" and
// modelled on vLLM's: request gauges, KV cache usage, prefix cache and token counters from the
// engine, and latency histograms recorded as outputs reach the HTTP layer. The ones routers and
// dashboards read are also given under vLLM's own names ("vllm:", with its model_name label), so
// tools built for vLLM work on tqserve unchanged.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine_core.h"

namespace tq {

// What the HTTP layer holds right now.
struct HttpGauges {
  int open_connections = 0;  // being served (keep-alive waits included)
  int worker_threads = 0;    // alive in the worker pool (server/worker_pool.h)
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  // Lines of one histogram family member: NAME_bucket{le=...}, NAME_sum, NAME_count.
  void render(const std::string& name, std::string& out) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // [bounds + 1] (last: +Inf)
  double sum_ = 0;
  uint64_t count_ = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();
  // Thread-safe.
  void observe_ttft(double seconds);
  void observe_itl(double seconds);
  void observe_e2e(double seconds);
  void count_finished(const std::string& reason);
  void count_http(int status);
  // The /metrics page: these plus the engine's counters and the HTTP layer's gauges.
  std::string render(const EngineStats& engine, const std::string& model_name, const std::string& kv_mode,
                     const HttpGauges& http) const;

 private:
  mutable std::mutex mu_;
  Histogram ttft_, itl_, e2e_;
  std::map<std::string, uint64_t> finished_;  // by finish reason
  std::map<int, uint64_t> http_;              // by status code
};

}  // namespace tq
