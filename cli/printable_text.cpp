// cli/printable_text.cpp: escaping bytes for display.
#include "lorakv/cli/printable_text.h"

#include <cstdint>
#include <cstdio>

namespace lorakv::cli {
namespace {

// Length of the valid UTF-8 character (2 to 4 bytes) starting at `i`, or 0. Strict: no
// overlong forms, no surrogates, nothing above U+10FFFF.
size_t valid_multibyte_length(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t lead = byte(i);
  size_t n = 0;
  uint32_t cpt = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    n = 2, cpt = lead & 0x1Fu;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    n = 3, cpt = lead & 0x0Fu;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    n = 4, cpt = lead & 0x07u;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0u) != 0x80u) return 0;
    cpt = (cpt << 6) | (byte(i + k) & 0x3Fu);
  }
  const uint32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cpt < smallest[n] || cpt > 0x10FFFF || (cpt >= 0xD800 && cpt <= 0xDFFF)) return 0;
  return n;
}

}  // namespace

std::string printable_text(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<uint8_t>(s[i]);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
    } else if (const size_t n = c >= 0x80 ? valid_multibyte_length(s, i) : 0; n > 0) {
      out.append(s.substr(i, n));
      i += n;
      continue;
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02X", c);
      out += hex;
    }
    ++i;
  }
  return out;
}

}  // namespace lorakv::cli
