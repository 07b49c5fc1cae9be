// server/kv_event_publisher.h: an EventBatch decodes (msgpack-cxx's own unpacker) into the shape
// vllm-router 0.1.17 reads: [timestamp, [event maps tagged by "type"], nil], with exactly the
// fields written for each event and the values given.
#include <gtest/gtest.h>

#include <map>
#include <msgpack.hpp>
#include <string>

#include "server/kv_event_publisher.h"

namespace tq {
namespace {

std::map<std::string, msgpack::object> fields(const msgpack::object& event) {
  EXPECT_EQ(event.type, msgpack::type::MAP);
  std::map<std::string, msgpack::object> out;
  for (uint32_t i = 0; i < event.via.map.size; ++i)
    out[event.via.map.ptr[i].key.as<std::string>()] = event.via.map.ptr[i].val;
  EXPECT_EQ(out.size(), event.via.map.size) << "a field written twice";
  return out;
}

TEST(KvEventEncoding, BatchDecodesToTheRoutersShape) {
  KvCacheEvent stored;
  stored.kind = KvCacheEvent::Kind::block_stored;
  stored.block_hashes = {0xFFFFFFFFFFFFFFFFull, 7};
  stored.parent_hash = 42;
  stored.token_ids = {1, 2, 3, 4, 5, 6, 7, 8};
  stored.block_size = 4;
  KvCacheEvent first = stored;  // the start of a sequence: no parent
  first.parent_hash.reset();
  KvCacheEvent removed;
  removed.kind = KvCacheEvent::Kind::block_removed;
  removed.block_hashes = {7};
  KvCacheEvent cleared;  // all_blocks_cleared

  const std::string bytes = KvEventPublisher::encode_batch({stored, first, removed, cleared}, 1234.5);
  size_t offset = 0;
  const msgpack::object_handle handle = msgpack::unpack(bytes.data(), bytes.size(), offset);
  EXPECT_EQ(offset, bytes.size()) << "trailing bytes";
  const msgpack::object& batch = handle.get();
  ASSERT_EQ(batch.type, msgpack::type::ARRAY);
  ASSERT_EQ(batch.via.array.size, 3u);
  EXPECT_EQ(batch.via.array.ptr[0].type, msgpack::type::FLOAT64);
  EXPECT_EQ(batch.via.array.ptr[0].as<double>(), 1234.5);
  EXPECT_TRUE(batch.via.array.ptr[2].is_nil());
  const msgpack::object& events = batch.via.array.ptr[1];
  ASSERT_EQ(events.via.array.size, 4u);

  auto s = fields(events.via.array.ptr[0]);
  ASSERT_EQ(s.size(), 8u);
  EXPECT_EQ(s["type"].as<std::string>(), "BlockStored");
  EXPECT_EQ(s["block_hashes"].as<std::vector<uint64_t>>(), stored.block_hashes);
  EXPECT_EQ(s["block_hashes"].via.array.ptr[0].type, msgpack::type::POSITIVE_INTEGER);
  EXPECT_EQ(s["parent_block_hash"].as<uint64_t>(), 42u);
  EXPECT_EQ(s["token_ids"].as<std::vector<uint32_t>>(), (std::vector<uint32_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(s["block_size"].as<uint32_t>(), 4u);
  EXPECT_TRUE(s["lora_id"].is_nil());
  EXPECT_TRUE(s["lora_name"].is_nil());
  EXPECT_EQ(s["medium"].as<std::string>(), "GPU");
  EXPECT_TRUE(fields(events.via.array.ptr[1])["parent_block_hash"].is_nil());

  auto r = fields(events.via.array.ptr[2]);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r["type"].as<std::string>(), "BlockRemoved");
  EXPECT_EQ(r["block_hashes"].as<std::vector<uint64_t>>(), std::vector<uint64_t>{7});
  EXPECT_EQ(r["medium"].as<std::string>(), "GPU");

  auto c = fields(events.via.array.ptr[3]);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c["type"].as<std::string>(), "AllBlocksCleared");
}

}  // namespace
}  // namespace tq
