// A cache whose rows live on a device (KvPageHome::Device): the same shape, sizes, block pool and
// block tables as a host cache, no host arenas, and every row accessor refusing by name.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "errors/error.h"
#include "kv/block_pool.h"
#include "kv/kv_cache.h"
#include "model/device_forward.h"

namespace tq {
namespace {

const KvCacheShape kShape{4, 2, 64, 16, KvDtype::F16, KvDtype::F16};

TEST(KvDevicePages, SizesAndBlocksAsOnTheHostWithoutHostMemory) {
  const size_t live_before = kv_cache_live_arena_bytes();
  KvCache device(kShape, 1000, {}, {}, {}, {}, KvPageHome::Device);
  EXPECT_EQ(kv_cache_live_arena_bytes(), live_before);  // nothing allocated here
  KvCache host(kShape, 1000);
  EXPECT_EQ(device.home(), KvPageHome::Device);
  EXPECT_EQ(host.home(), KvPageHome::Host);
  EXPECT_EQ(device.total_bytes(), host.total_bytes());
  EXPECT_EQ(device.num_blocks(), host.num_blocks());
  device.prefault();  // nothing to touch
  BlockPool pool(device);
  BlockTable table;
  ASSERT_TRUE(pool.allocate(table, 40));
  EXPECT_EQ(table.blocks.size(), 3u);
  pool.free(table);
  EXPECT_EQ(pool.num_free(), pool.num_blocks());
}

TEST(KvDevicePages, RowAccessorsRefuseNamingTheDevice) {
  KvCache device(kShape, 8, {}, {}, {}, {}, KvPageHome::Device);
  BlockPool pool(device);
  BlockTable table;
  ASSERT_TRUE(pool.allocate(table, 1));
  std::vector<float> k(2 * 64, 1.0f), v(2 * 64, 2.0f);
  const auto expect_refused = [](const auto& call, const std::string& what) {
    try {
      call();
      ADD_FAILURE() << what << " ran on a device cache";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(what), std::string::npos) << message;
      EXPECT_NE(message.find("device"), std::string::npos) << message;
    }
  };
  expect_refused([&] { device.write(0, table, 0, k.data(), v.data()); }, "write");
  expect_refused([&] { device.read(0, table, 0, k.data(), v.data()); }, "read");
  expect_refused([&] { (void)device.k_pages(0); }, "k_pages");
  expect_refused([&] { (void)device.v_pages(0); }, "v_pages");
  pool.free(table);
}

// What the CUDA backend can hold, decided from the shape alone (cli checks it before calibrating).
TEST(KvDevicePages, DeviceNamesTheCacheItCannotHold) {
  EXPECT_EQ(device_cache_unsupported(ComputeDevice::Cpu, {4, 2, 64, 16, KvDtype::TQ4, KvDtype::TQ4}), "");
  EXPECT_EQ(device_cache_unsupported(ComputeDevice::Cuda, kShape), "");
  EXPECT_EQ(device_cache_unsupported(ComputeDevice::Cuda, {4, 2, 64, 16, KvDtype::F32, KvDtype::F32}), "");
  const std::string tq4 = device_cache_unsupported(ComputeDevice::Cuda, {4, 2, 64, 16, KvDtype::TQ4, KvDtype::TQ4});
  EXPECT_NE(tq4.find("tq4"), std::string::npos) << tq4;
  KvCacheShape mixed = kShape;
  mixed.v_dtype = KvDtype::Q8_0;
  EXPECT_NE(device_cache_unsupported(ComputeDevice::Cuda, mixed).find("q8_0"), std::string::npos);
  KvCacheShape protected_layers{4, 2, 64, 16, KvDtype::TQ4, KvDtype::TQ4};
  protected_layers.protect_layers = 2;  // every layer f16: a full-precision cache after all
  EXPECT_EQ(device_cache_unsupported(ComputeDevice::Cuda, protected_layers), "");
}

}  // namespace
}  // namespace tq
