#include "rpc/message_auth.h"

#include <dlfcn.h>
#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <stdexcept>

namespace dist_engine {

namespace {

struct Crypto {
  void* (*ctxNew)() = nullptr;
  void (*ctxFree)(void*) = nullptr;
  int (*init)(void*, const void*, int, const void*, void*) = nullptr;
  int (*update)(void*, const unsigned char*, size_t) = nullptr;
  int (*final)(void*, unsigned char*, unsigned int*) = nullptr;
  const void* (*sha256)() = nullptr;
  int (*memcmp)(const void*, const void*, size_t) = nullptr;
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

bool sameTag(const uint8_t* a, const uint8_t* b) {
  return loaded().memcmp(a, b, kTagSize) == 0;
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

}  // namespace dist_engine
