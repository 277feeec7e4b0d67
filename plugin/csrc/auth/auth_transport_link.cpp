#include "auth/auth_transport_link.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>

namespace gilfree_rpc {
namespace auth {

namespace {

using tensorpipe::Error;

constexpr char kMagic[8] = {'G', 'F', 'R', 'P', 'C', 'A', 'U', '2'};
constexpr size_t kNonceSize = 32;
constexpr size_t kHelloSize = sizeof(kMagic) + kNonceSize;
constexpr int kHandshakeMs = 10000;  // a peer that has not proven the key by then is dropped

}  // namespace

// --- the handshake ---------------------------------------------------------------------------

std::optional<LinkCiphers> handshake(int fd, const std::string& key, bool client, std::string& why) {
  Deadline deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kHandshakeMs);
  uint8_t hello[kHelloSize];
  std::memcpy(hello, kMagic, sizeof(kMagic));
  randomBytes(hello + sizeof(kMagic), kNonceSize);
  uint8_t theirs[kHelloSize];
  auto reject = [&](const std::string& what) -> std::optional<LinkCiphers> {
    why = what;
    return std::nullopt;
  };
  // The client speaks first; the server answers only a client that starts with the
  // magic (so what the server sends never reaches a stranger's parser).
  if (client && !sendAll(fd, hello, kHelloSize)) {
    return reject("cannot send the handshake");
  }
  if (!recvAll(fd, theirs, kHelloSize, &deadline)) {
    return reject("no handshake within " + std::to_string(kHandshakeMs / 1000) + " s");
  }
  if (std::memcmp(theirs, kMagic, sizeof(kMagic)) != 0) {
    return reject("not a gilfree-rpc authenticated connection (or another version of it)");
  }
  if (!client && !sendAll(fd, hello, kHelloSize)) {
    return reject("cannot send the handshake");
  }
  std::string mine(reinterpret_cast<char*>(hello + sizeof(kMagic)), kNonceSize);
  std::string other(reinterpret_cast<char*>(theirs + sizeof(kMagic)), kNonceSize);
  // HKDF's salt: both nonces, the client's first; a secret of its own for each use.
  const std::string salt = client ? mine + other : other + mine;
  Tag proof = hkdf(key, salt, client ? "gilfree-rpc v2 client proof" : "gilfree-rpc v2 server proof");
  Tag expected = hkdf(key, salt, client ? "gilfree-rpc v2 server proof" : "gilfree-rpc v2 client proof");
  Tag received{};
  if (!sendAll(fd, proof.data(), kTagSize) || !recvAll(fd, received.data(), kTagSize, &deadline)) {
    return reject("no proof of the key within " + std::to_string(kHandshakeMs / 1000) + " s");
  }
  if (!sameTag(received.data(), expected.data())) {
    return reject("it does not hold this job's key");
  }
  Tag clientToServer = hkdf(key, salt, "gilfree-rpc v2 client to server");
  Tag serverToClient = hkdf(key, salt, "gilfree-rpc v2 server to client");
  static_assert(kTagSize >= kAeadKeySize, "an HKDF block holds an AES-256 key");
  LinkCiphers ciphers;
  ciphers.sender = std::make_unique<Aead>((client ? clientToServer : serverToClient).data(), /*seal=*/true);
  ciphers.receiver = std::make_unique<Aead>((client ? serverToClient : clientToServer).data(), /*seal=*/false);
  return ciphers;
}

// --- sealing and sending ---------------------------------------------------------------------

void FrameSealer::startFrame(WriteOp& op) {
  if (sequence_ == std::numeric_limits<uint64_t>::max()) {
    throw std::runtime_error("2^64 frames sent on one connection");  // never reused: a nonce would repeat
  }
  uint8_t length[8];
  putLe64(length, op.length);
  cipher_->begin(kHeaderKind, sequence_);
  cipher_->update(length, op.header.data(), sizeof(length));
  AeadTag headerTag = cipher_->seal();
  std::memcpy(op.header.data() + sizeof(length), headerTag.data(), kAeadTagSize);
  cipher_->begin(kPayloadKind, sequence_);
  ++sequence_;
  op.started = true;
  if (op.owned) {
    cipher_->update(op.owned.get(), op.owned.get(), op.length);
    op.sealed = op.length;
  }
  if (op.sealed == op.length) {
    op.tag = cipher_->seal();
  }
}

void FrameSealer::sealNextChunk(WriteOp& op) {
  if (!buffer_) {
    buffer_.reset(new uint8_t[kSealChunk]);
  }
  const size_t part = std::min(kSealChunk, op.length - op.sealed);
  cipher_->update(static_cast<const uint8_t*>(op.ptr) + op.sealed, buffer_.get(), part);
  op.chunkBegin = op.sealed;
  op.sealed += part;
  if (op.sealed == op.length) {
    op.tag = cipher_->seal();
  }
}

FrameSealer::Sent FrameSealer::pump(int fd, WriteOp& op, bool mayBlock, const std::string& peer) {
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
        uint8_t* cipher = op.owned ? op.owned.get() + payloadSent : buffer_.get() + (payloadSent - op.chunkBegin);
        parts[count++] = {cipher, op.sealed - payloadSent};
      }
      if (op.sealed == op.length) {
        const size_t tagSent = op.sent - std::min(op.sent, kSealedHeaderSize + op.length);
        parts[count++] = {op.tag.data() + tagSent, kAeadTagSize - tagSent};
      }
      msghdr message{};
      message.msg_iov = parts;
      message.msg_iovlen = count;
      ssize_t n = ::sendmsg(fd, &message, MSG_NOSIGNAL | (mayBlock ? 0 : MSG_DONTWAIT));
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n < 0 && !mayBlock && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return Sent::kBlocked;
      }
      if (n <= 0) {
        failure_ = "write to " + peer + " failed: " + std::strerror(n < 0 ? errno : EPIPE);
        return Sent::kFailed;
      }
      op.sent += static_cast<size_t>(n);
    }
    return Sent::kAll;
  } catch (const std::exception& e) {
    failure_ = "cannot encrypt a frame to " + peer + ": " + e.what();
    return Sent::kFailed;
  }
}

// --- receiving and opening ---------------------------------------------------------------------

bool FrameOpener::receivePayload(int fd, uint8_t* target, size_t length, uint8_t* tag, Deadline* deadline) {
  size_t got = 0;
  size_t tagGot = 0;
  while (got < length || tagGot < kAeadTagSize) {
    if (!waitReadable(fd, deadline)) {
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
    ssize_t n = ::recvmsg(fd, &message, 0);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return false;
    }
    const size_t toPayload = std::min(static_cast<size_t>(n), length - got);
    if (toPayload > 0) {
      cipher_->update(target + got, target + got, toPayload);
    }
    got += toPayload;
    tagGot += static_cast<size_t>(n) - toPayload;
  }
  return true;
}

Frame FrameOpener::receive(
    int fd, const std::string& peer, void* into, size_t expected, uint64_t limit, Deadline* deadline) {
  const uint64_t sequence = sequence_++;
  Frame frame;
  auto rejected = [&](const std::string& what) {
    logRejected(peer, what + " failed its authentication tag");
    frame.error = transportError(what + " from " + peer + " failed its authentication tag (altered, replayed, "
                                 "reordered or from another connection): connection closed");
    return std::move(frame);
  };
  uint8_t header[kSealedHeaderSize];
  if (!recvAll(fd, header, kSealedHeaderSize, deadline)) {
    frame.error = transportError("connection to " + peer + " closed (EOF)");
    return frame;
  }
  uint8_t plain[8];
  cipher_->begin(kHeaderKind, sequence);
  cipher_->update(header, plain, sizeof(plain));
  if (!cipher_->open(header + sizeof(plain))) {
    return rejected("a frame header");
  }
  frame.length = readLe64(plain);  // authentic: sent by a holder of the key
  if (into != nullptr ? frame.length != expected : frame.length > limit) {
    frame.error = transportError("a frame from " + peer + " has " + std::to_string(frame.length) + " bytes where " +
                                 (into != nullptr ? "" : "at most ") + std::to_string(into ? expected : limit) +
                                 " were expected");
    return frame;
  }
  frame.data = into;
  if (into == nullptr) {
    frame.owned.reset(new (std::nothrow) uint8_t[frame.length == 0 ? 1 : frame.length]);
    if (!frame.owned) {
      frame.error = transportError("cannot allocate " + std::to_string(frame.length) + " bytes for a frame from " +
                                   peer);
      return frame;
    }
    frame.data = frame.owned.get();
  }
  cipher_->begin(kPayloadKind, sequence);
  AeadTag received{};
  if (!receivePayload(fd, static_cast<uint8_t*>(frame.data), frame.length, received.data(), deadline)) {
    frame.error = transportError("connection to " + peer + " closed within a frame (EOF)");
    return frame;
  }
  if (!cipher_->open(received.data())) {
    return rejected("a frame");
  }
  return frame;
}

// --- the link ------------------------------------------------------------------------------

Link::~Link() {
  if (fd_ >= 0) {
    ::close(fd_);
  }
}

void Link::startClient(SocketAddress address) {
  peer_ = addressOf(address);
  auto self = shared_from_this();
  startThread([self, address]() {
    self->runClient(address);
  });
}

void Link::startServer(int fd, std::string peer, FirstFrameCheck check, std::function<void(bool)> ready) {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    fd_ = fd;
  }
  peer_ = std::move(peer);
  auto self = shared_from_this();
  startThread([self, check = std::move(check), ready = std::move(ready)]() {
    bool ok = self->authenticate() && self->receiveFirstFrame(check);
    ready(ok);
    if (ok) {
      self->readLoop();
    }
  });
}

void Link::read(void* ptr, size_t length, ReadCallback fn) {
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

void Link::write(WriteOp op) {
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
    FrameSealer::Sent result = sealer_->pump(fd_, op, /*mayBlock=*/false, peer_);
    lock.lock();
    writing_ = false;
    if (result == FrameSealer::Sent::kAll) {
      if (!writes_.empty()) {
        writeCv_.notify_one();
      }
      lock.unlock();
      op.fn(Error());
      return;
    }
    if (result == FrameSealer::Sent::kBlocked) {
      writes_.push_front(std::move(op));  // the rest of this frame before anything queued since
      writeCv_.notify_one();
      return;
    }
    lock.unlock();
    Error error = transportError(sealer_->failure());
    op.fn(error);
    fail(error);
    return;
  }
  writes_.push_back(std::move(op));
  writeCv_.notify_one();  // the writer alone waits for writes
}

void Link::fail(const Error& error) {
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

void Link::close() {
  fail(transportError("connection closed (gilfree_auth)"));
}

void Link::startWriter() {
  auto self = shared_from_this();
  startThread([self]() {
    self->writeLoop();
  });
  std::lock_guard<std::mutex> guard(mutex_);
  authenticated_ = true;
}

void Link::runClient(SocketAddress address) {
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
  if (!authenticate()) {
    return;
  }
  startWriter();
  readLoop();
}

bool Link::authenticate() {
  std::string why;
  std::optional<LinkCiphers> ciphers = handshake(fd_, key_, client_, why);
  if (!ciphers) {
    if (!client_) {
      logRejected(peer_, why);
    }
    fail(transportError("authentication with " + peer_ + " failed: " + why));
    return false;
  }
  sealer_ = std::make_unique<FrameSealer>(std::move(ciphers->sender));
  opener_ = std::make_unique<FrameOpener>(std::move(ciphers->receiver));
  return true;
}

void Link::writeLoop() {
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
    const FrameSealer::Sent result = sealer_->pump(fd_, op, /*mayBlock=*/true, peer_);
    {
      std::lock_guard<std::mutex> guard(mutex_);
      writing_ = false;
    }
    if (result != FrameSealer::Sent::kAll) {
      Error error = transportError(sealer_->failure());
      op.fn(error);
      fail(error);
      return;
    }
    op.fn(Error());
  }
}

bool Link::receiveFirstFrame(const FirstFrameCheck& check) {
  Deadline deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kHandshakeMs);
  try {
    Frame frame = opener_->receive(fd_, peer_, nullptr, 0, kMaxFirstFrame, &deadline);
    if (frame.error) {
      fail(frame.error);
      return false;
    }
    const std::string refused = check(static_cast<const uint8_t*>(frame.data), frame.length);
    if (!refused.empty()) {
      logRejected(peer_, refused);
      fail(transportError(refused + " (from " + peer_ + "): connection closed"));
      return false;
    }
    first_ = std::move(frame);
    return true;
  } catch (const std::exception& e) {
    fail(transportError("cannot decrypt a frame from " + peer_ + ": " + e.what()));
    return false;
  }
}

void Link::readLoop() {
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
        frame = opener_->receive(fd_, peer_, op.ptr, op.length, kAeadMaxMessage, nullptr);
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

}  // namespace auth
}  // namespace gilfree_rpc
