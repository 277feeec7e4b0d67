// The gilfree_auth transport's framing: the byte level under the authenticated link
// (auth_transport_link.h). The layout of a frame on the wire,
//
//   sealed length (8 bytes) | its tag (16) | sealed payload (length bytes) | its tag (16)
//
// and the limits and numbers that go with it; socket addresses in the forms TensorPipe's uv
// transport writes; blocking socket I/O bounded by a deadline; and what every part of the
// transport shares: its errors (TensorPipe Errors whose origin names this transport), its
// one log line per peer address, and the count of its threads. Nothing here knows the key
// or TensorPipe's objects. (See auth_transport.h for the protocol as a whole.)
#pragma once

#include "auth/message_auth.h"

#include <tensorpipe/common/error.h>

#include <netdb.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>

namespace gilfree_rpc {
namespace auth {

// --- the frame ---------------------------------------------------------------------------

// A frame: sealed header (the payload's length, encrypted, and its tag), then the payload
// encrypted and its tag. The two AES-GCM messages of frame n use the nonces (kind, n).
constexpr size_t kSealedHeaderSize = 8 + kAeadTagSize;
constexpr uint32_t kHeaderKind = 0;
constexpr uint32_t kPayloadKind = 1;
// A payload that TensorPipe does not hand over in a buffer of ours is encrypted into a
// buffer of the connection this many bytes at a time, each part sent before the next is
// encrypted (it stays in the cache).
constexpr size_t kSealChunk = size_t{256} << 10;
// The most bytes of a connection's first frame (TensorPipe's hello: a few dozen bytes).
constexpr uint64_t kMaxFirstFrame = 64 << 10;

// The frame header's length field: 8 bytes, little endian.
void putLe64(uint8_t* p, uint64_t value);
uint64_t readLe64(const uint8_t* p);

// --- errors and the log ------------------------------------------------------------------

// A TensorPipe Error of this transport. TensorPipe's Error prints "(this error originated at
// <file>:<line>)"; the file names this transport as one of TensorPipe's, which is what
// compat.h's isPeerUnreachable looks for.
tensorpipe::Error transportError(std::string what);

// One log line (stderr) per peer address (its host part) that failed to authenticate or
// sent what the transport refuses, per process: "[gilfree-rpc] dropped a connection from
// <peer>: <why> (...)".
void logRejected(const std::string& peer, const std::string& why);

// --- addresses: IPv4 "a.b.c.d:port", IPv6 "[a:b::c]:port" (TensorPipe's uv transport's forms) ---

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t size = 0;
  int family() const {
    return storage.ss_family;
  }
  sockaddr* get() {
    return reinterpret_cast<sockaddr*>(&storage);
  }
};

// "a.b.c.d:port" or "[a:b::c]:port"; "?" when the address cannot be printed.
std::string addressOf(const SocketAddress& address);

// Parses "host:port", "[host]:port" or a host alone (port 0), where host is a numeric IPv4
// or IPv6 address (an IPv6 one may name its scope: "fe80::1%eth0").
bool parseAddress(const std::string& addr, SocketAddress& out);

// --- blocking socket I/O -------------------------------------------------------------------

using Deadline = std::chrono::steady_clock::time_point;

// Sends all `length` bytes (blocking); false when the socket fails.
bool sendAll(int fd, const void* data, size_t length);

// Waits until `fd` has bytes (or EOF) to read; false when `deadline` passes first. No
// deadline: true at once (the read that follows blocks).
bool waitReadable(int fd, Deadline* deadline);

// Blocking receipt of exactly `length` bytes; false on EOF, error or (when deadline is set) time-out.
bool recvAll(int fd, void* data, size_t length, Deadline* deadline = nullptr);

// --- threads -------------------------------------------------------------------------------

// Threads of this transport still running (the context's join waits for them).
extern std::atomic<int> liveThreads;

// Runs `body` on a detached thread counted in liveThreads.
template <typename F>
void startThread(F&& body) {
  ++liveThreads;
  std::thread([body = std::forward<F>(body)]() mutable {
    body();
    --liveThreads;
  }).detach();
}

}  // namespace auth
}  // namespace gilfree_rpc
