// HMAC-SHA256 from OpenSSL's libcrypto, resolved at run time.
//
// The library is opened with dlopen from the path Python gives (the libcrypto that its
// own hashlib module has loaded, plugin/rpc.py), so that the build needs no OpenSSL
// headers and a machine without libcrypto still loads the plugin: only starting RPC with
// an authentication key fails there, with an error that says so. The functions used
// (HMAC_CTX_new/free, HMAC_Init_ex, HMAC_Update, HMAC_Final, EVP_sha256, CRYPTO_memcmp)
// are in OpenSSL 1.1 and 3.x (deprecated in 3.0 but exported).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace dist_engine {

constexpr size_t kTagSize = 32;
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

// Constant-time comparison (CRYPTO_memcmp).
bool sameTag(const uint8_t* a, const uint8_t* b);

// Bytes from the kernel's random source (getrandom). Throws on failure.
void randomBytes(uint8_t* out, size_t length);

}  // namespace dist_engine
