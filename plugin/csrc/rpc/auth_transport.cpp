// compat.h's TensorPipe part (registerTensorPipeTransport) is for this file only.
#define GILFREE_TENSORPIPE_TRANSPORT 1
#include "rpc/auth_transport.h"

#include "compat.h"
#include "rpc/message_auth.h"
#include "rpc/tensorpipe_abi.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <list>
#include <mutex>
#include <new>
#include <set>
#include <thread>

namespace dist_engine {

namespace {

using tensorpipe::Error;
namespace tpt = tensorpipe::transport;

constexpr char kMagic[8] = {'G', 'F', 'R', 'P', 'C', 'A', 'U', '1'};
constexpr size_t kNonceSize = 32;
constexpr size_t kHelloSize = sizeof(kMagic) + kNonceSize;
constexpr int kHandshakeMs = 10000;  // a peer that has not proven the key by then is dropped
constexpr int kMaxHandshakes = 64;  // concurrent handshakes per listener; more are refused
constexpr size_t kHeaderSize = 8 + kTagSize;

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

std::string addressOf(const sockaddr_in& address) {
  char text[INET_ADDRSTRLEN] = {0};
  inet_ntop(AF_INET, &address.sin_addr, text, sizeof(text));
  return std::string(text) + ":" + std::to_string(ntohs(address.sin_port));
}

bool parseAddress(const std::string& addr, sockaddr_in& out) {
  std::string host = addr;
  int port = 0;
  auto colon = addr.rfind(':');
  if (colon != std::string::npos) {
    host = addr.substr(0, colon);
    try {
      port = std::stoi(addr.substr(colon + 1));
    } catch (const std::exception&) {
      return false;
    }
  }
  std::memset(&out, 0, sizeof(out));
  out.sin_family = AF_INET;
  out.sin_port = htons(static_cast<uint16_t>(port));
  return inet_pton(AF_INET, host.c_str(), &out.sin_addr) == 1;
}

std::string le64(uint64_t value) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) {
    out[i] = static_cast<char>((value >> (8 * i)) & 0xff);
  }
  return out;
}

uint64_t readLe64(const uint8_t* p) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) {
    value = (value << 8) | p[i];
  }
  return value;
}

// Drops the first `n` bytes of the buffers `parts[0, count)`: the buffers wholly done are
// skipped (and empty ones), the one partly done starts after its done bytes.
void advance(iovec*& parts, size_t& count, size_t n) {
  while (count > 0 && n >= parts->iov_len) {
    n -= parts->iov_len;
    ++parts;
    --count;
  }
  if (count > 0) {
    parts->iov_base = static_cast<char*>(parts->iov_base) + n;
    parts->iov_len -= n;
  }
}

// Moves exactly the buffers' bytes, in order, through `io` (a blocking sendmsg or recvmsg of
// the message it is given), with as few calls as the socket allows; false on EOF or error.
template <class Io>
bool transferAll(iovec* parts, size_t count, Io io) {
  while (count > 0) {
    msghdr message{};
    message.msg_iov = parts;
    message.msg_iovlen = count;
    ssize_t n = io(&message);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return false;
    }
    advance(parts, count, static_cast<size_t>(n));
  }
  return true;
}

// Sends the buffers in order (one frame is header, payload and tag: one sendmsg on a socket
// with room).
bool sendAllv(int fd, iovec* parts, size_t count) {
  return transferAll(parts, count, [fd](msghdr* message) { return ::sendmsg(fd, message, MSG_NOSIGNAL); });
}

bool sendAll(int fd, const void* data, size_t length) {
  iovec part{const_cast<void*>(data), length};
  return sendAllv(fd, &part, 1);
}

// Receives exactly the buffers' bytes (a frame's payload and tag: one recvmsg when they have
// arrived).
bool recvAllv(int fd, iovec* parts, size_t count) {
  return transferAll(parts, count, [fd](msghdr* message) { return ::recvmsg(fd, message, 0); });
}

// Blocking receipt of exactly `length` bytes; false on EOF, error or (when deadline is set) time-out.
bool recvAll(int fd, void* data, size_t length, std::chrono::steady_clock::time_point* deadline = nullptr) {
  char* p = static_cast<char*>(data);
  while (length > 0) {
    if (deadline != nullptr) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        return false;
      }
      pollfd pfd{fd, POLLIN, 0};
      int ready = ::poll(&pfd, 1, static_cast<int>(left.count()));
      if (ready < 0 && errno == EINTR) {
        continue;
      }
      if (ready <= 0) {
        return false;
      }
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
  const void* ptr;
  size_t length;
  std::unique_ptr<uint8_t[]> owned;  // the serialized nop object
  tpt::Connection::write_callback_fn fn;
  // The rest of a frame that write() began to send itself (header and tag already made,
  // `sent` bytes of header, payload and tag already on the socket): the writer sends the rest.
  bool framed = false;
  size_t sent = 0;
  std::array<uint8_t, kHeaderSize> header{};
  Tag trailer{};
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
  void startClient(sockaddr_in address) {
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
      bool ok = self->handshake();
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
  // the writer not sending) and the socket takes it whole without blocking; otherwise, or for
  // what the socket did not take, the writer thread sends it. Frames leave in the order of
  // the calls: only the holder of `writing_` sends, and it numbers the frame it sends.
  void write(WriteOp op) {
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
      frame(op);
      iovec parts[3];
      const size_t total = framedParts(op, parts);
      msghdr message{};
      message.msg_iov = parts;
      message.msg_iovlen = 3;
      ssize_t n = ::sendmsg(fd_, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        Error error = transportError("write to " + peer_ + " failed: " + std::strerror(errno));
        lock.lock();
        writing_ = false;
        lock.unlock();
        op.fn(error);
        fail(error);
        return;
      }
      op.sent = n > 0 ? static_cast<size_t>(n) : 0;
      lock.lock();
      writing_ = false;
      if (op.sent == total) {
        if (!writes_.empty()) {
          writeCv_.notify_one();
        }
        lock.unlock();
        op.fn(Error());
        return;
      }
      writes_.push_front(std::move(op));  // the rest of this frame before anything queued since
      writeCv_.notify_one();
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

 private:
  void runClient(sockaddr_in address) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
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
    if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
      fail(transportError("connect to " + peer_ + " failed: " + std::strerror(errno)));
      return;
    }
    if (!handshake()) {
      return;
    }
    startWriter();
    readLoop();
  }

  // The challenge-response (see auth_transport.h). Returns whether the peer proved the key.
  bool handshake() {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kHandshakeMs);
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
      return reject("not a gilfree-rpc authenticated connection");
    }
    if (!client_ && !sendAll(fd_, hello, kHelloSize)) {
      return reject("cannot send the handshake");
    }
    std::string mine(reinterpret_cast<char*>(hello + sizeof(kMagic)), kNonceSize);
    std::string other(reinterpret_cast<char*>(theirs + sizeof(kMagic)), kNonceSize);
    const std::string& clientNonce = client_ ? mine : other;
    const std::string& serverNonce = client_ ? other : mine;
    Tag proof = hmacOf(key_, {client_ ? "client proof" : "server proof", clientNonce, serverNonce});
    Tag expected = hmacOf(key_, {client_ ? "server proof" : "client proof", clientNonce, serverNonce});
    Tag received{};
    if (!sendAll(fd_, proof.data(), kTagSize) || !recvAll(fd_, received.data(), kTagSize, &deadline)) {
      return reject("no proof of the key within " + std::to_string(kHandshakeMs / 1000) + " s");
    }
    if (!sameTag(received.data(), expected.data())) {
      return reject("it does not hold this job's key");
    }
    Tag clientToServer = hmacOf(key_, {"client to server", clientNonce, serverNonce});
    Tag serverToClient = hmacOf(key_, {"server to client", clientNonce, serverNonce});
    std::string c2s(reinterpret_cast<char*>(clientToServer.data()), kTagSize);
    std::string s2c(reinterpret_cast<char*>(serverToClient.data()), kTagSize);
    sendMac_ = std::make_unique<Hmac>(client_ ? c2s : s2c);
    recvMac_ = std::make_unique<Hmac>(client_ ? s2c : c2s);
    return true;
  }

 public:
  // After the handshake and once the writer thread runs: write() may send by itself.
  void markAuthenticated() {
    std::lock_guard<std::mutex> guard(mutex_);
    authenticated_ = true;
  }

 public:
  void startWriter() {
    auto self = shared_from_this();
    startThread([self]() {
      self->writeLoop();
    });
    markAuthenticated();
  }

 private:
  Tag headerTag(Hmac& mac, uint64_t sequence, uint64_t length) {
    std::string header = "H" + le64(sequence) + le64(length);
    mac.begin();
    mac.update(header.data(), header.size());
    return mac.finish();
  }

  Tag payloadTag(Hmac& mac, uint64_t sequence, uint64_t length, const void* payload) {
    std::string header = "P" + le64(sequence) + le64(length);
    mac.begin();
    mac.update(header.data(), header.size());
    mac.update(payload, length);
    return mac.finish();
  }

  // Makes `op` a frame: its header (length and the header's tag) and its payload's tag, under
  // the next sequence number. Called by the holder of `writing_` only.
  void frame(WriteOp& op) {
    std::string length = le64(op.length);
    std::memcpy(op.header.data(), length.data(), 8);
    Tag tag = headerTag(*sendMac_, sendSequence_, op.length);
    std::memcpy(op.header.data() + 8, tag.data(), kTagSize);
    op.trailer = payloadTag(*sendMac_, sendSequence_, op.length, op.ptr);
    ++sendSequence_;
    op.framed = true;
  }

  // The frame's unsent bytes as iovecs in `parts` (3 entries); returns all its bytes' count.
  static size_t framedParts(WriteOp& op, iovec* parts) {
    parts[0] = {op.header.data(), kHeaderSize};
    parts[1] = {const_cast<void*>(op.ptr), op.length};
    parts[2] = {op.trailer.data(), kTagSize};
    return kHeaderSize + op.length + kTagSize;
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
      if (!op.framed) {
        frame(op);
      }
      iovec all[3];
      framedParts(op, all);
      iovec* parts = all;
      size_t count = 3;
      advance(parts, count, op.sent);  // what write() already sent of this frame
      const bool ok = sendAllv(fd_, parts, count);
      {
        std::lock_guard<std::mutex> guard(mutex_);
        writing_ = false;
      }
      if (!ok) {
        Error error = transportError("write to " + peer_ + " failed: " + std::strerror(errno));
        op.fn(error);
        fail(error);
        return;
      }
      op.fn(Error());
    }
  }

  void readLoop() {
    uint64_t sequence = 0;
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
      auto fail_op = [&](Error error) {
        op.fn(error, nullptr, 0);
        fail(error);
      };
      uint8_t header[kHeaderSize];
      if (!recvAll(fd_, header, kHeaderSize)) {
        fail_op(transportError("connection to " + peer_ + " closed (EOF)"));
        return;
      }
      uint64_t length = readLe64(header);
      Tag expected = headerTag(*recvMac_, sequence, length);
      if (!sameTag(header + 8, expected.data())) {
        logRejected(peer_, "a frame header failed its MAC");
        fail_op(transportError("a frame from " + peer_ + " failed its MAC (header): connection closed"));
        return;
      }
      if (op.ptr != nullptr && length != op.length) {
        fail_op(transportError("a frame from " + peer_ + " has " + std::to_string(length) +
                               " bytes where " + std::to_string(op.length) + " were expected"));
        return;
      }
      std::unique_ptr<uint8_t[]> owned;
      void* target = op.ptr;
      if (target == nullptr) {
        owned.reset(new (std::nothrow) uint8_t[length == 0 ? 1 : length]);
        if (!owned) {
          fail_op(transportError("cannot allocate " + std::to_string(length) + " bytes for a frame from " + peer_));
          return;
        }
        target = owned.get();
      }
      Tag received{};
      iovec rest[2] = {{target, length}, {received.data(), kTagSize}};  // the payload and its tag: one call
      if (!recvAllv(fd_, rest, 2)) {
        fail_op(transportError("connection to " + peer_ + " closed within a frame (EOF)"));
        return;
      }
      Tag check = payloadTag(*recvMac_, sequence, length, target);
      if (!sameTag(received.data(), check.data())) {
        logRejected(peer_, "a frame failed its MAC");
        fail_op(transportError("a frame from " + peer_ + " failed its MAC: connection closed"));
        return;
      }
      ++sequence;
      op.fn(Error(), target, length);
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
  bool writing_ = false;        // a thread is sending a frame (it alone uses sendMac_ and sendSequence_)
  uint64_t sendSequence_ = 0;
  std::unique_ptr<Hmac> sendMac_;
  std::unique_ptr<Hmac> recvMac_;
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
      sockaddr_in address{};
      socklen_t size = sizeof(address);
      int fd = ::accept4(fd_, reinterpret_cast<sockaddr*>(&address), &size, SOCK_CLOEXEC);
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
    sockaddr_in address{};
    if (!parseAddress(addr, address)) {
      link->fail(transportError("gilfree_auth: cannot parse the address '" + addr + "' (IPv4 host:port)"));
    } else {
      link->startClient(address);  // starts the writer once the handshake succeeds
    }
    return std::make_shared<AuthConnection>(link);
  }

  std::shared_ptr<tpt::Listener> listen(std::string addr) override {
    sockaddr_in address{};
    TORCH_CHECK(parseAddress(addr, address), "gilfree_auth: cannot parse the listening address '", addr, "'");
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    TORCH_CHECK(fd >= 0, "gilfree_auth: socket: ", std::strerror(errno));
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 || ::listen(fd, 128) != 0) {
      int error = errno;
      ::close(fd);
      TORCH_CHECK(false, "gilfree_auth: cannot listen on ", addr, ": ", std::strerror(error));
    }
    socklen_t size = sizeof(address);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size);
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
    static const std::string descriptor = "gilfree_auth:v1";
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

}  // namespace dist_engine

TORCH_LIBRARY_IMPL(dist_engine, CompositeImplicitAutograd, m) {
  m.impl("_configure_auth_transport", TORCH_FN(dist_engine::configureAuthTransportKernel));
}
