// An encrypting and authenticating TensorPipe transport over plain TCP sockets ("gilfree_auth").
//
// Every connection starts with a fixed-size challenge-response handshake, bounded in
// time, that proves to both ends that the other holds the job's key; only then is the
// connection handed to TensorPipe. The handshake: the connecting end sends the magic bytes
// and a 32-byte random nonce, the listening end answers (only a hello that starts with the
// magic) with its own, and each end sends a proof, HKDF-SHA256 (RFC 5869) of the key with
// both nonces as salt and its role as info. From the same key and salt, HKDF gives one
// AES-256 key per direction. After it, every message (each write of TensorPipe's pipe and
// channels: descriptors, payloads, tensors of the basic channels) travels in a frame
//
//   sealed length (8 bytes) | its tag (16) | sealed payload (length bytes) | its tag (16)
//
// made of two AES-256-GCM messages under the direction's key: the payload's length, whose
// tag is checked before anything is allocated for the payload, and the payload, whose tag
// is checked before it is handed to TensorPipe. Their nonces are (0, n) and (1, n) (4 + 8
// bytes, little endian), n the number of the frame in its direction: never repeated under
// a key, so a frame replayed, reordered, dropped or moved to another connection fails
// its tag, as does a frame altered or cut. A frame that fails closes the connection (and
// is logged once per address); a peer that fails the handshake is logged once per
// address. So no byte from a process without the key ever reaches TensorPipe's parsers
// (the issue: an 8-byte length field read by TensorPipe's uv transport makes it allocate
// that much and abort), and an observer of the connection sees the frames' sizes and
// times only.
//
// Costs: the receiver decrypts in place, in the buffer TensorPipe reads into, part by part
// as the bytes arrive; the sender encrypts TensorPipe's serialized objects in place and
// other buffers (a tensor's bytes: TensorPipe's, not ours to change) 256 KiB at a time
// into a buffer of the connection, each part sent before the next is made. One cipher
// context per direction, keyed once.
//
// Blocking sockets, a reader and a writer thread per connection, an accept thread per
// listener: connection counts are small (one per pipe plus one per channel). IPv4 and
// IPv6 (addresses as TensorPipe's uv transport writes them: "[::1]:port").
//
// The code, by role: auth_transport_framing.h (the byte level: the frame's layout, socket
// addresses and I/O, the transport's errors and log), auth_transport_link.h (the
// authenticated link: the handshake, then sealed frames), auth_transport.cpp (TensorPipe's
// glue: its Connection, Listener and Context over links, its objects through the mirror of
// tensorpipe_abi.h, configuration and registration).
#pragma once

#include <memory>
#include <string>

namespace tensorpipe {
namespace transport {
class Context;
}  // namespace transport
}  // namespace tensorpipe

namespace gilfree_rpc {

// The name the transport is registered under in torch's TensorPipeTransportRegistry.
constexpr const char* kAuthTransportName = "gilfree_auth";

// Sets the key (raw bytes; empty: none), the libcrypto to load, and the address the
// transport listens on (a numeric IPv4 or IPv6 address), for the agent started next;
// registers the transport the first time. The first time a key is set, checks the mirror of
// TensorPipe's ABI first (auth_transport_selftest.h). Throws when libcrypto cannot be loaded,
// and, with a key, when that check failed (each time: the transport never starts).
void configureAuthTransport(const std::string& key, const std::string& cryptoLibrary, const std::string& listenHost);

// --- for the self-test (auth_transport_selftest.cpp) -------------------------------------

// A deliberately broken expectation of TensorPipe's ABI, for the tests of the self-test only:
// what the mirror does differently in the self-test's child when the environment variable
// GILFREE_RPC_TEST_ABI_FAULT names it (never in a worker's own transport).
enum class AbiFault {
  kNone,
  kReaderLayout,  // "reader_layout": NopReader's fields in another order (ptr1, ptr2, len1, len2)
  kStatus,  // "status": nop::Status<void>'s error read as set when it is not
};

// The fault `name` names ("" for none); throws std::invalid_argument for another name.
AbiFault abiFaultNamed(const std::string& name);

// A context of this transport whose connections prove `key` (raw bytes) and use the mirror as
// `fault` says.
std::shared_ptr<tensorpipe::transport::Context> makeAuthContext(const std::string& key, AbiFault fault);

}  // namespace gilfree_rpc
