#include "server/kv_event_publisher.h"

#include <msgpack.hpp>
#include <zmq.hpp>

#include <chrono>
#include <cstdio>

#include "errors/error.h"

namespace tq {

struct KvEventPublisher::Socket {
  zmq::context_t context{1};
  zmq::socket_t pub{context, zmq::socket_type::xpub};
};

namespace {

// vLLM's name for the engine's own cache tier (see the header).
constexpr const char* kMedium = "GPU";

void pack_event(msgpack::packer<msgpack::sbuffer>& pk, const KvCacheEvent& e) {
  const auto key = [&](const char* k) { pk.pack(k); };
  switch (e.kind) {
    case KvCacheEvent::Kind::block_stored:
      pk.pack_map(8);
      key("type"), pk.pack("BlockStored");
      key("block_hashes"), pk.pack(e.block_hashes);
      key("parent_block_hash");
      if (e.parent_hash) {
        pk.pack_uint64(*e.parent_hash);
      } else {
        pk.pack_nil();
      }
      key("token_ids"), pk.pack_array(static_cast<uint32_t>(e.token_ids.size()));
      for (TokenId t : e.token_ids) pk.pack_uint32(static_cast<uint32_t>(t));
      key("block_size"), pk.pack_uint32(static_cast<uint32_t>(e.block_size));
      key("lora_id"), pk.pack_nil();
      key("medium"), pk.pack(kMedium);
      key("lora_name"), pk.pack_nil();
      return;
    case KvCacheEvent::Kind::block_removed:
      pk.pack_map(3);
      key("type"), pk.pack("BlockRemoved");
      key("block_hashes"), pk.pack(e.block_hashes);
      key("medium"), pk.pack(kMedium);
      return;
    case KvCacheEvent::Kind::all_blocks_cleared:
      pk.pack_map(1);
      key("type"), pk.pack("AllBlocksCleared");
      return;
  }
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string KvEventPublisher::encode_batch(const std::vector<KvCacheEvent>& events, double timestamp) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_array(3);
  pk.pack_double(timestamp);
  pk.pack_array(static_cast<uint32_t>(events.size()));
  for (const KvCacheEvent& e : events) pack_event(pk, e);
  pk.pack_nil();  // data-parallel rank: one engine
  return std::string(buf.data(), buf.size());
}

KvEventPublisher::KvEventPublisher(const std::string& endpoint, std::string topic)
    : socket_(std::make_unique<Socket>()), topic_(std::move(topic)) {
  try {
    socket_->pub.set(zmq::sockopt::sndhwm, 100000);  // vLLM's default high-water mark
    socket_->pub.set(zmq::sockopt::linger, 1000);     // queued messages get a second at close
    socket_->pub.set(zmq::sockopt::xpub_verbose, 1);  // every subscription, not only a topic's first
    socket_->pub.bind(endpoint);
  } catch (const zmq::error_t& e) {
    fail("--kv-events-endpoint '{}': cannot bind a ZeroMQ publisher socket there: {}", endpoint, e.what());
  }
  thread_ = std::thread([this] { run(); });
}

KvEventPublisher::~KvEventPublisher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void KvEventPublisher::publish(std::vector<KvCacheEvent> events) {
  if (events.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(events));
  }
  wake_.notify_one();
}

void KvEventPublisher::send(const std::vector<KvCacheEvent>& batch) {
  const std::string payload = encode_batch(batch, now_seconds());
  unsigned char seq[8];
  for (int i = 0; i < 8; ++i) seq[i] = static_cast<unsigned char>(sequence_ >> (56 - 8 * i));
  ++sequence_;
  // A PUB socket never blocks: past the high-water mark a subscriber's messages are dropped.
  socket_->pub.send(zmq::buffer(topic_), zmq::send_flags::sndmore);
  socket_->pub.send(zmq::buffer(seq, sizeof seq), zmq::send_flags::sndmore);
  socket_->pub.send(zmq::buffer(payload), zmq::send_flags::none);
}

void KvEventPublisher::run() {
  for (;;) {
    std::deque<std::vector<KvCacheEvent>> batches;
    bool stopping;
    {
      std::unique_lock<std::mutex> lock(mu_);
      const auto ready = [&] { return stopping_ || !queue_.empty(); };
      if (stored_any_) {
        wake_.wait(lock, ready);
      } else {  // new subscriptions matter until the first store: look for them every 20 ms
        wake_.wait_for(lock, std::chrono::milliseconds(20), ready);
      }
      batches.swap(queue_);
      stopping = stopping_;
    }
    try {
      // A subscriber joined (XPUB passes its subscription up as a message starting with byte 1):
      // while nothing has been stored since start, tell the subscribers that the cache is empty,
      // so that a router that knew this replica before a restart drops its old blocks.
      zmq::message_t message;
      while (!stored_any_ && socket_->pub.recv(message, zmq::recv_flags::dontwait)) {
        const bool subscribe = message.size() > 0 && static_cast<const unsigned char*>(message.data())[0] == 1;
        if (subscribe) {
          KvCacheEvent cleared;
          cleared.kind = KvCacheEvent::Kind::all_blocks_cleared;
          send({cleared});
        }
      }
      for (const std::vector<KvCacheEvent>& batch : batches) {
        for (const KvCacheEvent& e : batch) stored_any_ = stored_any_ || e.kind == KvCacheEvent::Kind::block_stored;
        send(batch);
      }
    } catch (const std::exception& e) {  // a lost batch, not a lost server
      std::fprintf(stderr, "tqserve: KV event publisher: %s\n", e.what());
    }
    if (stopping) return;
  }
}

}  // namespace tq
