// TensorPipe's transport interfaces, declared here because torch ships only
// tensorpipe/transport/context.h (and the error headers), not the Connection and Listener
// classes that a transport of our own must implement (auth_transport.cpp).
//
// The declarations match TensorPipe at commit 52791a2fd214b2a9dc5759d36725909c1daa7f2e
// (tensorpipe/transport/connection.h, listener.h, common/nop.h), the commit torch pins as
// third_party/tensorpipe. Only the virtual functions' order and signatures matter (calls
// go through the vtable); checked by real RPC over this transport, and by the self-test
// below, on torch 2.13.0, 2.14.1 and 2.15.0 (tests/security). Not checked on torch 2.11
// (the GPU machine's torch).
//
// Nothing here is checked by the compiler against TensorPipe (its headers are not shipped),
// so a torch whose TensorPipe or libnop differs would run undefined behaviour in every
// connection. The first start with a key runs a self-test first (auth_transport_selftest.h):
// TensorPipe's own code over this transport and this mirror, on loopback, in a child process;
// if it crashes, hangs or delivers other bytes than were sent, the transport refuses to start,
// naming the torch version and what differed.
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
// do the same. (A trivially copyable mirror crashed: our `this` became the return slot.)
// They live in our namespace, never in TensorPipe's, so no definition of ours competes with
// libtorch's.
//
// TensorPipe's NopReader checks no bounds before a read (only libnop's containers ask it
// to Ensure their length): an object shorter than its encoding makes it read through a
// null pointer. So a frame is decoded only once nopValueSize, a mirror of libnop's wire
// format, has found exactly one whole value in it; and a connection's first frame, which
// TensorPipe's listener decodes (a failure there ends the listener), must also be a
// TensorPipe hello (isTensorPipeHello, a mirror of TensorPipe's Packet).
#pragma once

#include <tensorpipe/common/error.h>
#include <tensorpipe/transport/context.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
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


// libnop's wire format (include/nop/base/encoding_byte.h and the encodings of nop/base/, as
// TensorPipe's pinned third_party/libnop writes them): every value starts with a prefix byte.
// Fixed-size values: fixints (0x00-0x7f, 0xc0-0xff; bool is a fixint), nil (0xbe), and 1, 2,
// 4 or 8 bytes after U8/I8, U16/I16, U32/I32/F32, U64/I64/F64 (0x80-0x89; the bytes in the
// host's order, little endian on the machines torch ships for). Containers: a count, an
// unsigned integer (a fixint or U8-U64, libnop's SizeType), then that many bytes (binary
// 0xbc, string 0xbd), values (array 0xba, structure 0xb9) or key-value pairs (map 0xbb); a
// variant (0xb8) is an integer (its index) and a value. TensorPipe's objects use nothing
// else: table (0xb5), error (0xb6), handle (0xb7), extension (0xbf) and the reserved
// prefixes (0x8a-0xb4) are refused.
namespace nop_wire {
constexpr uint8_t kU8 = 0x80;
constexpr uint8_t kU64 = 0x83;
constexpr uint8_t kF64 = 0x89;
constexpr uint8_t kVariant = 0xb8;
constexpr uint8_t kStructure = 0xb9;
constexpr uint8_t kArray = 0xba;
constexpr uint8_t kMap = 0xbb;
constexpr uint8_t kBinary = 0xbc;
constexpr uint8_t kString = 0xbd;
constexpr uint8_t kNil = 0xbe;
constexpr uint8_t kNegativeFixIntMin = 0xc0;
}  // namespace nop_wire

// The size of the libnop value that starts at `data`, when all of it lies within `length`
// bytes; nullopt when the bytes end inside it or it holds a prefix TensorPipe's objects never
// use. Walks the value without recursion (a count of the values still to read), so nesting
// costs no stack; every count is checked against the bytes left before it is used, so the
// walk reads nothing outside the `length` bytes.
inline std::optional<size_t> nopValueSize(const uint8_t* data, size_t length) {
  size_t at = 0;
  // An unsigned integer of libnop's SizeType (a count or a length).
  auto readCount = [&](uint64_t& count) {
    if (at >= length) {
      return false;
    }
    const uint8_t prefix = data[at++];
    if (prefix < nop_wire::kU8) {
      count = prefix;
      return true;
    }
    if (prefix > nop_wire::kU64) {
      return false;
    }
    const size_t width = size_t{1} << (prefix - nop_wire::kU8);
    if (length - at < width) {
      return false;
    }
    count = 0;
    for (size_t i = 0; i < width; ++i) {
      count |= static_cast<uint64_t>(data[at + i]) << (8 * i);
    }
    at += width;
    return true;
  };
  uint64_t pending = 1;  // values still to read; never more than the bytes left (checked below)
  while (pending > 0) {
    if (at >= length) {
      return std::nullopt;
    }
    --pending;
    const uint8_t prefix = data[at++];
    if (prefix < nop_wire::kU8 || prefix >= nop_wire::kNegativeFixIntMin || prefix == nop_wire::kNil) {
      continue;  // the value is its prefix
    }
    if (prefix <= nop_wire::kF64) {  // U8 U16 U32 U64 I8 I16 I32 I64 F32 F64
      static constexpr size_t kWidths[] = {1, 2, 4, 8, 1, 2, 4, 8, 4, 8};
      const size_t width = kWidths[prefix - nop_wire::kU8];
      if (length - at < width) {
        return std::nullopt;
      }
      at += width;
      continue;
    }
    uint64_t count = 0;
    switch (prefix) {
      case nop_wire::kVariant:
        pending += 2;  // the index, then the value
        break;
      case nop_wire::kStructure:
      case nop_wire::kArray:
        if (!readCount(count) || count > length - at) {
          return std::nullopt;
        }
        pending += count;
        break;
      case nop_wire::kMap:
        if (!readCount(count) || count > (length - at) / 2) {
          return std::nullopt;
        }
        pending += 2 * count;
        break;
      case nop_wire::kBinary:
      case nop_wire::kString:
        if (!readCount(count) || count > length - at) {
          return std::nullopt;
        }
        at += count;
        break;
      default:  // table, error, handle, extension, reserved
        return std::nullopt;
    }
    if (pending > length - at) {
      return std::nullopt;  // each value takes a byte at least: the bytes end inside this one
    }
  }
  return at;
}

// Whether the `length` bytes at `data` are one TensorPipe hello, the first object of every
// connection (tensorpipe/core/nop_types.h: Packet = nop::Variant<SpontaneousConnection
// {std::string contextName}, RequestedConnection{uint64_t registrationId}>), which
// TensorPipe's listener decodes: variant, index 0 or 1, structure of 1 member, then a string
// (index 0) or an unsigned integer (index 1), and nothing after it.
inline bool isTensorPipeHello(const uint8_t* data, size_t length) {
  auto size = nopValueSize(data, length);
  if (!size || *size != length || length < 5) {
    return false;
  }
  if (data[0] != nop_wire::kVariant || data[1] > 1 || data[2] != nop_wire::kStructure || data[3] != 1) {
    return false;
  }
  const uint8_t member = data[4];
  return data[1] == 0 ? member == nop_wire::kString : member <= nop_wire::kU64;  // a fixint or U8-U64
}

}  // namespace tp_abi
}  // namespace gilfree_rpc
