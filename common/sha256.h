// common/sha256.h: SHA-256 (FIPS 180-4), streaming and one-shot, computed by OpenSSL's
// libcrypto. OpenSSL stays inside sha256.cpp: this header names none of it, so no other
// layer sees its headers or links it directly.
//
// The typed updates write a fixed encoding (integers as 8 little-endian bytes, strings
// length-prefixed), so a sequence of updates hashes to the same digest on every machine
// and in every process, and two different sequences of fields cannot run together.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace lorakv {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  Sha256& update(const void* data, size_t num_bytes);  // raw bytes, as they are
  Sha256& update_u64(uint64_t value);                  // 8 bytes, little-endian
  Sha256& update_f64(double value);                    // its IEEE-754 bits, as update_u64
  Sha256& update_string(const std::string& text);      // its length (update_u64), then its bytes
  Sha256& update_digest(const Sha256Digest& digest);   // 32 raw bytes

  // The digest of everything given so far. The hasher is spent afterwards: a further
  // update or finish is a bug (LORAKV_ASSERT).
  Sha256Digest finish();

 private:
  struct Context;
  std::unique_ptr<Context> context_;
  bool finished_ = false;
};

Sha256Digest sha256(const void* data, size_t num_bytes);
Sha256Digest sha256(const std::string& bytes);

std::string digest_hex(const Sha256Digest& digest);  // 64 lowercase hex digits

}  // namespace lorakv
