// common/adapter_identity.cpp: printing, parsing and hashing of adapter identities.
#include "lorakv/common/adapter_identity.h"

#include <algorithm>
#include <cstring>
#include <ostream>

namespace lorakv {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

bool AdapterIdentity::is_base_model() const {
  return std::all_of(digest.begin(), digest.end(), [](uint8_t b) { return b == 0; });
}

std::string AdapterIdentity::hex() const { return digest_hex(digest); }

std::optional<AdapterIdentity> AdapterIdentity::from_hex(const std::string& text) {
  AdapterIdentity id;
  if (text.size() != 2 * id.digest.size()) return std::nullopt;
  for (size_t i = 0; i < id.digest.size(); ++i) {
    const int hi = hex_value(text[2 * i]), lo = hex_value(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    id.digest[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return id;
}

std::ostream& operator<<(std::ostream& os, const AdapterIdentity& id) {
  return os << (id.is_base_model() ? std::string("base-model") : id.hex());
}

}  // namespace lorakv

size_t std::hash<lorakv::AdapterIdentity>::operator()(const lorakv::AdapterIdentity& id) const noexcept {
  // Real identities are SHA-256 digests, so any word would do; folding all four keeps
  // hand-made test identities that differ in any byte apart too.
  uint64_t h = 0;
  for (size_t i = 0; i < id.digest.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, id.digest.data() + i, 8);
    h = (h ^ w) * 0x9e3779b97f4a7c15ULL;
    h ^= h >> 29;
  }
  return static_cast<size_t>(h);
}
