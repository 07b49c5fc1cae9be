// memory/huge_pages.h: large buffers are zeroed, 2 MiB-aligned and advised for huge pages (whether
// the kernel grants them depends on its settings and free memory, so that is not asserted); small
// ones come from malloc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "memory/huge_pages.h"

namespace tq {
namespace {

bool all_zero(const uint8_t* p, size_t n) { return std::all_of(p, p + n, [](uint8_t b) { return b == 0; }); }

TEST(HugePages, LargeBufferIsZeroedAlignedAndAdvised) {
  for (size_t bytes : {kHugePageBytes, 3 * kHugePageBytes + 12345}) {  // whole huge pages, and a partial last one
    SCOPED_TRACE(bytes);
    auto* p = static_cast<uint8_t*>(huge_page_allocate(bytes));
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(all_zero(p, bytes));
    for (size_t i = 0; i < bytes; i += 4096) p[i] = static_cast<uint8_t>(i / 4096 + 1);
    p[bytes - 1] = 7;
    EXPECT_EQ(p[4096], 2);
    EXPECT_EQ(p[bytes - 1], 7);
    if (large_buffers_mapped()) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePageBytes, 0u);
      // The whole huge pages are advised; a partial last one is not (it stays in 4 KiB pages).
      const size_t whole = bytes / kHugePageBytes * kHugePageBytes;
      EXPECT_TRUE(advised_for_huge_pages(p, whole));
      if (whole < bytes) EXPECT_FALSE(advised_for_huge_pages(p + whole, bytes - whole));
    }
    huge_page_free(p, bytes);
  }
  // Too large to map: nullptr, no crash (under AddressSanitizer malloc serves it, and ASan reports
  // an impossible size as an error by design).
  if (large_buffers_mapped()) EXPECT_EQ(huge_page_allocate(~size_t(0) - 100), nullptr);
}

TEST(HugePages, SmallBuffersComeFromMallocZeroed) {
  for (size_t bytes : {size_t(0), size_t(1), size_t(4096), kHugePageBytes - 1}) {
    auto* p = static_cast<uint8_t*>(huge_page_allocate(bytes));
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_TRUE(all_zero(p, bytes)) << bytes;
    std::fill(p, p + bytes, uint8_t{0xAB});
    huge_page_free(p, bytes);
  }
  // A malloc'd buffer is not in an advised mapping.
  std::string small(8192, 'x');
  EXPECT_FALSE(advised_for_huge_pages(small.data(), small.size()));
}

TEST(HugePages, LargeBytesHoldsWhatIsWritten) {
  LargeBytes v(5 * kHugePageBytes / 2, 0);
  for (size_t i = 0; i < v.size(); i += 997) v[i] = static_cast<uint8_t>(i % 251);
  LargeBytes copy = v;
  ASSERT_EQ(copy.size(), v.size());
  EXPECT_TRUE(std::equal(v.begin(), v.end(), copy.begin()));
  copy.assign(v.begin(), v.begin() + 100);
  ASSERT_EQ(copy.size(), 100u);
  EXPECT_TRUE(std::equal(copy.begin(), copy.end(), v.begin()));
}

}  // namespace
}  // namespace tq
