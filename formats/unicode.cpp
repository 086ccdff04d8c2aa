// formats/unicode.cpp: UTF-8 codec, character-class lookups over the generated range
// tables and the GPT-2 byte <-> codepoint maps. See formats/unicode.h.
#include "lorakv/formats/unicode.h"

#include <algorithm>
#include <array>

namespace lorakv::formats {
namespace {

bool is_continuation(uint8_t byte) { return (byte & 0xC0) == 0x80; }

bool in_ranges(uint32_t cpt, const detail::CodepointRange* ranges, size_t count) {
  const detail::CodepointRange* end = ranges + count;
  // First range whose last >= cpt; cpt is inside iff that range also starts <= cpt.
  const auto* it = std::lower_bound(ranges, end, cpt, [](const detail::CodepointRange& r, uint32_t c) {
    return r.last < c;
  });
  return it != end && it->first <= cpt;
}

CharClass lookup_class(uint32_t cpt) {
  if (in_ranges(cpt, detail::kLetterRanges, detail::kNumLetterRanges)) return CharClass::kLetter;
  if (in_ranges(cpt, detail::kNumberRanges, detail::kNumNumberRanges)) return CharClass::kNumber;
  if (in_ranges(cpt, detail::kWhitespaceRanges, detail::kNumWhitespaceRanges)) {
    return CharClass::kWhitespace;
  }
  return CharClass::kOther;
}

// ASCII dominates real text: answer it from a table instead of three binary searches.
struct AsciiClasses {
  std::array<CharClass, 128> cls{};
  AsciiClasses() {
    for (uint32_t c = 0; c < 128; ++c) cls[c] = lookup_class(c);
  }
};

struct Gpt2ByteMaps {
  std::array<uint32_t, 256> to_cpt{};
  std::array<std::string, 256> to_utf8;
  std::array<int16_t, 324> from_cpt{};  // codepoints 0..323 cover every mapped value

  Gpt2ByteMaps() {
    from_cpt.fill(-1);
    // GPT-2 keeps '!'..'~', U+00A1..U+00AC and U+00AE..U+00FF as themselves and moves the
    // remaining bytes (controls, space, DEL, NBSP, soft hyphen) to 256, 257, ... in order.
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      to_cpt[b] = printable ? b : next++;
      to_utf8[b] = codepoint_to_utf8(to_cpt[b]);
      from_cpt[to_cpt[b]] = static_cast<int16_t>(b);
    }
  }
};

const Gpt2ByteMaps& gpt2_maps() {
  static const Gpt2ByteMaps maps;
  return maps;
}

}  // namespace

size_t utf8_sequence_length(uint8_t lead) {
  static constexpr size_t kLengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLengths[lead >> 4];
}

uint32_t utf8_decode_one(std::string_view text, size_t& offset) {
  const auto at = [&](size_t i) { return static_cast<uint8_t>(text[offset + i]); };
  const uint8_t lead = at(0);
  size_t len = 0;
  uint32_t cpt = 0;
  if (lead < 0x80) {
    ++offset;
    return lead;
  } else if ((lead & 0xE0) == 0xC0) {
    len = 2, cpt = lead & 0x1F;
  } else if ((lead & 0xF0) == 0xE0) {
    len = 3, cpt = lead & 0x0F;
  } else if ((lead & 0xF8) == 0xF0) {
    len = 4, cpt = lead & 0x07;
  }
  // len == 0: a stray continuation byte or 0xF8..0xFF.
  bool ok = len != 0 && offset + len <= text.size();
  for (size_t i = 1; ok && i < len; ++i) {
    ok = is_continuation(at(i));
    cpt = (cpt << 6) | (at(i) & 0x3F);
  }
  if (!ok || cpt > 0x10FFFF) {
    ++offset;
    return kReplacementChar;
  }
  offset += len;
  return cpt;
}

std::vector<uint32_t> utf8_to_codepoints(std::string_view text) {
  std::vector<uint32_t> cpts;
  cpts.reserve(text.size());
  for (size_t offset = 0; offset < text.size();) cpts.push_back(utf8_decode_one(text, offset));
  return cpts;
}

void append_utf8(std::string& out, uint32_t cpt) {
  if (cpt <= 0x7F) {
    out.push_back(static_cast<char>(cpt));
  } else if (cpt <= 0x7FF) {
    out.push_back(static_cast<char>(0xC0 | (cpt >> 6)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt <= 0xFFFF) {
    out.push_back(static_cast<char>(0xE0 | (cpt >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt <= 0x10FFFF) {
    out.push_back(static_cast<char>(0xF0 | (cpt >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else {
    append_utf8(out, kReplacementChar);
  }
}

std::string codepoint_to_utf8(uint32_t cpt) {
  std::string out;
  append_utf8(out, cpt);
  return out;
}

size_t utf8_complete_prefix(std::string_view bytes) {
  // A held-back tail is at most 3 bytes: a lead byte plus fewer continuations than it needs.
  const size_t n = bytes.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto byte = static_cast<uint8_t>(bytes[n - back]);
    if (is_continuation(byte)) continue;
    size_t need = 0;
    if ((byte & 0xE0) == 0xC0) need = 2;
    else if ((byte & 0xF0) == 0xE0) need = 3;
    else if ((byte & 0xF8) == 0xF0) need = 4;
    return need > back ? n - back : n;
  }
  return n;
}

Utf8Unit utf8_unit_at(std::string_view s, size_t i) {
  const auto lead = static_cast<uint8_t>(s[i]);
  if (lead < 0x80) return {1, true};
  // The sequence's length and its second byte's range (Table 3-7); later bytes 80..BF.
  size_t n = 0;
  uint8_t low = 0x80, high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    n = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    n = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    n = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return {1, false};
  }
  size_t good = 1;  // bytes of a well-formed prefix of the sequence
  while (good < n && i + good < s.size()) {
    const auto b = static_cast<uint8_t>(s[i + good]);
    if (good == 1 ? (b < low || b > high) : (b < 0x80 || b > 0xBF)) break;
    ++good;
  }
  return {good, good == n};
}

std::string utf8_replace_invalid(std::string_view s) {
  static const std::string kReplacement = codepoint_to_utf8(kReplacementChar);
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const Utf8Unit u = utf8_unit_at(s, i);
    if (u.well_formed) {
      out.append(s.substr(i, u.length));
    } else {
      out += kReplacement;  // one per maximal ill-formed subpart
    }
    i += u.length;
  }
  return out;
}

CharClass char_class(uint32_t cpt) {
  static const AsciiClasses ascii;
  return cpt < 128 ? ascii.cls[cpt] : lookup_class(cpt);
}

bool is_letter(uint32_t cpt) { return char_class(cpt) == CharClass::kLetter; }
bool is_number(uint32_t cpt) { return char_class(cpt) == CharClass::kNumber; }
bool is_whitespace(uint32_t cpt) { return char_class(cpt) == CharClass::kWhitespace; }
const char* unicode_tables_version() { return detail::kUnicodeVersion; }

uint32_t byte_to_gpt2_codepoint(uint8_t byte) { return gpt2_maps().to_cpt[byte]; }
const std::string& byte_to_gpt2_utf8(uint8_t byte) { return gpt2_maps().to_utf8[byte]; }

int gpt2_codepoint_to_byte(uint32_t cpt) {
  const auto& from = gpt2_maps().from_cpt;
  return cpt < from.size() ? from[cpt] : -1;
}

}  // namespace lorakv::formats
