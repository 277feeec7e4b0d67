// An authenticating TensorPipe transport over plain TCP sockets ("gilfree_auth").
//
// Every connection starts with a fixed-size challenge-response handshake, bounded in
// time, that proves to both ends that the other holds the job's key; only then is the
// connection handed to TensorPipe. After it, every message (each write of TensorPipe's
// pipe and channels: descriptors, payloads, tensors of the basic channels) travels in a
// frame
//
//   length (8 bytes, little endian) | header tag (32) | payload (length) | payload tag (32)
//
// where header tag = HMAC(k, "H" | sequence number | length) is checked before anything
// is allocated for the payload, and payload tag = HMAC(k, "P" | sequence number | length |
// payload) before the payload is handed to TensorPipe. k is a key per connection and
// direction, derived from the job's key and both ends' nonces; the sequence number counts
// the frames of that direction, so a frame replayed, reordered or moved to another
// connection fails. A frame that fails closes the connection; a peer that fails the
// handshake is logged once per address. So no byte from a process without the key ever
// reaches TensorPipe's parsers (the issue: an 8-byte length field read by TensorPipe's uv
// transport makes it allocate that much and abort). Not encrypted.
//
// Blocking sockets, a reader and a writer thread per connection, an accept thread per
// listener: connection counts are small (one per pipe plus one per channel). IPv4 only.
#pragma once

#include <string>

namespace dist_engine {

// The name the transport is registered under in torch's TensorPipeTransportRegistry.
constexpr const char* kAuthTransportName = "gilfree_auth";

// Sets the key (raw bytes; empty: none), the libcrypto to load, and the address the
// transport listens on, for the agent started next; registers the transport the first
// time. Throws when libcrypto cannot be loaded.
void configureAuthTransport(const std::string& key, const std::string& cryptoLibrary, const std::string& listenHost);

}  // namespace dist_engine
