// WorkerPool (server/worker_pool.h): the HTTP server's elastic worker threads.
#include "server/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

namespace tq {
namespace {

using namespace std::chrono_literals;

// Polls cond for up to `limit`; true when it held.
template <class F>
bool eventually(F cond, std::chrono::milliseconds limit = 5000ms) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return cond();
}

// Jobs that block until released, counting how many run at once.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  std::atomic<int> running{0}, done{0};
  void job() {
    ++running;
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [this] { return open; });
    --running;
    ++done;
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(mu);
      open = true;
    }
    cv.notify_all();
  }
};

TEST(WorkerPool, StartsThreadsAsJobsNeedThemUpToTheMaximum) {
  auto live = std::make_shared<std::atomic<int>>(0);
  WorkerPool pool(6, 2, 60s, live);
  EXPECT_EQ(pool.live_threads(), 2u);  // the kept threads start at once
  EXPECT_EQ(live->load(), 2);
  Gate gate;
  for (int i = 0; i < 4; ++i) pool.enqueue([&] { gate.job(); });
  // Four blocking jobs: four threads, each running one.
  ASSERT_TRUE(eventually([&] { return gate.running.load() == 4; }));
  EXPECT_EQ(pool.live_threads(), 4u);
  for (int i = 0; i < 6; ++i) pool.enqueue([&] { gate.job(); });
  // Ten jobs, at most six threads: six run, four wait.
  ASSERT_TRUE(eventually([&] { return gate.running.load() == 6; }));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(gate.running.load(), 6);
  EXPECT_EQ(pool.live_threads(), 6u);
  EXPECT_EQ(live->load(), 6);
  gate.release();
  ASSERT_TRUE(eventually([&] { return gate.done.load() == 10; }));
}

TEST(WorkerPool, IdleThreadsExitDownToTheKeptOnes) {
  auto live = std::make_shared<std::atomic<int>>(0);
  WorkerPool pool(16, 3, 100ms, live);
  Gate gate;
  for (int i = 0; i < 12; ++i) pool.enqueue([&] { gate.job(); });
  ASSERT_TRUE(eventually([&] { return gate.running.load() == 12; }));
  EXPECT_EQ(live->load(), 12);
  gate.release();
  ASSERT_TRUE(eventually([&] { return gate.done.load() == 12; }));
  // 100 ms idle: all but the three kept threads leave.
  ASSERT_TRUE(eventually([&] { return pool.live_threads() == 3; }));
  EXPECT_EQ(live->load(), 3);
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(pool.live_threads(), 3u);
  // Work again after the shrink: new threads start, and every job runs.
  std::atomic<int> ran{0};
  for (int i = 0; i < 50; ++i) pool.enqueue([&] { ++ran; });
  ASSERT_TRUE(eventually([&] { return ran.load() == 50; }));
}

TEST(WorkerPool, AnIdleThreadTakesTheNextJobWithoutANewThread) {
  WorkerPool pool(8, 1, 60s);
  for (int i = 0; i < 20; ++i) {
    std::atomic<bool> ran{false};
    pool.enqueue([&] { ran = true; });
    ASSERT_TRUE(eventually([&] { return ran.load(); }));
    std::this_thread::sleep_for(2ms);  // the thread is back waiting before the next job
  }
  EXPECT_EQ(pool.live_threads(), 1u);
}

TEST(WorkerPool, ShutdownRunsQueuedJobsThenIgnoresNewOnes) {
  std::atomic<int> ran{0};
  {
    WorkerPool pool(1, 1, 60s);
    Gate gate;
    pool.enqueue([&] { gate.job(); });
    for (int i = 0; i < 5; ++i) pool.enqueue([&] { ++ran; });  // queued behind the blocked job
    ASSERT_TRUE(eventually([&] { return gate.running.load() == 1; }));
    std::thread releaser([&] {
      std::this_thread::sleep_for(50ms);
      gate.release();
    });
    pool.shutdown();  // waits for the blocked job and the five queued ones
    releaser.join();
    EXPECT_EQ(ran.load(), 5);
    EXPECT_EQ(pool.live_threads(), 0u);
    pool.enqueue([&] { ran += 100; });
    pool.shutdown();  // again: nothing to do
  }
  EXPECT_EQ(ran.load(), 5);
}

}  // namespace
}  // namespace tq
