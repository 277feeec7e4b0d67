// The gilfree_auth transport's glue to TensorPipe: TensorPipe's transport interfaces
// (tensorpipe_abi.h: Connection, Listener; tensorpipe/transport/context.h: Context)
// implemented over authenticated links (auth_transport_link.h), the objects TensorPipe hands
// over encoded and decoded by TensorPipe's own code through tensorpipe_abi.h's mirror, the
// transport's configuration and its registration in torch's registry of TensorPipe
// transports (compat.h, registerTensorPipeTransport), and the op that configures it. (See
// auth_transport.h for the protocol as a whole.)
//
// compat.h's TensorPipe part (registerTensorPipeTransport) is for this file only.
#define GILFREE_TENSORPIPE_TRANSPORT 1
#include "auth/auth_transport.h"

#include "compat.h"
#include "auth/auth_transport_framing.h"
#include "auth/auth_transport_link.h"
#include "auth/auth_transport_selftest.h"
#include "auth/message_auth.h"
#include "auth/tensorpipe_abi.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace gilfree_rpc {

namespace {

using namespace auth;
using tensorpipe::Error;
namespace tpt = tensorpipe::transport;

constexpr int kMaxHandshakes = 64;  // concurrent handshakes per listener; more are refused

// --- configuration (set from Python before the agent starts) ------------------------

std::mutex configMutex;
std::string configuredKey;  // empty: none
std::string configuredHost = "127.0.0.1";

// --- TensorPipe's objects ------------------------------------------------------------------

// Why a frame of `length` bytes at `data` is refused as a TensorPipe object: "" when it holds
// exactly one whole libnop value (tensorpipe_abi.h, nopValueSize).
std::string refuseObject(const uint8_t* data, size_t length) {
  auto size = tp_abi::nopValueSize(data, length);
  if (size && *size == length) {
    return "";
  }
  return "a frame of " + std::to_string(length) + " bytes does not hold one whole TensorPipe object" +
      (size ? " (one of " + std::to_string(*size) + " bytes, then more)" : "");
}

// A connection's first frame must be TensorPipe's hello (tensorpipe_abi.h, isTensorPipeHello):
// TensorPipe's listener decodes it, and ends when it cannot.
std::string refuseHello(const uint8_t* data, size_t length) {
  std::string refused = refuseObject(data, length);
  if (refused.empty() && !tp_abi::isTensorPipeHello(data, length)) {
    refused = "its first frame (" + std::to_string(length) + " bytes) is no TensorPipe hello";
  }
  return refused;
}

// Decodes the frame of `length` bytes at `data` (from `peer`) into `holder` with TensorPipe's
// own code, once refuseObject has found one whole value in it: so TensorPipe's reader, which
// checks no bounds, reads only within the frame. A frame refused, or one TensorPipe cannot
// decode, is logged once per address and returned as an error (the caller closes the link).
// `fault`: the self-test's tests only (auth_transport.h, AbiFault).
Error decodeObject(
    tp_abi::NopHolderAbi& holder, const uint8_t* data, size_t length, const std::string& peer, AbiFault fault) {
  std::string refused = refuseObject(data, length);
  if (refused.empty()) {
    tp_abi::NopReaderAbi reader{data, length, nullptr, 0};
    if (fault == AbiFault::kReaderLayout) {
      // The fields written as if their order were (ptr1, ptr2, len1, len2).
      reader = tp_abi::NopReaderAbi{data, 0, reinterpret_cast<const uint8_t*>(length), 0};
    }
    int error = 0;  // nop::ErrorStatus
    try {
      error = holder.read(reader).error;
    } catch (const std::exception&) {
      error = -1;  // libnop's containers allocate: a bad_alloc, say
    }
    if (fault == AbiFault::kStatus) {
      error = ~error;  // None (0) read as an error
    }
    if (error != 0) {
      refused = "a frame of " + std::to_string(length) + " bytes holds no TensorPipe object of the type expected";
    } else if (reader.ptr1 != data + length || reader.len1 != 0) {
      // One whole value decoded leaves nothing: TensorPipe's NopReader is not the mirror's.
      return transportError("TensorPipe decoded an object of " + std::to_string(length) +
                            " bytes but left the reader elsewhere than at its end: its NopReader differs from "
                            "tensorpipe_abi.h's NopReaderAbi");
    }
  }
  if (refused.empty()) {
    return Error();
  }
  logRejected(peer, refused);
  return transportError(refused + " (from " + peer + "): connection closed");
}

// --- the connection ----------------------------------------------------------------------

// What TensorPipe holds; closes the link when TensorPipe lets go of it.
class AuthConnection final : public tpt::Connection {
 public:
  AuthConnection(std::shared_ptr<Link> link, AbiFault fault) : link_(std::move(link)), fault_(fault) {}
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

  // TensorPipe's object is decoded by TensorPipe's own code (the holder's read), from a frame
  // that holds exactly one whole libnop value (decodeObject); anything else closes the link.
  void read(tensorpipe::AbstractNopHolder& object, read_nop_callback_fn fn) override {
    tp_abi::NopHolderAbi* holder = &tp_abi::holder(object);
    std::weak_ptr<Link> weak = link_;
    const AbiFault fault = fault_;
    link_->read(nullptr, 0, [holder, weak, fault, fn = std::move(fn)](const Error& error, const void* ptr, size_t length) {
      if (error) {
        fn(error);
        return;
      }
      auto link = weak.lock();
      Error failed =
          decodeObject(*holder, static_cast<const uint8_t*>(ptr), length, link ? link->peer() : "?", fault);
      fn(failed);
      if (failed && link) {
        link->fail(failed);
      }
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
    if (writer.ptr1 != buffer.get() + length || writer.len1 != 0) {
      // An object encoded into the size it asked for fills it: TensorPipe's NopWriter is not the mirror's.
      fn(transportError("TensorPipe encoded an object of " + std::to_string(length) +
                        " bytes but left the writer elsewhere than at its end: its NopWriter differs from "
                        "tensorpipe_abi.h's NopWriterAbi"));
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
  const AbiFault fault_;
};

// --- the listener ----------------------------------------------------------------------

class Acceptor : public std::enable_shared_from_this<Acceptor> {
 public:
  Acceptor(std::string key, AbiFault fault, int fd, std::string addr)
      : key_(std::move(key)), fault_(fault), fd_(fd), addr_(std::move(addr)) {}
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
      link->startServer(fd, peer, &refuseHello, [weak, link](bool ok) {
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
        self->ready_.push_back(std::make_shared<AuthConnection>(link, self->fault_));
        self->dispatch(lock);
      });
    }
  }

  const std::string key_;
  const AbiFault fault_;
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
  AuthContext(std::string key, AbiFault fault) : key_(std::move(key)), fault_(fault) {}

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
    return std::make_shared<AuthConnection>(link, fault_);
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
    auto acceptor = std::make_shared<Acceptor>(key_, fault_, fd, addressOf(address));
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
  const AbiFault fault_;
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
      torch::distributed::rpc::TransportRegistration{makeAuthContext(key, AbiFault::kNone), /*priority=*/0, host});
}

void configureAuthTransportKernel(const std::string& key, const std::string& cryptoLibrary, const std::string& listenHost) {
  configureAuthTransport(key, cryptoLibrary, listenHost);
}

// The verdict of the self-test of the mirror of TensorPipe's ABI, listening on `host`: run
// the first time, then kept for the process ("" when it passed).
const std::string& abiVerdict(const std::string& host) {
  static std::mutex mutex;
  static std::optional<std::string> verdict;
  std::lock_guard<std::mutex> guard(mutex);
  if (!verdict) {
    const char* fault = std::getenv("GILFREE_RPC_TEST_ABI_FAULT");  // the self-test's tests only
    verdict = selfTestTensorPipeAbi(host, fault != nullptr ? fault : "");
  }
  return *verdict;
}

}  // namespace

AbiFault abiFaultNamed(const std::string& name) {
  if (name.empty()) {
    return AbiFault::kNone;
  }
  if (name == "reader_layout") {
    return AbiFault::kReaderLayout;
  }
  if (name == "status") {
    return AbiFault::kStatus;
  }
  throw std::invalid_argument(
      "GILFREE_RPC_TEST_ABI_FAULT names no fault of the mirror: '" + name + "' (reader_layout or status)");
}

std::shared_ptr<tpt::Context> makeAuthContext(const std::string& key, AbiFault fault) {
  return std::make_shared<AuthContext>(key, fault);
}

void configureAuthTransport(const std::string& key, const std::string& cryptoLibrary, const std::string& listenHost) {
  const std::string host = listenHost.empty() ? "127.0.0.1" : listenHost;
  if (!key.empty()) {
    loadCrypto(cryptoLibrary);
    const std::string& failed = abiVerdict(host);
    TORCH_CHECK(
        failed.empty(),
        "gilfree_auth refuses to start: TensorPipe in this torch (",
        TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR, ".", TORCH_VERSION_PATCH,
        ") does not work as the transport's mirror of its ABI expects (plugin/csrc/auth/tensorpipe_abi.h, "
        "which names the TensorPipe commit and the torch releases it was checked on). The self-test over loopback "
        "found: ", failed, ". Authenticated RPC cannot run with this torch.");
  }
  {
    std::lock_guard<std::mutex> guard(configMutex);
    configuredKey = key;
    configuredHost = host;
  }
  static std::once_flag registered;
  std::call_once(registered, [] { registerTensorPipeTransport(kAuthTransportName, &createAuthTransport); });
}

}  // namespace gilfree_rpc

TORCH_LIBRARY_IMPL(gilfree_rpc, CompositeImplicitAutograd, m) {
  m.impl("_configure_auth_transport", TORCH_FN(gilfree_rpc::configureAuthTransportKernel));
}

