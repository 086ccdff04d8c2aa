// adapters/content_hash.cpp: the hash's mixing (SplitMix64-style finaliser per word).
#include "adapters/content_hash.h"

#include <cstdio>
#include <cstring>

namespace lorakv::adapters {
namespace {

uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

void ContentHasher::update(const void* data, size_t num_bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  size_t i = 0;
  for (; i + 8 <= num_bytes; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    lo_ = mix(lo_ ^ w) + 0x9e3779b97f4a7c15ULL;
    hi_ = mix(hi_ + (w * 0xff51afd7ed558ccdULL)) ^ (hi_ >> 17);
  }
  if (i < num_bytes) {
    uint64_t w = 0;
    std::memcpy(&w, p + i, num_bytes - i);
    lo_ = mix(lo_ ^ w ^ 0x5555555555555555ULL);
    hi_ = mix(hi_ + w + 0x3333333333333333ULL);
  }
  length_ += num_bytes;
}

void ContentHasher::update(const std::string& text) {
  update_u64(text.size());
  update(text.data(), text.size());
}

void ContentHasher::update_u64(uint64_t value) { update(&value, sizeof value); }

void ContentHasher::update_double(double value) { update(&value, sizeof value); }

std::string ContentHasher::hex() const {
  const uint64_t a = mix(lo_ ^ mix(length_)), b = mix(hi_ ^ a ^ 0x2545f4914f6cdd1dULL);
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(a), static_cast<unsigned long long>(b));
  return buf;
}

}  // namespace lorakv::adapters
