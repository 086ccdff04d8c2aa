// formats/unicode.h: the Unicode pieces the byte-level BPE tokenizer needs. UTF-8 decode
// (lenient, as llama.cpp's: a bad byte becomes U+FFFD and decoding goes on) and encode,
// the character classes of GPT-2's pre-tokenizer regex (\p{L}, \p{N}, \s; range tables
// generated into formats/unicode_tables.cpp) and GPT-2's bytes_to_unicode maps.
// Torch-free; every function is pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lorakv::formats {

inline constexpr uint32_t kReplacementChar = 0xFFFD;

// Byte length of the UTF-8 sequence that `lead` starts, from its high nibble alone
// (1 for ASCII and for stray continuation bytes, 2, 3 or 4), as llama.cpp counts it.
size_t utf8_sequence_length(uint8_t lead);

// Decodes one codepoint at `offset` and advances it. Mirrors llama.cpp: an invalid lead
// byte, a missing continuation byte or a truncated sequence yields U+FFFD and advances
// one byte. Overlong forms and surrogates are accepted as llama.cpp accepts them. A
// 4-byte form above U+10FFFF is treated as invalid (llama.cpp throws on it later).
uint32_t utf8_decode_one(std::string_view text, size_t& offset);
std::vector<uint32_t> utf8_to_codepoints(std::string_view text);

// Appends the UTF-8 encoding of `cpt` (<= 0x10FFFF; larger values append U+FFFD).
void append_utf8(std::string& out, uint32_t cpt);
std::string codepoint_to_utf8(uint32_t cpt);

// Length of the longest prefix of `bytes` that ends on a UTF-8 character boundary: only
// a trailing, so far valid but incomplete multi-byte sequence is cut off. Invalid bytes
// count as complete (they cannot become valid later).
size_t utf8_complete_prefix(std::string_view bytes);

// The character or ill-formed stretch starting at bytes[i] (i < size): a well-formed UTF-8
// sequence (Unicode Table 3-7: no overlong forms, no surrogates, nothing above U+10FFFF; an
// ASCII byte is one) and its length, or the length of the maximal ill-formed subpart there
// (the lead and the continuation bytes that could still follow it; at least 1).
struct Utf8Unit {
  size_t length = 1;
  bool well_formed = true;
};
Utf8Unit utf8_unit_at(std::string_view bytes, size_t i);

// `bytes` as valid UTF-8: well-formed sequences (Unicode Table 3-7: no overlong forms, no
// surrogates, nothing above U+10FFFF) as they are, and each maximal ill-formed subpart as
// one U+FFFD, as Python's bytes.decode("utf-8", errors="replace") (and so transformers'
// decode) does: "\xe5\xb0" (a cut character) is one U+FFFD, "\xed\xa0\x80" three.
std::string utf8_replace_invalid(std::string_view bytes);

// Character classes of the GPT-2 pre-tokenizer. They are disjoint; kOther is everything
// else, including unassigned codepoints.
enum class CharClass : uint8_t { kOther, kLetter, kNumber, kWhitespace };
CharClass char_class(uint32_t cpt);
bool is_letter(uint32_t cpt);      // \p{L}
bool is_number(uint32_t cpt);      // \p{N}
bool is_whitespace(uint32_t cpt);  // \s: the Unicode White_Space property
const char* unicode_tables_version();

// GPT-2 bytes_to_unicode: every byte maps to one printable codepoint (printable Latin-1
// bytes map to themselves, the other 68 to U+0100..U+0143 in byte order).
uint32_t byte_to_gpt2_codepoint(uint8_t byte);
const std::string& byte_to_gpt2_utf8(uint8_t byte);  // the same codepoint as UTF-8
// Inverse map; -1 when `cpt` is not one of the 256 GPT-2 byte codepoints.
int gpt2_codepoint_to_byte(uint32_t cpt);

namespace detail {
// Inclusive codepoint range; the tables are sorted and disjoint.
struct CodepointRange {
  uint32_t first;
  uint32_t last;
};
extern const char kUnicodeVersion[];
extern const CodepointRange kLetterRanges[];
extern const size_t kNumLetterRanges;
extern const CodepointRange kNumberRanges[];
extern const size_t kNumNumberRanges;
extern const CodepointRange kWhitespaceRanges[];
extern const size_t kNumWhitespaceRanges;
}  // namespace detail

}  // namespace lorakv::formats
