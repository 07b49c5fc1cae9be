// Which requests compute which tokens in the next step (vLLM v1's scheduler, without phases).
//
// Every step has a token budget (max_num_batched_tokens). Running requests come first, in
// admission order: each gets the tokens it still lacks (1 while decoding, a prompt chunk while
// prefilling) as far as the budget goes. When the pool cannot give a running request its blocks,
// the newest running request is preempted: its blocks are freed and it goes back to the front of
// the waiting queue, to be recomputed from its tokens (prompt and output so far) later; its
// sampler keeps its state, so it resumes with the output it would have had. Then, in a step
// without preemption, waiting requests are admitted first come first served while the budget,
// max_num_seqs and the pool allow; a request admitted for the first time shares the cached
// blocks of its prompt's prefix.
#pragma once
#include <deque>
#include <vector>

#include "engine/request.h"
#include "kv/block_pool.h"

namespace tq {

struct SchedulerConfig {
  int max_num_batched_tokens = 2048;  // tokens computed per step, all requests together
  int max_num_seqs = 64;              // requests running at once
};

// Compute tokens [request->num_computed, request->num_computed + num_tokens) of the request.
struct ScheduledChunk {
  Request* request = nullptr;
  int num_tokens = 0;
};

struct SchedulerOutput {
  std::vector<ScheduledChunk> chunks;
  std::vector<Request*> preempted;  // this step, newest first
  int total_tokens = 0;
  bool empty() const { return chunks.empty(); }
};

class Scheduler {
 public:
  // Throws tq::Error for a budget or sequence limit below 1.
  Scheduler(const SchedulerConfig& config, BlockPool& pool);

  // Appends to the waiting queue. The request must fit the pool on its own (the engine checks
  // its length against max_model_len, and the pool holds at least one max_model_len request).
  void add(Request* request);
  SchedulerOutput schedule();
  // Removes a request from either queue and frees its blocks (finished or aborted).
  void remove(Request* request);

  int num_running() const { return static_cast<int>(running_.size()); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  const SchedulerConfig& config() const { return config_; }
  // The block tables of every request that holds blocks (consistency checks).
  std::vector<const BlockTable*> tables() const;

 private:
  void preempt(Request* request);
  // Tokens the request still lacks, capped by the budget left.
  static int tokens_to_compute(const Request& r, int budget);

  SchedulerConfig config_;
  BlockPool& pool_;
  std::deque<Request*> waiting_;
  std::vector<Request*> running_;  // admission order
};

}  // namespace tq
