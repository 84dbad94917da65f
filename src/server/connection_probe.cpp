#include "server/connection_probe.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>

namespace agentkv::server {

namespace {

// Numeric address and port of a socket address (IPv4 or IPv6).
bool address_of(const sockaddr_storage& sa, std::string& addr, int& port) {
  char text[INET6_ADDRSTRLEN] = {};
  if (sa.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&sa);
    if (!inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text))) return false;
    port = ntohs(in->sin_port);
  } else if (sa.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&sa);
    if (!inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text))) return false;
    port = ntohs(in6->sin6_port);
  } else {
    return false;
  }
  addr = text;
  return true;
}

}  // namespace

ConnectionProbe::ConnectionProbe(int local_port, const std::string& remote_addr, int remote_port) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return;
  while (const dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (*end != '\0' || end == entry->d_name) continue;
    struct stat st {};
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage local{}, peer{};
    socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &local_len) != 0) continue;
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) continue;
    std::string local_addr, peer_addr;
    int lport = -1, pport = -1;
    if (!address_of(local, local_addr, lport) || !address_of(peer, peer_addr, pport)) continue;
    if (lport == local_port && pport == remote_port && peer_addr == remote_addr) {
      fd_ = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
}

bool ConnectionProbe::alive() const {
  if (fd_ < 0) return true;
  char byte;
  const ssize_t n = recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return true;
  if (n == 0) return false;  // orderly shutdown by the client
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

}  // namespace agentkv::server
