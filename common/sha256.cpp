// common/sha256.cpp: the streaming hasher over OpenSSL's EVP digest interface (the
// low-level SHA256_* calls are deprecated in OpenSSL 3).
#include "lorakv/common/sha256.h"

#include <openssl/evp.h>

#include <cstring>

#include "lorakv/common/errors.h"

namespace lorakv {

struct Sha256::Context {
  EVP_MD_CTX* md = nullptr;
  ~Context() { EVP_MD_CTX_free(md); }
};

Sha256::Sha256() : context_(std::make_unique<Context>()) {
  context_->md = EVP_MD_CTX_new();
  // These fail only when OpenSSL cannot allocate or its default provider is missing.
  LORAKV_ASSERT(context_->md != nullptr, "OpenSSL could not allocate a digest context");
  const int ok = EVP_DigestInit_ex(context_->md, EVP_sha256(), nullptr);
  LORAKV_ASSERT(ok == 1, "OpenSSL SHA-256 init failed");
}

Sha256::~Sha256() = default;

Sha256& Sha256::update(const void* data, size_t num_bytes) {
  LORAKV_ASSERT(!finished_, "Sha256 updated after finish()");
  if (num_bytes == 0) return *this;
  const int ok = EVP_DigestUpdate(context_->md, data, num_bytes);
  LORAKV_ASSERT(ok == 1, "OpenSSL SHA-256 update failed");
  return *this;
}

Sha256& Sha256::update_u64(uint64_t value) {
  uint8_t bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(value >> (8 * i));
  return update(bytes, sizeof bytes);
}

Sha256& Sha256::update_f64(double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return update_u64(bits);
}

Sha256& Sha256::update_string(const std::string& text) {
  update_u64(text.size());
  return update(text.data(), text.size());
}

Sha256& Sha256::update_digest(const Sha256Digest& digest) { return update(digest.data(), digest.size()); }

Sha256Digest Sha256::finish() {
  LORAKV_ASSERT(!finished_, "Sha256::finish() called twice");
  finished_ = true;
  Sha256Digest out{};
  unsigned int size = 0;
  const int ok = EVP_DigestFinal_ex(context_->md, out.data(), &size);
  LORAKV_ASSERT(ok == 1 && size == out.size(), "OpenSSL SHA-256 final failed");
  return out;
}

Sha256Digest sha256(const void* data, size_t num_bytes) { return Sha256().update(data, num_bytes).finish(); }

Sha256Digest sha256(const std::string& bytes) { return sha256(bytes.data(), bytes.size()); }

std::string digest_hex(const Sha256Digest& digest) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * digest.size());
  for (uint8_t b : digest) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

}  // namespace lorakv
