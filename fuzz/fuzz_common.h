// Helpers shared by the libFuzzer targets (fuzz/*.cpp, built with -DTQ_FUZZ=ON).
//
// Rule of every harness: it catches exactly the exceptions that the production caller of the
// fuzzed function catches (tq::Error for file readers, ApiError for request parsing, ...).
// Anything else that escapes terminates the process and libFuzzer reports it as a crash.
#pragma once
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace tq::fuzz {

// The shared test data (../shared/testdata beside the repository); $TQ_TESTDATA overrides.
inline std::string testdata(const std::string& relative) {
  const char* env = std::getenv("TQ_TESTDATA");
  return std::string(env != nullptr && *env != 0 ? env : TQ_TESTDATA_DIR) + "/" + relative;
}

// A scratch folder for this process on a RAM file system (the readers take paths, not buffers).
inline const std::string& scratch_dir() {
  // Never destroyed: the atexit handler below runs after static destructors would have.
  static const std::string* const dir = [] {
    const char* base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    auto* d = new std::string(std::string(base) + "/tqfuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(*d);
    // Removed at exit (crashes leave it behind, which is harmless: a few KB on tmpfs).
    std::atexit([] { std::error_code ec; std::filesystem::remove_all(scratch_dir(), ec); });
    return d;
  }();
  return *dir;
}

// Writes `bytes` to scratch_dir()/name and returns the path.
inline std::string write_scratch(const std::string& name, std::string_view bytes) {
  const std::string path = scratch_dir() + "/" + name;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
  return path;
}

inline void remove_scratch(const std::string& name) {
  std::error_code ec;
  std::filesystem::remove(scratch_dir() + "/" + name, ec);
}

// Aborts with a message: a harness invariant (not an expected rejection) was violated.
[[noreturn]] inline void invariant_failed(const char* what) {
  std::fprintf(stderr, "fuzz invariant violated: %s\n", what);
  std::abort();
}

}  // namespace tq::fuzz
