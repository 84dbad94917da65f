#include "server/http_transport.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

namespace agentkv::server {

namespace {

using Clock = std::chrono::steady_clock;

// poll() for one event; -1 error, 0 timeout, 1 ready. EINTR restarts with the time left.
int wait_for(int fd, short events, int timeout_ms) {
  const auto end = Clock::now() + std::chrono::milliseconds(std::max(0, timeout_ms));
  while (true) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, timeout_ms);
    if (r >= 0) return r > 0 ? 1 : 0;
    if (errno != EINTR) return -1;
    timeout_ms = static_cast<int>(std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count()));
  }
}

void ip_and_port(const sockaddr_storage& addr, socklen_t len, std::string& ip, int& port) {
  if (addr.ss_family == AF_INET) port = ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  else if (addr.ss_family == AF_INET6) port = ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  else return;
  std::array<char, NI_MAXHOST> text{};
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, text.data(), static_cast<socklen_t>(text.size()),
                  nullptr, 0, NI_NUMERICHOST) == 0)
    ip = text.data();
}

// A socket stream like httplib's SocketStream (buffered reads, timeouts), plus a deadline that
// bounds the time to read one whole request, whatever the pace of its bytes.
class DeadlineStream : public httplib::Stream {
 public:
  DeadlineStream(int sock, int idle_timeout_s, int write_timeout_s)
      : sock_(sock), idle_ms_(idle_timeout_s * 1000), write_ms_(write_timeout_s * 1000) {}

  void arm(double seconds) {
    armed_ = true;
    timed_out_ = false;
    deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  }
  void disarm() { armed_ = false; }
  bool timed_out() const { return timed_out_; }
  bool buffered() const { return off_ < len_; }

  bool is_readable() const override { return buffered() || wait_for(sock_, POLLIN, read_timeout_ms()) > 0; }
  bool is_writable() const override {
    if (wait_for(sock_, POLLOUT, write_ms_) <= 0) return false;
    // httplib's is_socket_alive: a readable socket that reads 0 bytes was closed by the peer.
    if (wait_for(sock_, POLLIN, 0) > 0) {
      char byte;
      if (::recv(sock_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0) return false;
    }
    return true;
  }

  ssize_t read(char* ptr, size_t size) override {
    if (buffered()) return take(ptr, size);
    const int timeout = read_timeout_ms();
    if (timeout <= 0 && armed_) {
      timed_out_ = true;
      return -1;
    }
    const int r = wait_for(sock_, POLLIN, timeout);
    if (r <= 0) {
      if (r == 0 && armed_ && Clock::now() >= deadline_) timed_out_ = true;
      return -1;
    }
    ssize_t n;
    do n = ::recv(sock_, buf_.data(), buf_.size(), 0);
    while (n < 0 && errno == EINTR);
    if (n <= 0) return n;
    off_ = 0;
    len_ = static_cast<size_t>(n);
    return take(ptr, size);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t n;
    do n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (getpeername(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) ip_and_port(addr, len, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (getsockname(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) ip_and_port(addr, len, ip, port);
  }
  socket_t socket() const override { return sock_; }

 private:
  int read_timeout_ms() const {
    if (!armed_) return idle_ms_;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
    return static_cast<int>(std::clamp<int64_t>(left, 0, idle_ms_));
  }
  ssize_t take(char* ptr, size_t size) {
    const size_t n = std::min(size, len_ - off_);
    std::memcpy(ptr, buf_.data() + off_, n);
    off_ += n;
    return static_cast<ssize_t>(n);
  }

  int sock_;
  int idle_ms_, write_ms_;
  std::array<char, 4096> buf_{};
  size_t off_ = 0, len_ = 0;
  bool armed_ = false, timed_out_ = false;
  Clock::time_point deadline_{};
};

// What the handlers of the current request tell the connection loop.
struct Connection {
  DeadlineStream* stream = nullptr;
  bool close_after = false;  // the body (or part of it) is still unread
};
thread_local Connection* t_connection = nullptr;

// One thread per accepted connection; shutdown() waits for all of them.
class ThreadPerConnection : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++running_;
    }
    try {
      std::thread([this, fn = std::move(fn)] {
        fn();
        std::lock_guard<std::mutex> lock(mutex_);
        if (--running_ == 0) done_.notify_all();
      }).detach();
    } catch (const std::system_error&) {  // no thread to be had: serve it here (it is refused quickly)
      {
        std::lock_guard<std::mutex> lock(mutex_);
        --running_;
      }
      fn();
    }
  }
  void shutdown() override {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return running_ == 0; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  int running_ = 0;
};

// After an answer sent without reading the whole request: stop sending, then read and drop what
// the client still sends (bounded in time and bytes) so that closing does not reset the
// connection before the client has read the answer.
void lingering_close(int sock) {
  ::shutdown(sock, SHUT_WR);
  const auto end = Clock::now() + std::chrono::seconds(2);
  size_t drained = 0;
  char buf[16384];
  while (drained < (64u << 20)) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    if (left <= 0 || wait_for(sock, POLLIN, static_cast<int>(left)) <= 0) break;
    const ssize_t n = ::recv(sock, buf, sizeof buf, 0);
    if (n <= 0) break;
    drained += static_cast<size_t>(n);
  }
}

void refuse_connection(int sock) {
  const std::string body = R"({"error":{"code":503,"message":"too many open connections","type":"unavailable_error"}})";
  const std::string answer =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json; charset=utf-8\r\nConnection: close\r\n"
      "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  const ssize_t sent = ::send(sock, answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)sent;
  lingering_close(sock);
}

}  // namespace

GuardedServer::GuardedServer(TransportLimits limits) : limits_(limits) {
  new_task_queue = [] { return new ThreadPerConnection(); };
  set_read_timeout(limits_.idle_timeout_s);
  set_keep_alive_timeout(limits_.idle_timeout_s);
}

void GuardedServer::request_read() {
  if (t_connection && t_connection->stream) t_connection->stream->disarm();
}

void GuardedServer::close_after_response(httplib::Response& res) {
  if (t_connection) t_connection->close_after = true;
  res.set_header("Connection", "close");
}

bool GuardedServer::request_timed_out() {
  return t_connection && t_connection->stream && t_connection->stream->timed_out();
}

int GuardedServer::current_socket() {
  return t_connection && t_connection->stream ? t_connection->stream->socket() : -1;
}

bool GuardedServer::process_and_close_socket(socket_t sock) {
  struct Count {
    std::atomic<int>& n;
    explicit Count(std::atomic<int>& c) : n(c) { ++n; }
    ~Count() { --n; }
  } count(open_);
  if (open_.load() > limits_.max_connections) {
    refuse_connection(sock);
    ::close(sock);
    return false;
  }

  DeadlineStream strm(sock, limits_.idle_timeout_s, static_cast<int>(write_timeout_sec_));
  Connection conn;
  conn.stream = &strm;
  t_connection = &conn;
  bool ret = false;
  size_t remaining = keep_alive_max_count_;
  while (svr_sock_ != INVALID_SOCKET && remaining > 0) {
    // Wait for the next request (idle keep-alive), looking at the listener now and then so that
    // a stopping server does not wait for idle clients.
    bool ready = strm.buffered();
    for (int waited = 0; !ready && waited < limits_.idle_timeout_s * 1000 && svr_sock_ != INVALID_SOCKET;
         waited += 100) {
      const int r = wait_for(sock, POLLIN, 100);
      if (r < 0) break;
      ready = r > 0;
    }
    if (!ready || svr_sock_ == INVALID_SOCKET) break;
    strm.arm(limits_.request_timeout_s);
    bool connection_closed = false;
    ret = process_request(strm, remaining == 1, connection_closed, nullptr);
    if (!ret || connection_closed || conn.close_after || strm.timed_out()) break;
    --remaining;
  }
  t_connection = nullptr;
  if (conn.close_after || strm.timed_out()) lingering_close(sock);
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ret;
}

}  // namespace agentkv::server
