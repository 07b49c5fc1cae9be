// The serving engine's step loop body: schedule, run one forward pass over every scheduled
// token of every request, sample on the host, detect stops, and report per-request outputs.
// Single-threaded; engine/async_engine.h runs it on its own thread for the server.
#pragma once
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/request.h"
#include "engine/scheduler.h"
#include "kv/block_pool.h"
#include "kv/kv_cache.h"
#include "model/transformer.h"
#include "tokenizer/tokenizer.h"

namespace tq {

struct EngineConfig {
  SchedulerConfig scheduler;
  int max_model_len = 0;  // prompt + output tokens of one request; at most the pool's tokens
  bool enable_prefix_caching = true;
  bool kv_events = false;  // log the prefix cache's changes; the owner must drain take_kv_events()
};

// Counters since start (Prometheus counters and gauges, server/metrics.h).
struct EngineStats {
  int num_running = 0;
  int num_waiting = 0;
  int blocks_in_use = 0;
  int num_blocks = 0;
  int block_size = 0;           // tokens per block
  bool prefix_caching = false;  // whether the block pool caches prefixes
  double kv_usage = 0;  // blocks in use / all blocks
  PrefixCacheStats prefix;
  uint64_t prompt_tokens = 0;      // prompt tokens of finished and running requests, once each
  uint64_t generation_tokens = 0;  // sampled tokens
  uint64_t preemptions = 0;
  uint64_t steps = 0;
  // Filled by AsyncEngine, which runs check_consistency() whenever the engine falls idle.
  uint64_t consistency_checks = 0;
  uint64_t consistency_failures = 0;
};

class EngineCore {
 public:
  // tokenizer may be null (no text). eos_ids: the model's end-of-sequence ids.
  EngineCore(Transformer& model, KvCache& cache, const Tokenizer* tokenizer, std::vector<TokenId> eos_ids,
             const EngineConfig& config);

  // Throws tq::Error (nothing queued) for an empty prompt, ids outside the vocabulary, a prompt
  // that leaves no room for one new token within max_model_len (the message gives both counts),
  // a duplicate id, or invalid sampling parameters.
  void add_request(std::unique_ptr<Request> request);
  // Ends a request now and frees its blocks. False if the id is unknown (already finished).
  bool abort_request(uint64_t id);
  // One step. Returns an output for every request that produced tokens, text or finished.
  std::vector<RequestOutput> step();

  bool has_work() const { return scheduler_.has_work(); }
  EngineStats stats() const;
  const EngineConfig& config() const { return config_; }
  const BlockPool& pool() const { return pool_; }
  // The prefix cache's changes since the last call (EngineConfig::kv_events; else none).
  std::vector<KvCacheEvent> take_kv_events() { return pool_.take_events(); }
  const KvCache& cache() const { return cache_; }
  // Throws tq::Error if block references, the free queue and the prefix cache disagree.
  void check_consistency() const;

 private:
  // After the request's chunk was computed: prompt logprobs, then (when it caught up) sampling.
  void after_forward(Request& r, int chunk_tokens, const float* logits_rows, int vocab, RequestOutput& out);
  void sample_next(Request& r, const float* logits, RequestOutput& out);
  void finish(Request& r, FinishReason reason, bool flush_text, RequestOutput& out);

  Transformer& model_;
  KvCache& cache_;
  const Tokenizer* tokenizer_;
  std::vector<TokenId> eos_ids_;
  EngineConfig config_;
  BlockPool pool_;
  Scheduler scheduler_;
  std::unordered_map<uint64_t, std::unique_ptr<Request>> requests_;
  std::vector<float> logits_;
  std::vector<float> constrained_logits_;  // [vocab] a constrained request's masked logits
  EngineStats counters_;
};

}  // namespace tq
