// Tells whether the client of an HTTP request is still connected, so that a request whose client
// went away stops using a slot. httplib 0.11 gives handlers neither the socket nor a
// "connection closed" check, so the probe finds the request's socket among the process's file
// descriptors by its addresses (local port, peer address and port) and peeks at it: end of
// stream or a reset means the client is gone. Linux only (/proc/self/fd); where the socket
// cannot be found the probe says "alive" and the request simply runs to its end.
#pragma once
#include <string>

namespace agentkv::server {

class ConnectionProbe {
 public:
  ConnectionProbe() = default;
  ConnectionProbe(int local_port, const std::string& remote_addr, int remote_port);

  bool found() const { return fd_ >= 0; }
  // False once the peer closed or reset the connection. Data the client may have pipelined
  // is only peeked at, never consumed.
  bool alive() const;

 private:
  int fd_ = -1;
};

}  // namespace agentkv::server
