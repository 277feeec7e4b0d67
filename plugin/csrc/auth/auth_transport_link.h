// The gilfree_auth transport's authenticated link: one TCP connection between two holders of
// the key. First the handshake (a challenge-response, bounded in time, that proves the key
// to both ends and gives each direction its AES-256 key), then TensorPipe's reads and writes
// as sealed frames (auth_transport_framing.h): FrameSealer numbers, encrypts and sends the
// frames of this end's direction, FrameOpener receives, checks and decrypts the other's, and
// Link runs them for TensorPipe, a reader and a writer thread per connection. What TensorPipe
// sees of a link (a Connection) is auth_transport.cpp's. (See auth_transport.h for the
// protocol as a whole.)
#pragma once

#include "auth/auth_transport_framing.h"
#include "auth/message_auth.h"

#include <tensorpipe/common/error.h>

#include <array>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace gilfree_rpc {
namespace auth {

// TensorPipe's callbacks (tensorpipe::transport::Connection's read_callback_fn and
// write_callback_fn: the same types).
using ReadCallback = std::function<void(const tensorpipe::Error& error, const void* ptr, size_t length)>;
using WriteCallback = std::function<void(const tensorpipe::Error& error)>;

struct ReadOp {
  void* ptr;  // null: the transport allocates
  size_t length;
  ReadCallback fn;
};

struct WriteOp {
  const void* ptr = nullptr;
  size_t length = 0;
  std::unique_ptr<uint8_t[]> owned;  // the serialized nop object (ptr points at it): encrypted in place
  WriteCallback fn;
  // How far the frame has got, kept when the writer thread takes over what write() began.
  bool started = false;  // numbered, header sealed, payload's encryption begun
  std::array<uint8_t, kSealedHeaderSize> header{};
  AeadTag tag{};  // the payload's, once all of it is encrypted
  size_t sealed = 0;  // payload bytes encrypted
  size_t chunkBegin = 0;  // payload offset of the ciphertext in the sealer's buffer (not owned)
  size_t sent = 0;  // bytes of the frame (header, payload, tag) on the socket
};

// The two directions' ciphers of a link, keyed by the handshake.
struct LinkCiphers {
  std::unique_ptr<Aead> sender;  // this end's direction
  std::unique_ptr<Aead> receiver;  // the other end's
};

// The challenge-response on the connected socket `fd` (see auth_transport.h), bounded by the
// handshake's time: the ciphers of both directions when the peer proved `key`, else nullopt
// and `why` says what failed.
std::optional<LinkCiphers> handshake(int fd, const std::string& key, bool client, std::string& why);

// Numbers, seals and sends the frames of one direction: one frame at a time, by the holder of
// the link's `writing_` flag.
class FrameSealer {
 public:
  explicit FrameSealer(std::unique_ptr<Aead> cipher) : cipher_(std::move(cipher)) {}

  enum class Sent { kAll, kBlocked, kFailed };

  // Encrypts and sends the rest of `op`'s frame on `fd`: all of it (kAll), or as much as the
  // socket takes without blocking when `mayBlock` is false (kBlocked; `op` records how far
  // it got). kFailed: the socket failed or the frame could not be sealed (failure() says why,
  // naming `peer`).
  Sent pump(int fd, WriteOp& op, bool mayBlock, const std::string& peer);

  const std::string& failure() const {
    return failure_;
  }

 private:
  // Numbers the frame of `op` (the next of this direction), seals its header and begins its
  // payload (all of it, in place, when the payload is a buffer of ours).
  void startFrame(WriteOp& op);
  // Encrypts the next part of TensorPipe's buffer into buffer_ (the previous part is on the socket).
  void sealNextChunk(WriteOp& op);

  std::unique_ptr<Aead> cipher_;
  uint64_t sequence_ = 0;
  std::unique_ptr<uint8_t[]> buffer_;  // kSealChunk bytes, once a payload needs it
  std::string failure_;
};

// One frame received: its payload, decrypted and authentic, at `data` (TensorPipe's
// buffer, or `owned`); or why not (`error`, whose connection then must close).
struct Frame {
  void* data = nullptr;
  uint64_t length = 0;
  std::unique_ptr<uint8_t[]> owned;
  tensorpipe::Error error;
};

// Receives, checks and decrypts the frames of the other direction, in order: the reader's.
class FrameOpener {
 public:
  explicit FrameOpener(std::unique_ptr<Aead> cipher) : cipher_(std::move(cipher)) {}

  // Receives the next frame from `fd` (from `peer`) into `into`, which holds `expected` bytes,
  // or, when `into` is null, into a buffer of its own (at most `limit` bytes). A frame whose
  // tags fail is logged once per address.
  Frame receive(int fd, const std::string& peer, void* into, size_t expected, uint64_t limit, Deadline* deadline);

 private:
  // Receives `length` bytes of ciphertext into `target` and the tag after them into `tag`,
  // decrypting in place what each receipt brought, while it is in the cache. False on EOF,
  // error or (when `deadline` is set) time-out.
  bool receivePayload(int fd, uint8_t* target, size_t length, uint8_t* tag, Deadline* deadline);

  std::unique_ptr<Aead> cipher_;
  uint64_t sequence_ = 0;
};

// One connection of the transport, for TensorPipe: its reads are served in order from the
// frames received, its writes sent as frames in the order of the calls.
class Link : public std::enable_shared_from_this<Link> {
 public:
  Link(std::string key, bool client) : key_(std::move(key)), client_(client) {}
  ~Link();

  // Client: connects and authenticates on the reader thread, then reads.
  void startClient(SocketAddress address);

  // What a connection's first frame must be, checked before the connection is handed to
  // TensorPipe: "" when its `length` bytes at `data` are fine, else why not.
  using FirstFrameCheck = std::function<std::string(const uint8_t* data, size_t length)>;

  // Server: authenticates the accepted socket and receives its first frame, which must pass
  // `check`; `ready` is called once, with true when both passed (the reader then goes on
  // reading), false otherwise (the link is closed, and the reason logged).
  void startServer(int fd, std::string peer, FirstFrameCheck check, std::function<void(bool)> ready);

  // Queues a read of the next frame: into `ptr`, which holds `length` bytes, or (null) into
  // a buffer of the link's. `fn` gets the frame, or the error that closed the link.
  void read(void* ptr, size_t length, ReadCallback fn);

  // Sends the frame on the caller's thread when the link is idle (authenticated, nothing queued,
  // the writer not sending), as far as the socket takes it without blocking; the writer
  // thread sends what is left, and the frames queued meanwhile. Frames leave in the order of
  // the calls: only the holder of `writing_` encrypts and sends, and it numbers the frame.
  void write(WriteOp op);

  // Ends the connection: pending and later operations fail with `error`.
  void fail(const tensorpipe::Error& error);

  void close();

  const std::string& peer() const {
    return peer_;
  }

  // After the handshake: starts the writer thread, and write() may send by itself.
  void startWriter();

 private:
  void runClient(SocketAddress address);

  // The handshake; on failure logs (server) and fails the link. Then the sealer and the
  // opener are set.
  bool authenticate();

  void writeLoop();

  // Server: receives the peer's first frame (TensorPipe's hello, which says what the
  // connection is for) before the connection is handed to TensorPipe, within the
  // handshake's time, and checks it with `check`. TensorPipe's listener fails as a whole, and
  // accepts no more pipes, when a connection it reads the hello from fails: a frame altered
  // on the path, or one from a key holder that is no hello, fails here.
  bool receiveFirstFrame(const FirstFrameCheck& check);

  // Reads the frames for TensorPipe's reads, in order. A frame is handed to TensorPipe only
  // once its tag has checked; any failure closes the connection.
  void readLoop();

  const std::string key_;
  const bool client_;
  std::string peer_;
  int fd_ = -1;
  std::mutex mutex_;
  // One for each loop: a read queued for TensorPipe wakes the reader only, a write the writer.
  std::condition_variable readCv_;
  std::condition_variable writeCv_;
  bool closed_ = false;
  tensorpipe::Error error_;
  std::deque<ReadOp> reads_;
  std::deque<WriteOp> writes_;
  bool authenticated_ = false;  // the handshake passed and the writer runs
  // A thread is encrypting and sending a frame: it alone uses sealer_.
  bool writing_ = false;
  std::unique_ptr<FrameSealer> sealer_;  // this direction's frames
  std::unique_ptr<FrameOpener> opener_;  // the other direction's (the reader's)
  std::optional<Frame> first_;  // server: the first frame, received before TensorPipe reads
};

}  // namespace auth
}  // namespace gilfree_rpc
