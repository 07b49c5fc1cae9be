// memory/huge_pages.h: large buffers are zeroed, 2 MiB-aligned and, where the kernel's transparent
// huge pages are on, backed by huge pages once touched; small ones come from malloc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>

#include "memory/huge_pages.h"

namespace tq {
namespace {

// The bracketed word of /sys/kernel/mm/transparent_hugepage/enabled ("always", "madvise", "never"),
// empty where the file is missing.
std::string thp_mode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(f, line);
  const size_t open = line.find('['), close = line.find(']');
  return open == std::string::npos || close == std::string::npos ? "" : line.substr(open + 1, close - open - 1);
}

bool all_zero(const uint8_t* p, size_t n) { return std::all_of(p, p + n, [](uint8_t b) { return b == 0; }); }

TEST(HugePages, LargeBufferIsZeroedAlignedAndBackedByHugePages) {
  const size_t bytes = 3 * kHugePageBytes + 12345;  // not a whole number of huge pages
  auto* p = static_cast<uint8_t*>(huge_page_allocate(bytes));
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(all_zero(p, bytes));
  for (size_t i = 0; i < bytes; i += 4096) p[i] = static_cast<uint8_t>(i / 4096 + 1);
  p[bytes - 1] = 7;
  EXPECT_EQ(p[4096], 2);
  EXPECT_EQ(p[bytes - 1], 7);
  if (large_buffers_mapped()) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePageBytes, 0u);
    const std::string mode = thp_mode();
    if (mode == "always" || mode == "madvise")
      EXPECT_TRUE(backed_by_huge_pages(p, bytes)) << "THP mode " << mode;
  }
  huge_page_free(p, bytes);
}

TEST(HugePages, SmallBuffersComeFromMallocZeroed) {
  for (size_t bytes : {size_t(0), size_t(1), size_t(4096), kHugePageBytes - 1}) {
    auto* p = static_cast<uint8_t*>(huge_page_allocate(bytes));
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_TRUE(all_zero(p, bytes)) << bytes;
    std::fill(p, p + bytes, uint8_t{0xAB});
    huge_page_free(p, bytes);
  }
  // A malloc'd buffer of a few KiB is not in a huge page (its heap is advised nothing).
  std::string small(8192, 'x');
  EXPECT_FALSE(backed_by_huge_pages(small.data(), small.size()));
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
