// compat.h's TensorPipe part (registerTensorPipeTransport) is for this file only.
#define GILFREE_TENSORPIPE_TRANSPORT 1
#include "rpc/auth_transport.h"

#include "compat.h"
#include "rpc/message_auth.h"
#include "rpc/tensorpipe_abi.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <limits>
#include <list>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <thread>

namespace gilfree_rpc {

namespace {

using tensorpipe::Error;
namespace tpt = tensorpipe::transport;

constexpr char kMagic[8] = {'G', 'F', 'R', 'P', 'C', 'A', 'U', '2'};
constexpr size_t kNonceSize = 32;
constexpr size_t kHelloSize = sizeof(kMagic) + kNonceSize;
constexpr int kHandshakeMs = 10000;  // a peer that has not proven the key by then is dropped
constexpr int kMaxHandshakes = 64;  // concurrent handshakes per listener; more are refused
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

// TensorPipe's Error prints "(this error originated at <file>:<line>)"; the file names this
// transport as one of TensorPipe's, which is what compat.h's isPeerUnreachable looks for.
constexpr const char* kErrorOrigin = "tensorpipe transport gilfree_auth (plugin/csrc/rpc/auth_transport.cpp)";

class AuthTransportError final : public tensorpipe::BaseError {
 public:
  explicit AuthTransportError(std::string what) : what_(std::move(what)) {}
  std::string what() const override {
    return what_;
  }

 private:
  std::string what_;
};

Error transportError(std::string what) {
  return Error(std::make_shared<AuthTransportError>(std::move(what)), kErrorOrigin, __LINE__);
}

// --- configuration (set from Python before the agent starts) ------------------------

std::mutex configMutex;
std::string configuredKey;  // empty: none
std::string configuredHost = "127.0.0.1";

// One log line per peer address that failed to authenticate, per process.
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

std::string addressOf(const SocketAddress& address) {
  char host[NI_MAXHOST] = {0};
  char port[NI_MAXSERV] = {0};
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&address.storage), address.size, host, sizeof(host), port,
                    sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  return address.family() == AF_INET6 ? "[" + std::string(host) + "]:" + port : std::string(host) + ":" + port;
}

// Parses "host:port", "[host]:port" or a host alone (port 0), where host is a numeric IPv4
// or IPv6 address (an IPv6 one may name its scope: "fe80::1%eth0").
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

bool sendAll(int fd, const void* data, size_t length) {
  const char* p = static_cast<const char*>(data);
  while (length > 0) {
    ssize_t n = ::send(fd, p, length, MSG_NOSIGNAL);
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

using Deadline = std::chrono::steady_clock::time_point;

// Waits until `fd` has bytes (or EOF) to read; false when `deadline` passes first. No
// deadline: true at once (the read that follows blocks).
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

// Blocking receipt of exactly `length` bytes; false on EOF, error or (when deadline is set) time-out.
bool recvAll(int fd, void* data, size_t length, Deadline* deadline = nullptr) {
  char* p = static_cast<char*>(data);
  while (length > 0) {
    if (!waitReadable(fd, deadline)) {
      return false;
    }
    ssize_t n = ::recv(fd, p, length, 0);
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

// Threads of this transport still running (Context::join waits for them).
std::atomic<int> liveThreads{0};

template <typename F>
void startThread(F&& body) {
  ++liveThreads;
  std::thread([body = std::forward<F>(body)]() mutable {
    body();
    --liveThreads;
  }).detach();
}

// --- one connection ------------------------------------------------------------------

struct ReadOp {
  void* ptr;  // null: the transport allocates
  size_t length;
  tpt::Connection::read_callback_fn fn;
};

struct WriteOp {
  const void* ptr = nullptr;
  size_t length = 0;
  std::unique_ptr<uint8_t[]> owned;  // the serialized nop object (ptr points at it): encrypted in place
  tpt::Connection::write_callback_fn fn;
  // How far the frame has got, kept when the writer thread takes over what write() began.
  bool started = false;  // numbered, header sealed, payload's encryption begun
  std::array<uint8_t, kSealedHeaderSize> header{};
  AeadTag tag{};  // the payload's, once all of it is encrypted
  size_t sealed = 0;  // payload bytes encrypted
  size_t chunkBegin = 0;  // payload offset of the ciphertext in the link's send buffer (not owned)
  size_t sent = 0;  // bytes of the frame (header, payload, tag) on the socket
};

class Link : public std::enable_shared_from_this<Link> {
 public:
  Link(std::string key, bool client) : key_(std::move(key)), client_(client) {}

  ~Link() {
    if (fd_ >= 0) {
      ::close(fd_);
    }
  }

  // Client: connects and authenticates on the reader thread, then reads.
  void startClient(SocketAddress address) {
    peer_ = addressOf(address);
    auto self = shared_from_this();
    startThread([self, address]() {
      self->runClient(address);
    });
  }

  // Server: authenticates the accepted socket; `ready` is called once, with true when the
  // peer proved the key (the reader then goes on reading), false otherwise.
  void startServer(int fd, std::string peer, std::function<void(bool)> ready) {
    {
      std::lock_guard<std::mutex> guard(mutex_);
      fd_ = fd;
    }
    peer_ = std::move(peer);
    auto self = shared_from_this();
    startThread([self, ready = std::move(ready)]() {
      bool ok = self->handshake() && self->receiveFirstFrame();
      ready(ok);
      if (ok) {
        self->readLoop();
      }
    });
  }

  void read(void* ptr, size_t length, tpt::Connection::read_callback_fn fn) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (closed_) {
      Error error = error_;
      lock.unlock();
      fn(error, nullptr, 0);
      return;
    }
    reads_.push_back(ReadOp{ptr, length, std::move(fn)});
    readCv_.notify_one();  // the reader alone waits for reads
  }

  // Sends the frame on the caller's thread when the link is idle (authenticated, nothing queued,
  // the writer not sending), as far as the socket takes it without blocking; the writer
  // thread sends what is left, and the frames queued meanwhile. Frames leave in the order of
  // the calls: only the holder of `writing_` encrypts and sends, and it numbers the frame.
  void write(WriteOp op) {
    if (op.length > kAeadMaxMessage) {
      op.fn(transportError("gilfree_auth cannot send a message of " + std::to_string(op.length) +
                           " bytes (AES-GCM's limit is " + std::to_string(kAeadMaxMessage) + ")"));
      return;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    if (closed_) {
      Error error = error_;
      lock.unlock();
      op.fn(error);
      return;
    }
    if (authenticated_ && !writing_ && writes_.empty()) {
      writing_ = true;
      lock.unlock();
      Sent result = pump(op, /*mayBlock=*/false);
      lock.lock();
      writing_ = false;
      if (result == Sent::kAll) {
        if (!writes_.empty()) {
          writeCv_.notify_one();
        }
        lock.unlock();
        op.fn(Error());
        return;
      }
      if (result == Sent::kBlocked) {
        writes_.push_front(std::move(op));  // the rest of this frame before anything queued since
        writeCv_.notify_one();
        return;
      }
      lock.unlock();
      Error error = transportError(sendFailure_);
      op.fn(error);
      fail(error);
      return;
    }
    writes_.push_back(std::move(op));
    writeCv_.notify_one();  // the writer alone waits for writes
  }

  // Ends the connection: pending and later operations fail with `error`.
  void fail(const Error& error) {
    std::deque<ReadOp> reads;
    std::deque<WriteOp> writes;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      if (closed_) {
        return;
      }
      closed_ = true;
      error_ = error;
      if (fd_ >= 0) {
        ::shutdown(fd_, SHUT_RDWR);  // wakes the reader and writer; the fd is closed with the Link
      }
      reads.swap(reads_);
      writes.swap(writes_);
      readCv_.notify_all();
      writeCv_.notify_all();
    }
    for (auto& op : reads) {
      op.fn(error, nullptr, 0);
    }
    for (auto& op : writes) {
      op.fn(error);
    }
  }

  void close() {
    fail(transportError("connection closed (gilfree_auth)"));
  }

  const std::string& peer() const {
    return peer_;
  }

  // After the handshake: starts the writer thread, and write() may send by itself.
  void startWriter() {
    auto self = shared_from_this();
    startThread([self]() {
      self->writeLoop();
    });
    std::lock_guard<std::mutex> guard(mutex_);
    authenticated_ = true;
  }

 private:
  void runClient(SocketAddress address) {
    int fd = ::socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      fail(transportError(std::string("socket: ") + std::strerror(errno)));
      return;
    }
    {
      std::lock_guard<std::mutex> guard(mutex_);
      if (closed_) {
        ::close(fd);
        return;
      }
      fd_ = fd;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (::connect(fd, address.get(), address.size) != 0) {
      fail(transportError("connect to " + peer_ + " failed: " + std::strerror(errno)));
      return;
    }
    if (!handshake()) {
      return;
    }
    startWriter();
    readLoop();
  }

  // The challenge-response (see auth_transport.h). Returns whether the peer proved the key;
  // then the keys of both directions are set.
  bool handshake() {
    Deadline deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kHandshakeMs);
    uint8_t hello[kHelloSize];
    std::memcpy(hello, kMagic, sizeof(kMagic));
    randomBytes(hello + sizeof(kMagic), kNonceSize);
    uint8_t theirs[kHelloSize];
    auto reject = [&](const std::string& why) {
      if (!client_) {
        logRejected(peer_, why);
      }
      fail(transportError("authentication with " + peer_ + " failed: " + why));
      return false;
    };
    // The client speaks first; the server answers only a client that starts with the
    // magic (so what the server sends never reaches a stranger's parser).
    if (client_ && !sendAll(fd_, hello, kHelloSize)) {
      return reject("cannot send the handshake");
    }
    if (!recvAll(fd_, theirs, kHelloSize, &deadline)) {
      return reject("no handshake within " + std::to_string(kHandshakeMs / 1000) + " s");
    }
    if (std::memcmp(theirs, kMagic, sizeof(kMagic)) != 0) {
      return reject("not a gilfree-rpc authenticated connection (or another version of it)");
    }
    if (!client_ && !sendAll(fd_, hello, kHelloSize)) {
      return reject("cannot send the handshake");
    }
    std::string mine(reinterpret_cast<char*>(hello + sizeof(kMagic)), kNonceSize);
    std::string other(reinterpret_cast<char*>(theirs + sizeof(kMagic)), kNonceSize);
    // HKDF's salt: both nonces, the client's first; a secret of its own for each use.
    const std::string salt = client_ ? mine + other : other + mine;
    Tag proof = hkdf(key_, salt, client_ ? "gilfree-rpc v2 client proof" : "gilfree-rpc v2 server proof");
    Tag expected = hkdf(key_, salt, client_ ? "gilfree-rpc v2 server proof" : "gilfree-rpc v2 client proof");
    Tag received{};
    if (!sendAll(fd_, proof.data(), kTagSize) || !recvAll(fd_, received.data(), kTagSize, &deadline)) {
      return reject("no proof of the key within " + std::to_string(kHandshakeMs / 1000) + " s");
    }
    if (!sameTag(received.data(), expected.data())) {
      return reject("it does not hold this job's key");
    }
    Tag clientToServer = hkdf(key_, salt, "gilfree-rpc v2 client to server");
    Tag serverToClient = hkdf(key_, salt, "gilfree-rpc v2 server to client");
    static_assert(kTagSize >= kAeadKeySize, "an HKDF block holds an AES-256 key");
    sender_ = std::make_unique<Aead>((client_ ? clientToServer : serverToClient).data(), /*seal=*/true);
    receiver_ = std::make_unique<Aead>((client_ ? serverToClient : clientToServer).data(), /*seal=*/false);
    return true;
  }

  enum class Sent { kAll, kBlocked, kFailed };

  // Numbers the frame of `op` (the next of this direction), seals its header and begins its
  // payload (all of it, in place, when the payload is a buffer of ours). Holder of `writing_` only.
  void startFrame(WriteOp& op) {
    if (sendSequence_ == std::numeric_limits<uint64_t>::max()) {
      throw std::runtime_error("2^64 frames sent on one connection");  // never reused: a nonce would repeat
    }
    uint8_t length[8];
    putLe64(length, op.length);
    sender_->begin(kHeaderKind, sendSequence_);
    sender_->update(length, op.header.data(), sizeof(length));
    AeadTag headerTag = sender_->seal();
    std::memcpy(op.header.data() + sizeof(length), headerTag.data(), kAeadTagSize);
    sender_->begin(kPayloadKind, sendSequence_);
    ++sendSequence_;
    op.started = true;
    if (op.owned) {
      sender_->update(op.owned.get(), op.owned.get(), op.length);
      op.sealed = op.length;
    }
    if (op.sealed == op.length) {
      op.tag = sender_->seal();
    }
  }

  // Encrypts the next part of TensorPipe's buffer into the send buffer (the previous part is on the socket).
  void sealNextChunk(WriteOp& op) {
    if (!sendBuffer_) {
      sendBuffer_.reset(new uint8_t[kSealChunk]);
    }
    const size_t part = std::min(kSealChunk, op.length - op.sealed);
    sender_->update(static_cast<const uint8_t*>(op.ptr) + op.sealed, sendBuffer_.get(), part);
    op.chunkBegin = op.sealed;
    op.sealed += part;
    if (op.sealed == op.length) {
      op.tag = sender_->seal();
    }
  }

  // Encrypts and sends the rest of `op`'s frame: all of it (kAll), or as much as the socket
  // takes without blocking when `mayBlock` is false (kBlocked; `op` records how far it got).
  // kFailed: the socket failed (sendFailure_ says why). Holder of `writing_` only.
  Sent pump(WriteOp& op, bool mayBlock) {
    try {
      if (!op.started) {
        startFrame(op);
      }
      const size_t total = kSealedHeaderSize + op.length + kAeadTagSize;
      while (op.sent < total) {
        const size_t payloadSent = std::min(op.sent - std::min(op.sent, kSealedHeaderSize), op.length);
        if (payloadSent == op.sealed && op.sealed < op.length) {
          sealNextChunk(op);  // what was encrypted is on the socket: the next part
        }
        iovec parts[3];
        size_t count = 0;
        if (op.sent < kSealedHeaderSize) {
          parts[count++] = {op.header.data() + op.sent, kSealedHeaderSize - op.sent};
        }
        if (payloadSent < op.sealed) {
          uint8_t* cipher = op.owned ? op.owned.get() + payloadSent : sendBuffer_.get() + (payloadSent - op.chunkBegin);
          parts[count++] = {cipher, op.sealed - payloadSent};
        }
        if (op.sealed == op.length) {
          const size_t tagSent = op.sent - std::min(op.sent, kSealedHeaderSize + op.length);
          parts[count++] = {op.tag.data() + tagSent, kAeadTagSize - tagSent};
        }
        msghdr message{};
        message.msg_iov = parts;
        message.msg_iovlen = count;
        ssize_t n = ::sendmsg(fd_, &message, MSG_NOSIGNAL | (mayBlock ? 0 : MSG_DONTWAIT));
        if (n < 0 && errno == EINTR) {
          continue;
        }
        if (n < 0 && !mayBlock && (errno == EAGAIN || errno == EWOULDBLOCK)) {
          return Sent::kBlocked;
        }
        if (n <= 0) {
          sendFailure_ = "write to " + peer_ + " failed: " + std::strerror(n < 0 ? errno : EPIPE);
          return Sent::kFailed;
        }
        op.sent += static_cast<size_t>(n);
      }
      return Sent::kAll;
    } catch (const std::exception& e) {
      sendFailure_ = "cannot encrypt a frame to " + peer_ + ": " + e.what();
      return Sent::kFailed;
    }
  }

  void writeLoop() {
    while (true) {
      WriteOp op;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        writeCv_.wait(lock, [&] { return closed_ || (!writes_.empty() && !writing_); });
        if (closed_) {
          return;
        }
        op = std::move(writes_.front());
        writes_.pop_front();
        writing_ = true;
      }
      const Sent result = pump(op, /*mayBlock=*/true);
      {
        std::lock_guard<std::mutex> guard(mutex_);
        writing_ = false;
      }
      if (result != Sent::kAll) {
        Error error = transportError(sendFailure_);
        op.fn(error);
        fail(error);
        return;
      }
      op.fn(Error());
    }
  }

  // Receives `length` bytes of ciphertext into `target` and the tag after them into `tag`,
  // decrypting in place what each receipt brought, while it is in the cache. False on EOF,
  // error or (when `deadline` is set) time-out.
  bool receivePayload(uint8_t* target, size_t length, uint8_t* tag, Deadline* deadline) {
    size_t got = 0;
    size_t tagGot = 0;
    while (got < length || tagGot < kAeadTagSize) {
      if (!waitReadable(fd_, deadline)) {
        return false;
      }
      iovec parts[2];
      size_t count = 0;
      if (got < length) {
        parts[count++] = {target + got, length - got};
      }
      parts[count++] = {tag + tagGot, kAeadTagSize - tagGot};
      msghdr message{};
      message.msg_iov = parts;
      message.msg_iovlen = count;
      ssize_t n = ::recvmsg(fd_, &message, 0);
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n <= 0) {
        return false;
      }
      const size_t toPayload = std::min(static_cast<size_t>(n), length - got);
      if (toPayload > 0) {
        receiver_->update(target + got, target + got, toPayload);
      }
      got += toPayload;
      tagGot += static_cast<size_t>(n) - toPayload;
    }
    return true;
  }

  // One frame received: its payload, decrypted and authentic, at `data` (TensorPipe's
  // buffer, or `owned`); or why not (`error`, whose connection then must close).
  struct Frame {
    void* data = nullptr;
    uint64_t length = 0;
    std::unique_ptr<uint8_t[]> owned;
    Error error;
  };

  // Receives frame `sequence` into `into`, which holds `expected` bytes, or, when `into`
  // is null, into a buffer of its own (at most `limit` bytes). A frame whose tags fail is
  // logged once per address.
  Frame receiveFrame(uint64_t sequence, void* into, size_t expected, uint64_t limit, Deadline* deadline) {
    Frame frame;
    auto rejected = [&](const std::string& what) {
      logRejected(peer_, what + " failed its authentication tag");
      frame.error = transportError(what + " from " + peer_ + " failed its authentication tag (altered, replayed, "
                                   "reordered or from another connection): connection closed");
      return std::move(frame);
    };
    uint8_t header[kSealedHeaderSize];
    if (!recvAll(fd_, header, kSealedHeaderSize, deadline)) {
      frame.error = transportError("connection to " + peer_ + " closed (EOF)");
      return frame;
    }
    uint8_t plain[8];
    receiver_->begin(kHeaderKind, sequence);
    receiver_->update(header, plain, sizeof(plain));
    if (!receiver_->open(header + sizeof(plain))) {
      return rejected("a frame header");
    }
    frame.length = readLe64(plain);  // authentic: sent by a holder of the key
    if (into != nullptr ? frame.length != expected : frame.length > limit) {
      frame.error = transportError("a frame from " + peer_ + " has " + std::to_string(frame.length) + " bytes where " +
                                   (into != nullptr ? "" : "at most ") + std::to_string(into ? expected : limit) +
                                   " were expected");
      return frame;
    }
    frame.data = into;
    if (into == nullptr) {
      frame.owned.reset(new (std::nothrow) uint8_t[frame.length == 0 ? 1 : frame.length]);
      if (!frame.owned) {
        frame.error = transportError("cannot allocate " + std::to_string(frame.length) + " bytes for a frame from " +
                                     peer_);
        return frame;
      }
      frame.data = frame.owned.get();
    }
    receiver_->begin(kPayloadKind, sequence);
    AeadTag received{};
    if (!receivePayload(static_cast<uint8_t*>(frame.data), frame.length, received.data(), deadline)) {
      frame.error = transportError("connection to " + peer_ + " closed within a frame (EOF)");
      return frame;
    }
    if (!receiver_->open(received.data())) {
      return rejected("a frame");
    }
    return frame;
  }

  // Server: receives the peer's first frame (TensorPipe's hello, which says what the
  // connection is for) before the connection is handed to TensorPipe, within the
  // handshake's time. TensorPipe's listener fails as a whole, and accepts no more pipes,
  // when a connection it reads the hello from fails; a frame altered on the path fails here.
  bool receiveFirstFrame() {
    Deadline deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kHandshakeMs);
    try {
      Frame frame = receiveFrame(0, nullptr, 0, kMaxFirstFrame, &deadline);
      if (frame.error) {
        fail(frame.error);
        return false;
      }
      first_ = std::move(frame);
      return true;
    } catch (const std::exception& e) {
      fail(transportError("cannot decrypt a frame from " + peer_ + ": " + e.what()));
      return false;
    }
  }

  // Reads the frames for TensorPipe's reads, in order. A frame is handed to TensorPipe only
  // once its tag has checked; any failure closes the connection.
  void readLoop() {
    uint64_t sequence = first_ ? 1 : 0;
    while (true) {
      ReadOp op;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        readCv_.wait(lock, [&] { return closed_ || !reads_.empty(); });
        if (closed_) {
          return;
        }
        op = std::move(reads_.front());
        reads_.pop_front();
      }
      Frame frame;
      try {
        if (first_) {
          frame = std::move(*first_);
          first_.reset();
          if (op.ptr != nullptr) {  // into TensorPipe's buffer (its first read is a nop object's: never)
            if (frame.length == op.length) {
              std::memcpy(op.ptr, frame.data, frame.length);
              frame.data = op.ptr;
            } else {
              frame.error = transportError("a frame from " + peer_ + " has " + std::to_string(frame.length) +
                                           " bytes where " + std::to_string(op.length) + " were expected");
            }
          }
        } else {
          frame = receiveFrame(sequence++, op.ptr, op.length, kAeadMaxMessage, nullptr);
        }
      } catch (const std::exception& e) {
        frame.error = transportError("cannot decrypt a frame from " + peer_ + ": " + e.what());
      }
      if (frame.error) {
        op.fn(frame.error, nullptr, 0);
        fail(frame.error);
        return;
      }
      op.fn(Error(), frame.data, frame.length);
    }
  }

  const std::string key_;
  const bool client_;
  std::string peer_;
  int fd_ = -1;
  std::mutex mutex_;
  // One for each loop: a read queued for TensorPipe wakes the reader only, a write the writer.
  std::condition_variable readCv_;
  std::condition_variable writeCv_;
  bool closed_ = false;
  Error error_;
  std::deque<ReadOp> reads_;
  std::deque<WriteOp> writes_;
  bool authenticated_ = false;  // the handshake passed and the writer runs
  // A thread is encrypting and sending a frame: it alone uses sender_, sendSequence_,
  // sendBuffer_ and sendFailure_.
  bool writing_ = false;
  uint64_t sendSequence_ = 0;
  std::unique_ptr<Aead> sender_;  // this direction's key
  std::unique_ptr<Aead> receiver_;  // the other direction's key (the reader's)
  std::unique_ptr<uint8_t[]> sendBuffer_;  // kSealChunk bytes, once a payload needs it
  std::string sendFailure_;
  std::optional<Frame> first_;  // server: the first frame, received before TensorPipe reads

};

// What TensorPipe holds; closes the link when TensorPipe lets go of it.
class AuthConnection final : public tpt::Connection {
 public:
  explicit AuthConnection(std::shared_ptr<Link> link) : link_(std::move(link)) {}
  ~AuthConnection() override {
    link_->close();
  }

  void read(read_callback_fn fn) override {
    link_->read(nullptr, 0, std::move(fn));
  }

  void read(void* ptr, size_t length, read_callback_fn fn) override {
    link_->read(ptr, length, std::move(fn));
  }

  void write(const void* ptr, size_t length, write_callback_fn fn) override {
    link_->write(WriteOp{ptr, length, nullptr, std::move(fn)});
  }

  void read(tensorpipe::AbstractNopHolder& object, read_nop_callback_fn fn) override {
    tp_abi::NopHolderAbi* holder = &tp_abi::holder(object);
    link_->read(nullptr, 0, [holder, fn = std::move(fn)](const Error& error, const void* ptr, size_t length) {
      if (error) {
        fn(error);
        return;
      }
      tp_abi::NopReaderAbi reader{static_cast<const uint8_t*>(ptr), length, nullptr, 0};
      tp_abi::NopStatusAbi status = holder->read(reader);
      fn(status.error == 0 ? Error() : transportError("cannot decode a TensorPipe object from an authenticated frame"));
    });
  }

  void write(const tensorpipe::AbstractNopHolder& object, write_callback_fn fn) override {
    const tp_abi::NopHolderAbi& holder = tp_abi::holder(object);
    size_t length = holder.getSize();
    std::unique_ptr<uint8_t[]> buffer(new uint8_t[length == 0 ? 1 : length]);
    tp_abi::NopWriterAbi writer{buffer.get(), length, nullptr, 0};
    tp_abi::NopStatusAbi status = holder.write(writer);
    if (status.error != 0) {
      fn(transportError("cannot encode a TensorPipe object"));
      return;
    }
    const void* ptr = buffer.get();
    link_->write(WriteOp{ptr, length, std::move(buffer), std::move(fn)});
  }

  void setId(std::string /* id */) override {}

  void close() override {
    link_->close();
  }

 private:
  std::shared_ptr<Link> link_;
};

// --- the listener ----------------------------------------------------------------------

class Acceptor : public std::enable_shared_from_this<Acceptor> {
 public:
  Acceptor(std::string key, int fd, std::string addr) : key_(std::move(key)), fd_(fd), addr_(std::move(addr)) {}
  ~Acceptor() {
    ::close(fd_);
  }

  void start() {
    auto self = shared_from_this();
    startThread([self]() {
      self->acceptLoop();
    });
  }

  void accept(tpt::Listener::accept_callback_fn fn) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (closed_) {
      lock.unlock();
      fn(transportError("listener closed (gilfree_auth)"), nullptr);
      return;
    }
    waiting_.push_back(std::move(fn));
    dispatch(lock);
  }

  void close() {
    std::deque<tpt::Listener::accept_callback_fn> waiting;
    std::list<std::shared_ptr<Link>> pending;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      if (closed_) {
        return;
      }
      closed_ = true;
      ::shutdown(fd_, SHUT_RDWR);  // wakes accept()
      waiting.swap(waiting_);
      pending.swap(handshaking_);
      ready_.clear();
    }
    for (auto& link : pending) {
      link->close();
    }
    for (auto& fn : waiting) {
      fn(transportError("listener closed (gilfree_auth)"), nullptr);
    }
  }

  const std::string& addr() const {
    return addr_;
  }

 private:
  // Hands authenticated connections to waiting accept callbacks (called with the lock held;
  // releases it).
  void dispatch(std::unique_lock<std::mutex>& lock) {
    std::vector<std::pair<tpt::Listener::accept_callback_fn, std::shared_ptr<tpt::Connection>>> calls;
    while (!waiting_.empty() && !ready_.empty()) {
      calls.emplace_back(std::move(waiting_.front()), std::move(ready_.front()));
      waiting_.pop_front();
      ready_.pop_front();
    }
    lock.unlock();
    for (auto& call : calls) {
      call.first(Error(), std::move(call.second));
    }
  }

  void acceptLoop() {
    while (true) {
      SocketAddress address;
      address.size = sizeof(address.storage);
      int fd = ::accept4(fd_, address.get(), &address.size, SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE) {
          if (errno == EMFILE || errno == ENFILE) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          }
          std::lock_guard<std::mutex> guard(mutex_);
          if (!closed_) {
            continue;
          }
        }
        return;  // closed
      }
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      std::string peer = addressOf(address);
      auto link = std::make_shared<Link>(key_, /*client=*/false);
      {
        std::lock_guard<std::mutex> guard(mutex_);
        if (closed_) {
          ::close(fd);
          return;
        }
        if (static_cast<int>(handshaking_.size()) >= kMaxHandshakes) {
          ::close(fd);
          logRejected(peer, "too many connections waiting to authenticate");
          continue;
        }
        handshaking_.push_back(link);
      }
      std::weak_ptr<Acceptor> weak = weak_from_this();
      link->startServer(fd, peer, [weak, link](bool ok) {
        auto self = weak.lock();
        if (!self) {
          link->close();
          return;
        }
        std::unique_lock<std::mutex> lock(self->mutex_);
        self->handshaking_.remove(link);
        if (!ok) {
          return;
        }
        if (self->closed_) {
          lock.unlock();
          link->close();
          return;
        }
        link->startWriter();
        self->ready_.push_back(std::make_shared<AuthConnection>(link));
        self->dispatch(lock);
      });
    }
  }

  const std::string key_;
  const int fd_;
  const std::string addr_;
  std::mutex mutex_;
  bool closed_ = false;
  std::deque<tpt::Listener::accept_callback_fn> waiting_;
  std::deque<std::shared_ptr<tpt::Connection>> ready_;
  std::list<std::shared_ptr<Link>> handshaking_;
};

class AuthListener final : public tpt::Listener {
 public:
  explicit AuthListener(std::shared_ptr<Acceptor> acceptor) : acceptor_(std::move(acceptor)) {}
  ~AuthListener() override {
    acceptor_->close();
  }
  void accept(accept_callback_fn fn) override {
    acceptor_->accept(std::move(fn));
  }
  std::string addr() const override {
    return acceptor_->addr();
  }
  void setId(std::string /* id */) override {}
  void close() override {
    acceptor_->close();
  }

 private:
  std::shared_ptr<Acceptor> acceptor_;
};

// --- the context -----------------------------------------------------------------------

class AuthContext final : public tpt::Context {
 public:
  explicit AuthContext(std::string key) : key_(std::move(key)) {}

  std::shared_ptr<tpt::Connection> connect(std::string addr) override {
    auto link = std::make_shared<Link>(key_, /*client=*/true);
    track(link);
    SocketAddress address;
    if (!parseAddress(addr, address)) {
      link->fail(transportError("gilfree_auth: cannot parse the address '" + addr +
                                "' (IPv4 host:port or [IPv6 host]:port)"));
    } else {
      link->startClient(address);  // starts the writer once the handshake succeeds
    }
    return std::make_shared<AuthConnection>(link);
  }

  std::shared_ptr<tpt::Listener> listen(std::string addr) override {
    SocketAddress address;
    TORCH_CHECK(parseAddress(addr, address), "gilfree_auth: cannot parse the listening address '", addr,
                "' (an IPv4 or IPv6 address, with or without a port)");
    int fd = ::socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
    TORCH_CHECK(fd >= 0, "gilfree_auth: socket: ", std::strerror(errno));
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (address.family() == AF_INET6) {
      ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));  // that address only
    }
    if (::bind(fd, address.get(), address.size) != 0 || ::listen(fd, 128) != 0) {
      int error = errno;
      ::close(fd);
      TORCH_CHECK(false, "gilfree_auth: cannot listen on ", addr, ": ", std::strerror(error));
    }
    address.size = sizeof(address.storage);
    ::getsockname(fd, address.get(), &address.size);
    auto acceptor = std::make_shared<Acceptor>(key_, fd, addressOf(address));
    acceptor->start();
    {
      std::lock_guard<std::mutex> guard(mutex_);
      acceptors_.push_back(acceptor);
    }
    return std::make_shared<AuthListener>(acceptor);
  }

  bool isViable() const override {
    return !key_.empty() && cryptoLoaded();
  }

  const std::string& domainDescriptor() const override {
    static const std::string descriptor = "gilfree_auth:v2";
    return descriptor;
  }

  void setId(std::string /* id */) override {}

  void close() override {
    std::vector<std::weak_ptr<Acceptor>> acceptors;
    std::vector<std::weak_ptr<Link>> links;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      acceptors.swap(acceptors_);
      links.swap(links_);
    }
    for (auto& weak : acceptors) {
      if (auto acceptor = weak.lock()) {
        acceptor->close();
      }
    }
    for (auto& weak : links) {
      if (auto link = weak.lock()) {
        link->close();
      }
    }
  }

  void join() override {
    close();
    // Threads end once their sockets are shut down; wait a bounded time for them.
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (liveThreads.load() > 0 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

 private:
  void track(const std::shared_ptr<Link>& link) {
    std::lock_guard<std::mutex> guard(mutex_);
    links_.push_back(link);
  }

  const std::string key_;
  std::mutex mutex_;
  std::vector<std::weak_ptr<Acceptor>> acceptors_;
  std::vector<std::weak_ptr<Link>> links_;
};

std::unique_ptr<torch::distributed::rpc::TransportRegistration> createAuthTransport() {
  std::string key;
  std::string host;
  {
    std::lock_guard<std::mutex> guard(configMutex);
    key = configuredKey;
    host = configuredHost;
  }
  return std::make_unique<torch::distributed::rpc::TransportRegistration>(
      torch::distributed::rpc::TransportRegistration{std::make_shared<AuthContext>(key), /*priority=*/0, host});
}

void configureAuthTransportKernel(const std::string& key, const std::string& cryptoLibrary, const std::string& listenHost) {
  configureAuthTransport(key, cryptoLibrary, listenHost);
}

}  // namespace

void configureAuthTransport(const std::string& key, const std::string& cryptoLibrary, const std::string& listenHost) {
  if (!key.empty()) {
    loadCrypto(cryptoLibrary);
  }
  {
    std::lock_guard<std::mutex> guard(configMutex);
    configuredKey = key;
    configuredHost = listenHost.empty() ? "127.0.0.1" : listenHost;
  }
  static std::once_flag registered;
  std::call_once(registered, [] { registerTensorPipeTransport(kAuthTransportName, &createAuthTransport); });
}

}  // namespace gilfree_rpc

TORCH_LIBRARY_IMPL(gilfree_rpc, CompositeImplicitAutograd, m) {
  m.impl("_configure_auth_transport", TORCH_FN(gilfree_rpc::configureAuthTransportKernel));
}
