// The connection layer under the routes: cpp-httplib's request parsing with agentkv's own
// connection handling (docs/security.md):
//   - one thread per connection, up to max_connections at once (httplib's fixed pool let a handful
//     of slow clients take every thread); a connection beyond the limit gets 503 and is closed;
//   - a deadline for the whole request head and body (request_timeout_s), on top of the idle
//     timeout between two reads: trickling one byte at a time no longer keeps a request alive;
//   - a connection whose request was refused before its body was read is closed after the answer,
//     after a bounded drain of what the client is still sending (so it reads the answer, not a reset).
#pragma once
#include <atomic>
#include <cstddef>

#include "server/httplib_include.h"

namespace agentkv::server {

struct TransportLimits {
  double request_timeout_s = 30.0;  // request line, headers and body
  int idle_timeout_s = 5;           // silence allowed within a request and between keep-alive requests
  int max_connections = 256;
};

class GuardedServer : public httplib::Server {
 public:
  explicit GuardedServer(TransportLimits limits);
  const TransportLimits& limits() const { return limits_; }
  int open_connections() const { return open_.load(); }

  // For handlers, on the connection's own thread:
  // the request is read (its deadline no longer applies: the answer may take long);
  static void request_read();
  // the connection is closed after this answer (the body was not read, or cannot be);
  static void close_after_response(httplib::Response& res);
  // the request ran past its deadline while being read;
  static bool request_timed_out();
  // the connection's socket (-1 outside a connection thread).
  static int current_socket();

 private:
  bool process_and_close_socket(socket_t sock) override;

  TransportLimits limits_;
  std::atomic<int> open_{0};
};

}  // namespace agentkv::server
