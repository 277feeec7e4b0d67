#include "auth/auth_transport_framing.h"

#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>

namespace gilfree_rpc {
namespace auth {

namespace {

// The origin of the transport's errors (see transportError).
constexpr const char* kErrorOrigin = "tensorpipe transport gilfree_auth (plugin/csrc/auth/auth_transport_framing.cpp)";

class AuthTransportError final : public tensorpipe::BaseError {
 public:
  explicit AuthTransportError(std::string what) : what_(std::move(what)) {}
  std::string what() const override {
    return what_;
  }

 private:
  std::string what_;
};

}  // namespace

tensorpipe::Error transportError(std::string what) {
  return tensorpipe::Error(std::make_shared<AuthTransportError>(std::move(what)), kErrorOrigin, __LINE__);
}

void logRejected(const std::string& peer, const std::string& why) {
  static std::mutex mutex;
  static std::set<std::string> logged;
  std::string host = peer.substr(0, peer.rfind(':'));
  std::lock_guard<std::mutex> guard(mutex);
  if (logged.insert(host).second) {
    std::fprintf(
        stderr,
        "[gilfree-rpc] dropped a connection from %s: %s (further failures from this address are not logged)\n",
        peer.c_str(),
        why.c_str());
    std::fflush(stderr);
  }
}

std::string addressOf(const SocketAddress& address) {
  char host[NI_MAXHOST] = {0};
  char port[NI_MAXSERV] = {0};
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&address.storage), address.size, host, sizeof(host), port,
                    sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  return address.family() == AF_INET6 ? "[" + std::string(host) + "]:" + port : std::string(host) + ":" + port;
}

bool parseAddress(const std::string& addr, SocketAddress& out) {
  std::string host = addr;
  std::string port = "0";
  if (!addr.empty() && addr[0] == '[') {
    auto close = addr.find(']');
    if (close == std::string::npos) {
      return false;
    }
    host = addr.substr(1, close - 1);
    std::string rest = addr.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') {
        return false;
      }
      port = rest.substr(1);
    }
  } else if (std::count(addr.begin(), addr.end(), ':') == 1) {  // IPv4 with a port
    auto colon = addr.find(':');
    host = addr.substr(0, colon);
    port = addr.substr(colon + 1);
  }  // else an IPv4 address, or an IPv6 one without brackets, alone
  if (port.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) || std::stoi(port) > 65535) {
    return false;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) {
    return false;
  }
  std::memcpy(&out.storage, found->ai_addr, found->ai_addrlen);
  out.size = found->ai_addrlen;
  ::freeaddrinfo(found);
  return true;
}

void putLe64(uint8_t* p, uint64_t value) {
  for (int i = 0; i < 8; ++i) {
    p[i] = static_cast<uint8_t>((value >> (8 * i)) & 0xff);
  }
}

uint64_t readLe64(const uint8_t* p) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) {
    value = (value << 8) | p[i];
  }
  return value;
}

// Moves `length` bytes from or to `p` by calls of `transfer(p, left)` (send or recv: the
// bytes moved, 0 or less when it fails), again after EINTR; false when a call fails.
template <class Byte, class Transfer>
bool transferAll(Byte* p, size_t length, Transfer transfer) {
  while (length > 0) {
    ssize_t n = transfer(p, length);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return false;
    }
    p += n;
    length -= static_cast<size_t>(n);
  }
  return true;
}

bool sendAll(int fd, const void* data, size_t length) {
  return transferAll(static_cast<const char*>(data), length,
                     [fd](const char* p, size_t left) { return ::send(fd, p, left, MSG_NOSIGNAL); });
}

bool waitReadable(int fd, Deadline* deadline) {
  while (deadline != nullptr) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return false;
    }
    pollfd pfd{fd, POLLIN, 0};
    int ready = ::poll(&pfd, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) {
      continue;
    }
    return ready > 0;
  }
  return true;
}

bool recvAll(int fd, void* data, size_t length, Deadline* deadline) {
  return transferAll(static_cast<char*>(data), length, [fd, deadline](char* p, size_t left) -> ssize_t {
    return waitReadable(fd, deadline) ? ::recv(fd, p, left, 0) : 0;  // 0: the deadline passed
  });
}

std::atomic<int> liveThreads{0};

}  // namespace auth
}  // namespace gilfree_rpc
