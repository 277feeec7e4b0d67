// HMAC-SHA256, HKDF-SHA256 and AES-256-GCM from OpenSSL's libcrypto, resolved at run time.
//
// The library is opened with dlopen from the path Python gives (the libcrypto that its
// own hashlib module has loaded, plugin/rpc.py), so that the build needs no OpenSSL
// headers and a machine without libcrypto still loads the plugin: only starting RPC with
// an authentication key fails there, with an error that says so. The functions used
// (HMAC_CTX_new/free, HMAC_Init_ex, HMAC_Update, HMAC_Final, EVP_sha256, EVP_aes_256_gcm,
// EVP_CIPHER_CTX_new/free, EVP_CipherInit_ex, EVP_CipherUpdate, EVP_CipherFinal_ex,
// EVP_CIPHER_CTX_ctrl, CRYPTO_memcmp) are in OpenSSL 1.1 and 3.x (the HMAC_* ones
// deprecated in 3.0 but exported).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace gilfree_rpc {

constexpr size_t kTagSize = 32;  // HMAC-SHA256
using Tag = std::array<uint8_t, kTagSize>;

// Opens libcrypto at `path` and resolves the functions above (once per process; later
// calls with another path are ignored). Throws std::runtime_error naming the library and
// the missing function.
void loadCrypto(const std::string& path);
bool cryptoLoaded();

// One HMAC-SHA256 key, reusable for many messages (one at a time: not thread-safe).
class Hmac {
 public:
  explicit Hmac(const std::string& key);
  ~Hmac();
  Hmac(const Hmac&) = delete;
  Hmac& operator=(const Hmac&) = delete;

  void begin();  // starts a new message under the same key
  void update(const void* data, size_t length);
  Tag finish();

 private:
  void* ctx_;
};

// HMAC-SHA256 of the concatenation of `parts` under `key`.
Tag hmacOf(const std::string& key, std::initializer_list<std::string> parts);

// HKDF-SHA256 (RFC 5869) with one block of output: HKDF-Expand(PRK, info, 32) where
// PRK = HKDF-Extract(salt, ikm).
Tag hkdf(const std::string& ikm, const std::string& salt, const std::string& info);

// Constant-time comparison (CRYPTO_memcmp) of `length` bytes.
bool sameBytes(const uint8_t* a, const uint8_t* b, size_t length);
inline bool sameTag(const uint8_t* a, const uint8_t* b) {
  return sameBytes(a, b, kTagSize);
}

// Bytes from the kernel's random source (getrandom). Throws on failure.
void randomBytes(uint8_t* out, size_t length);

// AES-256-GCM in one direction (sealing or opening) under one key: one EVP cipher context,
// keyed once, reused for every message (each begin() only sets the next nonce). Messages
// are processed as streams: update() any number of times (the output may be the input:
// in place), then seal() or open(). One message at a time: not thread-safe.
constexpr size_t kAeadKeySize = 32;
constexpr size_t kAeadTagSize = 16;
constexpr size_t kAeadNonceSize = 12;
// GCM's limit on one message: 2^32 - 2 blocks of 16 bytes.
constexpr uint64_t kAeadMaxMessage = ((uint64_t{1} << 32) - 2) * 16;
using AeadTag = std::array<uint8_t, kAeadTagSize>;

class Aead {
 public:
  Aead(const uint8_t* key, bool seal);  // key: kAeadKeySize bytes
  ~Aead();
  Aead(const Aead&) = delete;
  Aead& operator=(const Aead&) = delete;

  // Starts a message with the nonce `kind` (4 bytes, little endian) | `counter` (8 bytes,
  // little endian). The caller never repeats a nonce under one key.
  void begin(uint32_t kind, uint64_t counter);
  // Encrypts (sealing) or decrypts (opening) `length` bytes of `in` into `out` (which may be `in`).
  void update(const void* in, void* out, size_t length);
  AeadTag seal();  // sealing: ends the message, returns its tag
  bool open(const uint8_t* tag);  // opening: ends the message; whether `tag` is its tag

 private:
  void* ctx_;
  const bool seal_;
};

}  // namespace gilfree_rpc
