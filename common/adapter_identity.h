// common/adapter_identity.h: the identity of what an adapter adds to the base model's
// output: a SHA-256 digest over everything that determines it (adapters/adapter.h says
// exactly what), and over nothing else (not its name, path, format or load time). Equal
// identities mean equal output, so whatever is computed on an adapter's behalf (cached
// rows) is shared by every adapter with that identity, across loads, registries and
// processes; any change to the content gives a new identity. A shared-A group (adapters
// whose A for one layer and module is byte-equal) has an identity of the same type.
// The all-zero digest stands for the base model with no adapter. Torch-free, so cache/
// keys its rows by it without knowing adapters/.
#pragma once

#include <cstddef>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>

#include "lorakv/common/sha256.h"

namespace lorakv {

struct AdapterIdentity {
  Sha256Digest digest{};  // all zero: the base model

  static AdapterIdentity base_model() { return {}; }
  bool is_base_model() const;
  std::string hex() const;  // 64 lowercase hex digits
  // The identity `hex()` printed (a saved session's), or nullopt unless `text` is exactly
  // 64 hex digits.
  static std::optional<AdapterIdentity> from_hex(const std::string& text);

  friend bool operator==(const AdapterIdentity& a, const AdapterIdentity& b) { return a.digest == b.digest; }
  friend bool operator!=(const AdapterIdentity& a, const AdapterIdentity& b) { return a.digest != b.digest; }
  friend bool operator<(const AdapterIdentity& a, const AdapterIdentity& b) { return a.digest < b.digest; }
};

std::ostream& operator<<(std::ostream& os, const AdapterIdentity& id);  // hex(); "base-model" for zero

}  // namespace lorakv

template <>
struct std::hash<lorakv::AdapterIdentity> {
  size_t operator()(const lorakv::AdapterIdentity& id) const noexcept;
};
