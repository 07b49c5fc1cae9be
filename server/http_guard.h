// The HTTP server's connection-level limits, which cpp-httplib 0.11.4 (a compiled library: its
// CPPHTTPLIB_* macros are fixed in the .so) cannot be told at run time:
//  - at most `max_connections` connections are served at once; one beyond gets a 503 (JSON,
//    Retry-After) and is closed, instead of queueing unseen behind the others: after up to 250 ms
//    for a slot that is being given back, at once while another such connection already waits;
//  - a request (request line, headers and body) must arrive within `request_timeout_seconds`
//    of its first byte: a client that trickles its body gets 408 and is disconnected, and only
//    its own worker thread waited (httplib's timeout is per read, so one byte every few seconds
//    kept a thread forever);
//  - the request line and headers together are at most `max_header_bytes` (431); httplib only
//    limits single lines (8192 bytes, 400) and would read any number of them;
//  - a body is capped while it is read: chunked and length-less bodies are no longer read whole
//    before --max-request-body is checked (httplib checks only a declared Content-Length).
// It does so by serving each connection itself (GuardedHttpServer::process_and_close_socket, a
// virtual of httplib::Server) over a socket stream that counts and times every read; httplib
// still parses requests and writes responses. The error handler asks fault() why a request
// failed, to answer 408/431/413 with a message that names the limit.
#pragma once
#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>

namespace tq {

struct HttpGuardLimits {
  int max_connections = 512;
  int request_timeout_seconds = 30;
  size_t max_header_bytes = 32 << 10;
  size_t max_body_bytes = 8 << 20;
  int keep_alive_timeout_seconds = 5;  // idle wait for the next request on a connection
  int write_timeout_seconds = 30;      // one blocked write to a client that does not read
  // Worker threads: started as connections need them (up to max_connections + 4), kept while
  // busy, and ended after this long without work, all but min_worker_threads (worker_pool.h).
  int min_worker_threads = 8;
  int worker_idle_exit_ms = 5000;
};

// Why the request being served on this thread could not be read.
enum class ReadFault { none, timeout, headers_too_large, body_too_large };

class GuardedHttpServer : public httplib::Server {
 public:
  // on_refused: called (on a worker thread) for each connection turned away with 503.
  GuardedHttpServer(HttpGuardLimits limits, std::function<void()> on_refused = nullptr);

  const HttpGuardLimits& limits() const { return limits_; }
  int active_connections() const { return active_.load(); }
  int worker_threads() const { return worker_threads_->load(); }

  // Hooks for handlers, about the connection of the calling thread (no-ops elsewhere):
  // the pre-routing handler calls headers_received() once the headers are in (the body
  // limit for this request is set from its Content-Length / Transfer-Encoding);
  static void headers_received(const httplib::Request& req);
  // a response sent without reading the request's body closes the connection after it;
  static void close_after_response();
  // why reading the current request failed (none if it did not);
  static ReadFault fault();
  // whether the current request's headers were read (false: a malformed request line/header);
  static bool headers_complete();
  // the longest line of the current request's head, in bytes (httplib refuses > 8192).
  static size_t longest_header_line();

  static constexpr size_t kHttplibHeaderLineMax = 8192;  // CPPHTTPLIB_HEADER_MAX_LENGTH
  static constexpr size_t kHttplibUriMax = 8192;         // CPPHTTPLIB_REQUEST_URI_MAX_LENGTH

 private:
  bool process_and_close_socket(socket_t sock) override;
  // Takes a connection slot, waiting up to kSlotGraceMs for one: a client that reads its response
  // and connects again at once can arrive before the thread that served it has given its slot back.
  // Only one connection waits; others beyond the limit are refused at once, so a flood does not
  // hold the spare worker threads.
  bool claim_slot();
  void release_slot();
  void refuse(socket_t sock);

  static constexpr int kSlotGraceMs = 250;

  HttpGuardLimits limits_;
  std::function<void()> on_refused_;
  std::atomic<int> active_{0};  // changed under slot_mutex_; read without it for metrics
  std::mutex slot_mutex_;
  std::condition_variable slot_freed_;
  bool slot_waiter_ = false;  // a connection waits in claim_slot (under slot_mutex_)
  std::shared_ptr<std::atomic<int>> worker_threads_ = std::make_shared<std::atomic<int>>(0);
};

}  // namespace tq
