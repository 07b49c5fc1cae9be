#include "server/http_guard.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include "server/worker_pool.h"

namespace tq {
namespace {

using Clock = std::chrono::steady_clock;

int poll_fd(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  int r;
  do {
    r = ::poll(&p, 1, timeout_ms);
  } while (r < 0 && errno == EINTR);
  return r;
}

int ms_until(Clock::time_point t) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left, 1 << 30));
}

// Half-closes, then reads what the client still sends for a moment, so that the response
// already written reaches it instead of being destroyed by a reset (closing a socket with
// unread data sends RST).
void graceful_close(int fd, int linger_ms) {
  ::shutdown(fd, SHUT_WR);
  const auto end = Clock::now() + std::chrono::milliseconds(linger_ms);
  char scratch[16384];
  size_t drained = 0;
  while (drained < (size_t(4) << 20)) {
    const int left = ms_until(end);
    if (left == 0 || poll_fd(fd, POLLIN, left) <= 0) break;
    const ssize_t n = ::recv(fd, scratch, sizeof scratch, 0);
    if (n <= 0) break;
    drained += size_t(n);
  }
  ::close(fd);
}

bool send_all(int fd, const std::string& data, int timeout_ms) {
  size_t off = 0;
  while (off < data.size()) {
    if (poll_fd(fd, POLLOUT, timeout_ms) <= 0) return false;
    const ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += size_t(n);
  }
  return true;
}

bool contains_chunked(std::string v) {
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  return v.find("chunked") != std::string::npos;
}

// A connection's socket as httplib sees it: buffered reads that count the bytes of the
// request head and body against their limits and time out at the request's deadline.
class GuardedStream final : public httplib::Stream {
 public:
  enum class Phase { idle, head, body };

  GuardedStream(int fd, const HttpGuardLimits& limits) : fd_(fd), limits_(limits) {}

  // Waits (up to keep_alive_s, while the server runs) for the first byte of a request.
  bool wait_for_request(const std::atomic<socket_t>& server_socket, time_t keep_alive_s) {
    if (pos_ < len_) return true;
    const auto end = Clock::now() + std::chrono::seconds(keep_alive_s);
    while (server_socket != INVALID_SOCKET) {
      const int r = poll_fd(fd_, POLLIN, std::min(100, ms_until(end)));
      if (r != 0) return r > 0;  // readable, hung up (the read sees EOF) or an error
      if (Clock::now() >= end) return false;
    }
    return false;
  }

  void begin_request() {
    phase_ = Phase::head;
    deadline_ = Clock::now() + std::chrono::seconds(limits_.request_timeout_seconds);
    head_bytes_ = body_bytes_ = 0;
    line_ = longest_line_ = 0;
    body_cap_ = 0;
    fault_ = ReadFault::none;
    close_ = false;
  }

  void headers_received(const httplib::Request& req) {
    if (phase_ != Phase::head) return;
    phase_ = Phase::body;
    const size_t max_body = limits_.max_body_bytes;
    const size_t slack = max_body + (size_t(64) << 10);
    if (contains_chunked(req.get_header_value("Transfer-Encoding")) || !req.has_header("Content-Length")) {
      // The chunk framing is counted too; the exact body size is checked once it is read.
      body_cap_ = max_body + slack;
      return;
    }
    const std::string cl = req.get_header_value("Content-Length");
    const unsigned long long declared = std::strtoull(cl.c_str(), nullptr, 10);
    if (declared <= max_body) {
      body_cap_ = declared;
    } else if (declared <= 4 * uint64_t(max_body) + (uint64_t(16) << 20)) {
      body_cap_ = declared;  // httplib reads and drops it, then answers 413 the client can read
    } else {
      body_cap_ = 0;  // not worth reading: 413 at once, and the connection closes
      fault_ = ReadFault::body_too_large;
    }
  }

  void close_after_response() { close_ = true; }
  ReadFault fault() const { return fault_; }
  bool headers_complete() const { return phase_ == Phase::body; }
  size_t longest_line() const { return std::max(longest_line_, line_); }
  // After a fault, a malformed request or an unread body the connection cannot be reused.
  bool must_close() const { return close_ || fault_ != ReadFault::none || phase_ != Phase::body; }

  bool is_readable() const override { return pos_ < len_ || wait_readable(); }

  bool is_writable() const override {
    if (poll_fd(fd_, POLLOUT, limits_.write_timeout_seconds * 1000) <= 0) return false;
    // Alive unless the peer has closed (readable with nothing to read): httplib's test, which
    // lets a streaming response notice a client that left.
    if (poll_fd(fd_, POLLIN, 0) == 0) return true;
    char c;
    return ::recv(fd_, &c, 1, MSG_PEEK) > 0;
  }

  ssize_t read(char* ptr, size_t size) override {
    if (fault_ != ReadFault::none) return -1;
    size_t n = 0;
    if (pos_ < len_) {
      n = std::min(size, len_ - pos_);
      std::memcpy(ptr, buf_ + pos_, n);
      pos_ += n;
    } else {
      if (!wait_readable()) return -1;
      const bool small = size < sizeof buf_;
      ssize_t r;
      do {
        r = ::recv(fd_, small ? buf_ : ptr, small ? sizeof buf_ : size, 0);
      } while (r < 0 && errno == EINTR);
      if (r <= 0) return r;
      if (small) {
        len_ = size_t(r);
        n = std::min(size, len_);
        std::memcpy(ptr, buf_, n);
        pos_ = n;
      } else {
        n = size_t(r);
      }
    }
    return account(ptr, n) ? static_cast<ssize_t>(n) : -1;
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t r;
    do {
      r = ::send(fd_, ptr, size, MSG_NOSIGNAL);
    } while (r < 0 && errno == EINTR);
    return r;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { address(true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address(false, ip, port); }
  socket_t socket() const override { return fd_; }

 private:
  bool wait_readable() const {
    for (;;) {
      const int left = ms_until(deadline_);
      if (left == 0) {
        fault_ = ReadFault::timeout;
        return false;
      }
      const int r = poll_fd(fd_, POLLIN, left);
      if (r > 0) return true;
      if (r < 0) return false;
    }
  }

  bool account(const char* p, size_t n) {
    if (phase_ == Phase::head) {
      head_bytes_ += n;
      for (size_t i = 0; i < n; ++i) {
        if (p[i] == '\n') {
          longest_line_ = std::max(longest_line_, line_ + 1);
          line_ = 0;
        } else {
          ++line_;
        }
      }
      if (head_bytes_ > limits_.max_header_bytes) fault_ = ReadFault::headers_too_large;
    } else if (phase_ == Phase::body) {
      body_bytes_ += n;
      if (body_bytes_ > body_cap_) fault_ = ReadFault::body_too_large;
    }
    return fault_ == ReadFault::none;
  }

  void address(bool peer, std::string& ip, int& port) const {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    const int rc = peer ? ::getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &len)
                        : ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    if (rc != 0) return;
    char host[NI_MAXHOST];
    if (::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) == 0)
      ip = host;
    if (addr.ss_family == AF_INET) port = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    if (addr.ss_family == AF_INET6) port = ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  }

  int fd_;
  const HttpGuardLimits& limits_;
  char buf_[4096];
  size_t pos_ = 0, len_ = 0;
  Phase phase_ = Phase::idle;
  Clock::time_point deadline_{};
  size_t head_bytes_ = 0, line_ = 0, longest_line_ = 0;
  uint64_t body_bytes_ = 0, body_cap_ = 0;
  mutable ReadFault fault_ = ReadFault::none;
  bool close_ = false;
};

thread_local GuardedStream* t_stream = nullptr;

}  // namespace

GuardedHttpServer::GuardedHttpServer(HttpGuardLimits limits, std::function<void()> on_refused)
    : limits_(limits), on_refused_(std::move(on_refused)) {
  // The spare workers only turn away connections beyond the limit (quickly), so a flood of
  // them does not wait behind the connections being served.
  const size_t workers = static_cast<size_t>(limits_.max_connections) + 4;
  new_task_queue = [workers, min = static_cast<size_t>(limits_.min_worker_threads),
                    idle = std::chrono::milliseconds(limits_.worker_idle_exit_ms), live = worker_threads_] {
    return new WorkerPool(workers, min, idle, live);
  };
  set_payload_max_length(limits_.max_body_bytes);
  set_read_timeout(limits_.request_timeout_seconds, 0);
  set_write_timeout(limits_.write_timeout_seconds, 0);
  set_keep_alive_timeout(limits_.keep_alive_timeout_seconds);
}

void GuardedHttpServer::headers_received(const httplib::Request& req) {
  if (t_stream) t_stream->headers_received(req);
}
void GuardedHttpServer::close_after_response() {
  if (t_stream) t_stream->close_after_response();
}
ReadFault GuardedHttpServer::fault() { return t_stream ? t_stream->fault() : ReadFault::none; }
bool GuardedHttpServer::headers_complete() { return t_stream ? t_stream->headers_complete() : true; }
size_t GuardedHttpServer::longest_header_line() { return t_stream ? t_stream->longest_line() : 0; }

bool GuardedHttpServer::process_and_close_socket(socket_t sock) {
  if (!claim_slot()) {
    refuse(sock);  // holds no slot while its 503 is sent and the socket lingers
    return false;
  }
  bool ret = false;
  bool faulted = false;
  {
    // The slot is free once the last response is out (before the socket lingers or closes): a
    // client that reads it and connects again at once must not find its old connection counted.
    // Given back and the thread's stream cleared on every way out of this block.
    struct Serving {
      GuardedHttpServer& server;
      ~Serving() {
        t_stream = nullptr;
        server.release_slot();
      }
    } serving{*this};
    GuardedStream stream(sock, limits_);
    t_stream = &stream;
    size_t count = keep_alive_max_count_;
    // httplib's keep-alive loop (detail::process_server_socket), over the guarded stream.
    while (svr_sock_ != INVALID_SOCKET && count > 0 && stream.wait_for_request(svr_sock_, keep_alive_timeout_sec_)) {
      stream.begin_request();
      bool connection_closed = false;
      ret = process_request(stream, count == 1, connection_closed, nullptr);
      if (!ret || connection_closed || stream.must_close()) {
        faulted = stream.must_close() && ret;  // a response went out: let the client read it
        break;
      }
      --count;
    }
  }
  if (faulted) {
    graceful_close(sock, 200);
  } else {
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
  }
  return ret;
}

bool GuardedHttpServer::claim_slot() {
  std::unique_lock lock(slot_mutex_);
  const auto free_slot = [&] { return active_.load() < limits_.max_connections; };
  if (!free_slot()) {
    if (slot_waiter_) return false;
    slot_waiter_ = true;
    const bool freed = slot_freed_.wait_for(lock, std::chrono::milliseconds(kSlotGraceMs), free_slot);
    slot_waiter_ = false;
    if (!freed) return false;
  }
  active_.fetch_add(1);
  return true;
}

void GuardedHttpServer::release_slot() {
  {
    std::lock_guard lock(slot_mutex_);
    active_.fetch_sub(1);
  }
  slot_freed_.notify_one();
}

void GuardedHttpServer::refuse(socket_t sock) {
  if (on_refused_) on_refused_();
  const nlohmann::json error = {
      {"error",
       {{"message", fmt::format("too many connections: the server already serves {} (--max-connections); retry later",
                                limits_.max_connections)},
        {"type", "server_overloaded"},
        {"param", nullptr},
        {"code", 503}}}};
  const std::string body = error.dump();
  const std::string response = fmt::format(
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: {}\r\n"
      "Retry-After: 1\r\nConnection: close\r\n\r\n{}",
      body.size(), body);
  send_all(sock, response, 1000);
  graceful_close(sock, 100);
}

}  // namespace tq
