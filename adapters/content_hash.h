// adapters/content_hash.h: a 128-bit non-cryptographic content hash (two independent
// 64-bit multiply-xorshift lanes over 8-byte words), printed as 32 hex digits. Used for
// adapter identity: equal bytes give equal hashes; it is not a defence against forgery.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace lorakv::adapters {

class ContentHasher {
 public:
  void update(const void* data, size_t num_bytes);
  void update(const std::string& text);  // its length, then its bytes
  void update_u64(uint64_t value);
  void update_double(double value);
  std::string hex() const;  // 32 lowercase hex digits; the hasher stays usable

 private:
  uint64_t lo_ = 0x9e3779b97f4a7c15ULL;
  uint64_t hi_ = 0xc2b2ae3d27d4eb4fULL;
  uint64_t length_ = 0;
};

}  // namespace lorakv::adapters
