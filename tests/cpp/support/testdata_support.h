// The shared test data (../shared/testdata beside the clone, README there): where it is, and
// skipping a test that needs it when a clone has none. $TQ_TESTDATA_DIR overrides the location
// (a missing directory there shows what a bare clone does).
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace tq::test {

inline std::string testdata_dir() {
  const char* env = std::getenv("TQ_TESTDATA_DIR");
  return env && *env ? std::string(env) : std::string(TQ_TESTDATA_DIR);
}

inline std::string testdata(const std::string& relative) { return testdata_dir() + "/" + relative; }

inline bool have_testdata() { return std::filesystem::is_directory(testdata_dir()); }

}  // namespace tq::test

// First statement of a test (or of a fixture's SetUp) that reads the shared test data.
#define TQ_REQUIRE_TESTDATA()                                                                           \
  do {                                                                                                  \
    if (!::tq::test::have_testdata())                                                                   \
      GTEST_SKIP() << "needs the shared test data, not found at " << ::tq::test::testdata_dir();        \
  } while (0)
