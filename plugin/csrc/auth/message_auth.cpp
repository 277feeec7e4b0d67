#include "auth/message_auth.h"

#include <dlfcn.h>
#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <stdexcept>

namespace gilfree_rpc {

namespace {

struct Crypto {
  void* (*ctxNew)() = nullptr;
  void (*ctxFree)(void*) = nullptr;
  int (*init)(void*, const void*, int, const void*, void*) = nullptr;
  int (*update)(void*, const unsigned char*, size_t) = nullptr;
  int (*final)(void*, unsigned char*, unsigned int*) = nullptr;
  const void* (*sha256)() = nullptr;
  int (*memcmp)(const void*, const void*, size_t) = nullptr;
  // AES-256-GCM through the EVP cipher interface
  const void* (*aes256gcm)() = nullptr;
  void* (*cipherNew)() = nullptr;
  void (*cipherFree)(void*) = nullptr;
  int (*cipherInit)(void*, const void*, void*, const unsigned char*, const unsigned char*, int) = nullptr;
  int (*cipherUpdate)(void*, unsigned char*, int*, const unsigned char*, int) = nullptr;
  int (*cipherFinal)(void*, unsigned char*, int*) = nullptr;
  int (*cipherCtrl)(void*, int, int, void*) = nullptr;
  bool loaded = false;
};

Crypto& crypto() {
  static Crypto c;
  return c;
}

std::mutex& loadMutex() {
  static std::mutex m;
  return m;
}

template <typename F>
void resolve(void* library, const std::string& path, const char* name, F& out) {
  void* symbol = dlsym(library, name);
  if (symbol == nullptr) {
    throw std::runtime_error(
        "gilfree-rpc: " + path + " has no function " + name +
        " (authentication needs OpenSSL's libcrypto 1.1 or 3.x)");
  }
  out = reinterpret_cast<F>(symbol);
}

const Crypto& loaded() {
  const Crypto& c = crypto();
  if (!c.loaded) {
    throw std::runtime_error("gilfree-rpc: libcrypto was not loaded (plugin.rpc loads it with the key)");
  }
  return c;
}

}  // namespace

void loadCrypto(const std::string& path) {
  std::lock_guard<std::mutex> guard(loadMutex());
  Crypto& c = crypto();
  if (c.loaded) {
    return;
  }
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    throw std::runtime_error(
        "gilfree-rpc: cannot open libcrypto at '" + path + "': " + (why ? why : "unknown error") +
        " (authentication needs OpenSSL's libcrypto 1.1 or 3.x)");
  }
  Crypto next;
  resolve(library, path, "HMAC_CTX_new", next.ctxNew);
  resolve(library, path, "HMAC_CTX_free", next.ctxFree);
  resolve(library, path, "HMAC_Init_ex", next.init);
  resolve(library, path, "HMAC_Update", next.update);
  resolve(library, path, "HMAC_Final", next.final);
  resolve(library, path, "EVP_sha256", next.sha256);
  resolve(library, path, "CRYPTO_memcmp", next.memcmp);
  resolve(library, path, "EVP_aes_256_gcm", next.aes256gcm);
  resolve(library, path, "EVP_CIPHER_CTX_new", next.cipherNew);
  resolve(library, path, "EVP_CIPHER_CTX_free", next.cipherFree);
  resolve(library, path, "EVP_CipherInit_ex", next.cipherInit);
  resolve(library, path, "EVP_CipherUpdate", next.cipherUpdate);
  resolve(library, path, "EVP_CipherFinal_ex", next.cipherFinal);
  resolve(library, path, "EVP_CIPHER_CTX_ctrl", next.cipherCtrl);
  next.loaded = true;
  c = next;  // the library stays open for the life of the process
}

bool cryptoLoaded() {
  return crypto().loaded;
}

Hmac::Hmac(const std::string& key) {
  const Crypto& c = loaded();
  ctx_ = c.ctxNew();
  if (ctx_ == nullptr || c.init(ctx_, key.data(), static_cast<int>(key.size()), c.sha256(), nullptr) != 1) {
    if (ctx_ != nullptr) {
      c.ctxFree(ctx_);
    }
    throw std::runtime_error("gilfree-rpc: HMAC_Init_ex failed");
  }
}

Hmac::~Hmac() {
  crypto().ctxFree(ctx_);
}

void Hmac::begin() {
  // A null key and digest keep the context's key: a new message under it.
  if (crypto().init(ctx_, nullptr, 0, nullptr, nullptr) != 1) {
    throw std::runtime_error("gilfree-rpc: HMAC_Init_ex failed");
  }
}

void Hmac::update(const void* data, size_t length) {
  if (length > 0 && crypto().update(ctx_, static_cast<const unsigned char*>(data), length) != 1) {
    throw std::runtime_error("gilfree-rpc: HMAC_Update failed");
  }
}

Tag Hmac::finish() {
  Tag tag{};
  unsigned int length = 0;
  if (crypto().final(ctx_, tag.data(), &length) != 1 || length != kTagSize) {
    throw std::runtime_error("gilfree-rpc: HMAC_Final failed");
  }
  return tag;
}

Tag hmacOf(const std::string& key, std::initializer_list<std::string> parts) {
  Hmac mac(key);
  for (const auto& part : parts) {
    mac.update(part.data(), part.size());
  }
  return mac.finish();
}

Tag hkdf(const std::string& ikm, const std::string& salt, const std::string& info) {
  Tag prk = hmacOf(salt, {ikm});
  return hmacOf(std::string(reinterpret_cast<const char*>(prk.data()), prk.size()), {info, std::string(1, '\x01')});
}

bool sameBytes(const uint8_t* a, const uint8_t* b, size_t length) {
  return loaded().memcmp(a, b, length) == 0;
}

void randomBytes(uint8_t* out, size_t length) {
  size_t done = 0;
  while (done < length) {
    ssize_t got = getrandom(out + done, length - done, 0);
    if (got < 0) {
      if (errno == EINTR) {
        continue;
      }
      throw std::runtime_error(std::string("gilfree-rpc: getrandom failed: ") + std::strerror(errno));
    }
    done += static_cast<size_t>(got);
  }
}

namespace {
// EVP_CTRL_AEAD_GET_TAG and EVP_CTRL_AEAD_SET_TAG of openssl/evp.h (1.1 and 3.x).
constexpr int kCtrlGetTag = 0x10;
constexpr int kCtrlSetTag = 0x11;
}  // namespace

Aead::Aead(const uint8_t* key, bool seal) : seal_(seal) {
  const Crypto& c = loaded();
  ctx_ = c.cipherNew();
  // The cipher and key once (the key schedule stays in the context); each begin() sets a nonce.
  if (ctx_ == nullptr || c.cipherInit(ctx_, c.aes256gcm(), nullptr, key, nullptr, seal ? 1 : 0) != 1) {
    if (ctx_ != nullptr) {
      c.cipherFree(ctx_);
    }
    throw std::runtime_error("gilfree-rpc: EVP_CipherInit_ex (AES-256-GCM) failed");
  }
}

Aead::~Aead() {
  crypto().cipherFree(ctx_);
}

void Aead::begin(uint32_t kind, uint64_t counter) {
  unsigned char nonce[kAeadNonceSize];
  for (int i = 0; i < 4; ++i) {
    nonce[i] = static_cast<unsigned char>(kind >> (8 * i));
  }
  for (int i = 0; i < 8; ++i) {
    nonce[4 + i] = static_cast<unsigned char>(counter >> (8 * i));
  }
  if (crypto().cipherInit(ctx_, nullptr, nullptr, nullptr, nonce, seal_ ? 1 : 0) != 1) {
    throw std::runtime_error("gilfree-rpc: EVP_CipherInit_ex (nonce) failed");
  }
}

void Aead::update(const void* in, void* out, size_t length) {
  const auto* from = static_cast<const unsigned char*>(in);
  auto* to = static_cast<unsigned char*>(out);
  while (length > 0) {
    // EVP takes an int length; GCM is a stream cipher, so the output has the input's length
    const int part = static_cast<int>(std::min<size_t>(length, size_t{1} << 30));
    int written = 0;
    if (crypto().cipherUpdate(ctx_, to, &written, from, part) != 1 || written != part) {
      throw std::runtime_error("gilfree-rpc: EVP_CipherUpdate (AES-256-GCM) failed");
    }
    from += part;
    to += part;
    length -= static_cast<size_t>(part);
  }
}

AeadTag Aead::seal() {
  AeadTag tag{};
  unsigned char rest[16];
  int written = 0;
  if (crypto().cipherFinal(ctx_, rest, &written) != 1 || written != 0 ||
      crypto().cipherCtrl(ctx_, kCtrlGetTag, static_cast<int>(kAeadTagSize), tag.data()) != 1) {
    throw std::runtime_error("gilfree-rpc: EVP_CipherFinal_ex (AES-256-GCM) failed");
  }
  return tag;
}

bool Aead::open(const uint8_t* tag) {
  AeadTag expected{};
  std::memcpy(expected.data(), tag, kAeadTagSize);
  if (crypto().cipherCtrl(ctx_, kCtrlSetTag, static_cast<int>(kAeadTagSize), expected.data()) != 1) {
    throw std::runtime_error("gilfree-rpc: EVP_CIPHER_CTX_ctrl (AES-256-GCM tag) failed");
  }
  unsigned char rest[16];
  int written = 0;
  // 1: the tag matches (checked in constant time by libcrypto); otherwise the message was altered
  return crypto().cipherFinal(ctx_, rest, &written) == 1;
}

}  // namespace gilfree_rpc
