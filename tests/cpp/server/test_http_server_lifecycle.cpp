// HttpServer's stop() against run(): a start-up that fails within milliseconds of binding (a bad
// flag) stops the server before its thread has started listening, and httplib's own stop() does
// nothing until its listen loop runs; the server must end either way.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "server/http_server.h"

namespace tq {
namespace {

ServerConfig any_port() {
  ServerConfig config;
  config.host = "127.0.0.1";
  config.port = 0;
  return config;
}

// Runs server.run() on a thread with `before_wait` started beside it; true when run() returned
// within `limit`. A run() that has not returned by then is stopped again (httplib's stop works
// once it listens), so a failing test still ends.
template <class Fn>
bool run_returns_within(HttpServer& server, std::chrono::milliseconds limit, Fn before_wait) {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::thread runner([&] {
    server.run();
    std::lock_guard<std::mutex> lock(m);
    done = true;
    cv.notify_all();
  });
  before_wait();
  bool returned;
  {
    std::unique_lock<std::mutex> lock(m);
    returned = cv.wait_for(lock, limit, [&] { return done; });
  }
  if (!returned) server.stop();
  runner.join();
  return returned;
}

TEST(HttpServerLifecycle, StopBeforeRunMakesRunReturnAtOnce) {
  HttpServer server(any_port());
  ASSERT_TRUE(server.bind());
  server.stop();
  EXPECT_TRUE(run_returns_within(server, std::chrono::seconds(10), [] {}));
}

TEST(HttpServerLifecycle, StopRightAfterTheRunThreadStartsEndsIt) {
  // The race of a failing start-up: stop() while the run thread may or may not listen yet.
  for (int i = 0; i < 50; ++i) {
    HttpServer server(any_port());
    ASSERT_TRUE(server.bind());
    ASSERT_TRUE(run_returns_within(server, std::chrono::seconds(5), [&] { server.stop(); })) << "round " << i;
  }
}

TEST(HttpServerLifecycle, StopWhileListeningEndsRun) {
  HttpServer server(any_port());
  ASSERT_TRUE(server.bind());
  EXPECT_TRUE(run_returns_within(server, std::chrono::seconds(10), [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    server.stop();
  }));
  server.stop();  // a second stop after run() returned is harmless
}

}  // namespace
}  // namespace tq
