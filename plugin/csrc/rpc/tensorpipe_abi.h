// TensorPipe's transport interfaces, declared here because torch ships only
// tensorpipe/transport/context.h (and the error headers), not the Connection and Listener
// classes that a transport of our own must implement (auth_transport.cpp).
//
// The declarations match TensorPipe at commit 52791a2fd214b2a9dc5759d36725909c1daa7f2e
// (tensorpipe/transport/connection.h, listener.h, common/nop.h), the commit torch pins as
// third_party/tensorpipe. Only the virtual functions' order and signatures matter (calls
// go through the vtable); checked by real RPC over this transport on torch 2.13.0 and
// 2.14.1 (tests/security). Not checked on torch 2.11 (the GPU machine's torch).
//
// The nop-object read/write of Connection is the fragile part: TensorPipe hands over an
// AbstractNopHolder (libnop's type erasure), whose methods take a NopReader/NopWriter and
// return nop::Status<void>. libnop's headers are not shipped either, so NopHolderAbi,
// NopReaderAbi, NopWriterAbi and NopStatusAbi mirror them: the holder's vtable order
// (getSize, write, read, destructor), the reader's and writer's four fields (they are
// `final` classes without virtual functions, whose inline methods TensorPipe's own code
// runs on our object), and Status<void>'s one enum field. libtorch's Status<void> is
// returned through a hidden pointer, as a class that is not trivially copyable is (seen
// in the disassembly of NopHolder<...>::write in libtorch_cpu.so of torch 2.13.0: `this`
// in %rsi, the writer in %rdx); NopStatusAbi's user-provided destructor makes our calls
// do the same. (A trivially copyable mirror crashed: our `this` became the return slot.) They live in our namespace, never in TensorPipe's, so
// no definition of ours competes with libtorch's.
#pragma once

#include <tensorpipe/common/error.h>
#include <tensorpipe/transport/context.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>

namespace tensorpipe {
class AbstractNopHolder;  // defined by libtorch; used through NopHolderAbi only

namespace transport {

class Connection {
 public:
  using read_callback_fn = std::function<void(const Error& error, const void* ptr, size_t length)>;
  virtual void read(read_callback_fn fn) = 0;
  virtual void read(void* ptr, size_t length, read_callback_fn fn) = 0;
  using write_callback_fn = std::function<void(const Error& error)>;
  virtual void write(const void* ptr, size_t length, write_callback_fn fn) = 0;
  using read_nop_callback_fn = std::function<void(const Error& error)>;
  virtual void read(AbstractNopHolder& object, read_nop_callback_fn fn) = 0;
  virtual void write(const AbstractNopHolder& object, write_callback_fn fn) = 0;
  virtual void setId(std::string id) = 0;
  virtual void close() = 0;
  virtual ~Connection() = default;
};

class Listener {
 public:
  using accept_callback_fn = std::function<void(const Error& error, std::shared_ptr<Connection> connection)>;
  virtual void accept(accept_callback_fn fn) = 0;
  virtual std::string addr() const = 0;
  virtual void setId(std::string id) = 0;
  virtual void close() = 0;
  virtual ~Listener() = default;
};

}  // namespace transport
}  // namespace tensorpipe

namespace gilfree_rpc {
namespace tp_abi {

struct NopStatusAbi {
  int error = 0;  // nop::ErrorStatus, an `enum class` (int); 0 is None
  NopStatusAbi() = default;
  NopStatusAbi(const NopStatusAbi& other) : error(other.error) {}
  ~NopStatusAbi() {}  // not trivial: returned through a hidden pointer, as libtorch's is
};
static_assert(!std::is_trivially_copyable<NopStatusAbi>::value && sizeof(NopStatusAbi) == 4, "nop::Status<void>");

struct NopReaderAbi {
  const uint8_t* ptr1;
  size_t len1;
  const uint8_t* ptr2;
  size_t len2;
};

struct NopWriterAbi {
  uint8_t* ptr1;
  size_t len1;
  uint8_t* ptr2;
  size_t len2;
};

class NopHolderAbi {
 public:
  virtual size_t getSize() const = 0;
  virtual NopStatusAbi write(NopWriterAbi& writer) const = 0;
  virtual NopStatusAbi read(NopReaderAbi& reader) = 0;
  virtual ~NopHolderAbi() = default;
};

inline NopHolderAbi& holder(tensorpipe::AbstractNopHolder& object) {
  return reinterpret_cast<NopHolderAbi&>(object);
}
inline const NopHolderAbi& holder(const tensorpipe::AbstractNopHolder& object) {
  return reinterpret_cast<const NopHolderAbi&>(object);
}

}  // namespace tp_abi
}  // namespace gilfree_rpc
