// Publishes the engine's KV cache events (kv/kv_events.h) on a ZeroMQ publisher socket (XPUB: a PUB
// socket that also sees subscriptions) in vLLM's wire
// format, for KV-aware routers (vllm-router's kv_aware policy, llm-d's indexer). Each message has
// three frames: the topic, a sequence number (8 bytes, big-endian, +1 per message from 0) and a
// MessagePack EventBatch, [timestamp (seconds since the epoch, float), [event, ...], nil (the
// data-parallel rank)], each event a map tagged by "type":
//   {"type": "BlockStored", "block_hashes": [uint, ...], "parent_block_hash": uint | nil,
//    "token_ids": [uint, ...], "block_size": uint, "lora_id": nil, "medium": "GPU", "lora_name": nil}
//   {"type": "BlockRemoved", "block_hashes": [uint, ...], "medium": "GPU"}
//   {"type": "AllBlocksCleared"}
// — the encoding vllm-router 0.1.17 decodes (tests/python/test_kv_events.py checks it).
// "GPU" is the name vLLM gives its engine's own cache (a router ranks it above offloaded "CPU"
// copies); tqserve's own cache is that tier, wherever it lives.
//
// Until the first block is stored, each subscription that arrives makes the publisher send
// AllBlocksCleared (to every subscriber: all of them are told the truth, an empty cache), so that a
// router that knew this replica before a restart drops what it knew. The engine thread only
// queues; a thread of the publisher sends. A subscriber that joins late misses what was sent
// before (there is no replay socket): a router learns a replica's older blocks only as they are
// stored again.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kv/kv_events.h"

namespace tq {

class KvEventPublisher {
 public:
  // Binds the socket to endpoint (e.g. "tcp://*:5557"; a router resolves the wildcard to the
  // replica's host). Throws tq::Error naming the endpoint when it cannot (malformed, port taken).
  KvEventPublisher(const std::string& endpoint, std::string topic);
  ~KvEventPublisher();  // sends what is queued (for at most a second), then closes
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // Queues one batch (thread-safe, quick).
  void publish(std::vector<KvCacheEvent> events);

  // The MessagePack EventBatch of events, as sent.
  static std::string encode_batch(const std::vector<KvCacheEvent>& events, double timestamp);

 private:
  void run();
  void send(const std::vector<KvCacheEvent>& batch);  // publisher thread only

  struct Socket;
  std::unique_ptr<Socket> socket_;
  std::string topic_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::vector<KvCacheEvent>> queue_;
  bool stopping_ = false;
  uint64_t sequence_ = 0;    // publisher thread only
  bool stored_any_ = false;  // publisher thread only
  std::thread thread_;
};

}  // namespace tq
