// agents/python_text.cpp: Python's str.strip/split/isdigit on UTF-8 text. The tables are
// Python 3.11's (unicodedata 14.0.0), printed by:
//   [c for c in range(0x110000) if chr(c).isdecimal() and unicodedata.decimal(chr(c)) == 0]
//   ranges of [c for c in range(0x110000) if chr(c).isdigit() and not chr(c).isdecimal()]
#include "lorakv/agents/python_text.h"

#include <algorithm>
#include <iterator>

namespace lorakv::agents::python {
namespace {

constexpr char32_t kNotUtf8 = 0xFFFFFFFF;  // an invalid byte: neither space nor digit

// Every decimal digit zero; each starts a run of ten, zero to nine.
constexpr char32_t kDecimalZeros[] = {
    0x30,    0x660,   0x6f0,   0x7c0,   0x966,   0x9e6,   0xa66,   0xae6,   0xb66,   0xbe6,   0xc66,
    0xce6,   0xd66,   0xde6,   0xe50,   0xed0,   0xf20,   0x1040,  0x1090,  0x17e0,  0x1810,  0x1946,
    0x19d0,  0x1a80,  0x1a90,  0x1b50,  0x1bb0,  0x1c40,  0x1c50,  0xa620,  0xa8d0,  0xa900,  0xa9d0,
    0xa9f0,  0xaa50,  0xabf0,  0xff10,  0x104a0, 0x10d30, 0x11066, 0x110f0, 0x11136, 0x111d0, 0x112f0,
    0x11450, 0x114d0, 0x11650, 0x116c0, 0x11730, 0x118e0, 0x11950, 0x11c50, 0x11d50, 0x11da0, 0x16a60,
    0x16ac0, 0x16b50, 0x1d7ce, 0x1d7d8, 0x1d7e2, 0x1d7ec, 0x1d7f6, 0x1e140, 0x1e2f0, 0x1e950, 0x1fbf0};

// Digits that are not decimals (superscripts, circled digits...): isdigit() but not int().
constexpr char32_t kOtherDigits[][2] = {
    {0xb2, 0xb3},       {0xb9, 0xb9},       {0x1369, 0x1371},   {0x19da, 0x19da},   {0x2070, 0x2070},
    {0x2074, 0x2079},   {0x2080, 0x2089},   {0x2460, 0x2468},   {0x2474, 0x247c},   {0x2488, 0x2490},
    {0x24ea, 0x24ea},   {0x24f5, 0x24fd},   {0x24ff, 0x24ff},   {0x2776, 0x277e},   {0x2780, 0x2788},
    {0x278a, 0x2792},   {0x10a40, 0x10a43}, {0x10e60, 0x10e68}, {0x11052, 0x1105a}, {0x1f100, 0x1f10a}};

// The length of a valid UTF-8 sequence starting at text[i] and its code point; 0 if invalid.
size_t decode_one(std::string_view text, size_t i, char32_t& out) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) {
    out = lead;
    return 1;
  }
  size_t size = 0;
  char32_t value = 0, min = 0;
  if ((lead & 0xE0) == 0xC0) {
    size = 2, value = lead & 0x1F, min = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    size = 3, value = lead & 0x0F, min = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    size = 4, value = lead & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + size > text.size()) return 0;
  for (size_t k = 1; k < size; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    value = (value << 6) | (byte(i + k) & 0x3F);
  }
  if (value < min || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) return 0;
  out = value;
  return size;
}

}  // namespace

std::vector<CodePoint> code_points(std::string_view text) {
  std::vector<CodePoint> out;
  for (size_t i = 0; i < text.size();) {
    char32_t value = kNotUtf8;
    size_t size = decode_one(text, i, value);
    if (size == 0) size = 1, value = kNotUtf8;
    out.push_back({value, i, size});
    i += size;
  }
  return out;
}

bool is_space(char32_t c) {
  if (c <= 0x7F) return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

int decimal_value(char32_t c) {
  const char32_t* after = std::upper_bound(std::begin(kDecimalZeros), std::end(kDecimalZeros), c);
  if (after == std::begin(kDecimalZeros)) return -1;
  const char32_t offset = c - *(after - 1);
  return offset < 10 ? static_cast<int>(offset) : -1;
}

bool is_digit(char32_t c) {
  if (decimal_value(c) >= 0) return true;
  return std::any_of(std::begin(kOtherDigits), std::end(kOtherDigits),
                     [c](const char32_t(&range)[2]) { return c >= range[0] && c <= range[1]; });
}

std::string strip(std::string_view text) {
  const std::vector<CodePoint> cps = code_points(text);
  size_t first = 0, last = cps.size();
  while (first < last && is_space(cps[first].value)) ++first;
  while (last > first && is_space(cps[last - 1].value)) --last;
  if (first == last) return "";
  const size_t begin = cps[first].offset, end = cps[last - 1].offset + cps[last - 1].size;
  return std::string(text.substr(begin, end - begin));
}

std::vector<std::string> split(std::string_view text) {
  std::vector<std::string> parts;
  bool in_word = false;
  size_t word_begin = 0;
  for (const CodePoint& cp : code_points(text)) {
    if (is_space(cp.value)) {
      if (in_word) parts.emplace_back(text.substr(word_begin, cp.offset - word_begin));
      in_word = false;
    } else if (!in_word) {
      in_word = true;
      word_begin = cp.offset;
    }
  }
  if (in_word) parts.emplace_back(text.substr(word_begin));
  return parts;
}

bool is_digits(std::string_view text) {
  const std::vector<CodePoint> cps = code_points(text);
  return !cps.empty() && std::all_of(cps.begin(), cps.end(), [](const CodePoint& cp) { return is_digit(cp.value); });
}

std::string first_chars(std::string_view text, size_t n) {
  const std::vector<CodePoint> cps = code_points(text);
  if (cps.size() <= n) return std::string(text);
  return std::string(text.substr(0, cps[n].offset));
}

}  // namespace lorakv::agents::python
