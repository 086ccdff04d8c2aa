// cli/printable_text.cpp: escaping bytes for display.
#include "lorakv/cli/printable_text.h"

#include <cstdint>
#include <cstdio>

#include "lorakv/formats/unicode.h"

namespace lorakv::cli {
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
    } else if (const formats::Utf8Unit u = formats::utf8_unit_at(s, i); c >= 0x80 && u.well_formed) {
      out.append(s.substr(i, u.length));
      i += u.length;
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
