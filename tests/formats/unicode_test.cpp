// tests/formats/unicode_test.cpp: the UTF-8 codec, character classes, GPT-2 byte maps and
// the GPT-2 pre-tokenizer (formats/unicode.h, formats/pre_tokenizer.h).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "lorakv/formats/pre_tokenizer.h"
#include "lorakv/formats/unicode.h"

namespace lorakv::formats {
namespace {

std::vector<std::string> words(std::string_view text) {
  PreTokenized out;
  pre_tokenize(PreTokenizer::kDigitsThenGpt2, text, out);
  std::vector<std::string> result;
  uint32_t begin = 0;
  for (uint32_t end : out.word_ends) {
    result.push_back(out.bytes.substr(begin, end - begin));
    begin = end;
  }
  return result;
}

using Words = std::vector<std::string>;

TEST(Unicode, Gpt2ByteMapIsABijectionOntoPrintableCodepoints) {
  std::set<uint32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cpt = byte_to_gpt2_codepoint(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(cpt).second) << "byte " << b;
    EXPECT_EQ(gpt2_codepoint_to_byte(cpt), b);
    EXPECT_EQ(byte_to_gpt2_utf8(static_cast<uint8_t>(b)), codepoint_to_utf8(cpt));
  }
  EXPECT_EQ(byte_to_gpt2_codepoint(' '), 0x120u);   // 'Ġ'
  EXPECT_EQ(byte_to_gpt2_codepoint('\n'), 0x10Au);  // 'Ċ'
  EXPECT_EQ(byte_to_gpt2_codepoint('A'), uint32_t{'A'});
  EXPECT_EQ(byte_to_gpt2_codepoint(0xAD), 0x143u);  // the last moved byte
  EXPECT_EQ(gpt2_codepoint_to_byte(0x144), -1);
  EXPECT_EQ(gpt2_codepoint_to_byte(' '), -1);
}

TEST(Unicode, DecodesValidUtf8AndRoundTrips) {
  const std::vector<uint32_t> cpts = {0x41, 0xE9, 0x20AC, 0x1F600, 0x10FFFF, 0};
  std::string text;
  for (uint32_t c : cpts) append_utf8(text, c);
  EXPECT_EQ(text.size(), 1u + 2 + 3 + 4 + 4 + 1);
  EXPECT_EQ(utf8_to_codepoints(text), cpts);
}

TEST(Unicode, InvalidBytesBecomeReplacementCharactersLikeLlamaCpp) {
  // Stray continuation, truncated 3-byte sequence, bad continuation, 0xFF.
  EXPECT_EQ(utf8_to_codepoints("a\x80z"), (std::vector<uint32_t>{'a', kReplacementChar, 'z'}));
  EXPECT_EQ(utf8_to_codepoints("\xE2\x82"), (std::vector<uint32_t>{kReplacementChar, kReplacementChar}));
  EXPECT_EQ(utf8_to_codepoints("\xC3("), (std::vector<uint32_t>{kReplacementChar, '('}));
  EXPECT_EQ(utf8_to_codepoints("\xFF"), (std::vector<uint32_t>{kReplacementChar}));
  // llama.cpp accepts overlong forms and surrogates as they decode.
  EXPECT_EQ(utf8_to_codepoints(std::string("\xC0\x80", 2)), (std::vector<uint32_t>{0}));
  EXPECT_EQ(utf8_to_codepoints("\xED\xA0\x80"), (std::vector<uint32_t>{0xD800}));
  // Above U+10FFFF: invalid (llama.cpp would throw later).
  EXPECT_EQ(utf8_to_codepoints("\xF4\x90\x80\x80").front(), kReplacementChar);
}

TEST(Unicode, CompletePrefixHoldsBackOnlyAnUnfinishedSequence) {
  const std::string emoji = "\xF0\x9F\x98\x80";  // U+1F600
  EXPECT_EQ(utf8_complete_prefix("ab"), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab" + emoji.substr(0, 1)), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab" + emoji.substr(0, 3)), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab" + emoji), 6u);
  EXPECT_EQ(utf8_complete_prefix("a\x80"), 2u);      // invalid: never completes, pass it on
  EXPECT_EQ(utf8_complete_prefix("a\xFF"), 2u);
  EXPECT_EQ(utf8_complete_prefix("\xC3"), 0u);
  EXPECT_EQ(utf8_complete_prefix(""), 0u);
}

// Expected values from CPython 3.11's bytes.decode("utf-8", errors="replace"), which
// transformers' decode uses: one U+FFFD per maximal ill-formed subpart.
TEST(Unicode, ReplaceInvalidMatchesPythonsReplaceDecoding) {
  const std::string r = "\xEF\xBF\xBD";  // U+FFFD
  EXPECT_EQ(utf8_replace_invalid("\xe5\xb0"), r);              // a cut character
  EXPECT_EQ(utf8_replace_invalid("\xe1\x80"), r);
  EXPECT_EQ(utf8_replace_invalid("\xf1\x80\x80"), r);
  EXPECT_EQ(utf8_replace_invalid("\xf0\x9f\x90" "A"), r + "A");
  EXPECT_EQ(utf8_replace_invalid("\xe0\x80\xaf"), r + r + r);  // overlong
  EXPECT_EQ(utf8_replace_invalid("\xc0\xaf"), r + r);
  EXPECT_EQ(utf8_replace_invalid("\xed\xa0\x80"), r + r + r);  // a surrogate
  EXPECT_EQ(utf8_replace_invalid("\xf4\x90\x80\x80"), r + r + r + r);  // above U+10FFFF
  EXPECT_EQ(utf8_replace_invalid("\xc3("), r + "(");
  EXPECT_EQ(utf8_replace_invalid("a\x80" "b"), "a" + r + "b");
  EXPECT_EQ(utf8_replace_invalid("\xff"), r);
  // Well-formed text is kept byte for byte, at the edges of the ranges too.
  for (const std::string ok : {"\xf0\x9f\x98\x80", "\xe2\x82\xac", "\xed\x9f\xbf", "\xf4\x8f\xbf\xbf", "plain"}) {
    EXPECT_EQ(utf8_replace_invalid(ok), ok);
  }
}

TEST(Unicode, CharacterClassesFollowLlamaCppTables) {
  EXPECT_STREQ(unicode_tables_version(), "15.1.0");  // what llama.cpp's tables are built from
  EXPECT_EQ(char_class('a'), CharClass::kLetter);
  EXPECT_EQ(char_class(0x4E2D), CharClass::kLetter);   // 中
  EXPECT_EQ(char_class(0x2EBF0), CharClass::kLetter);  // CJK Extension I (Unicode 15.1)
  EXPECT_EQ(char_class('7'), CharClass::kNumber);
  EXPECT_EQ(char_class(0x663), CharClass::kNumber);    // Arabic-Indic three
  EXPECT_EQ(char_class(0xBD), CharClass::kNumber);     // ½ (No)
  EXPECT_EQ(char_class(0x216B), CharClass::kNumber);   // Ⅻ (Nl)
  EXPECT_EQ(char_class(' '), CharClass::kWhitespace);
  EXPECT_EQ(char_class(0x85), CharClass::kWhitespace);
  EXPECT_EQ(char_class(0x3000), CharClass::kWhitespace);
  EXPECT_EQ(char_class(0x1C), CharClass::kOther);      // isspace() in Python, not White_Space
  EXPECT_EQ(char_class(0x200B), CharClass::kOther);    // zero-width space is Cf
  EXPECT_EQ(char_class(0x301), CharClass::kOther);     // combining acute (Mn)
  EXPECT_EQ(char_class(0x378), CharClass::kOther);     // unassigned
  EXPECT_EQ(char_class(0x1F600), CharClass::kOther);
  EXPECT_TRUE(is_letter(0x10A0));
  EXPECT_TRUE(is_number(0x1D7D9));
  EXPECT_TRUE(is_whitespace('\t'));
}

TEST(PreTokenizer, KnowsItsNames) {
  PreTokenizer kind;
  EXPECT_TRUE(pre_tokenizer_from_name("smollm", &kind));
  EXPECT_TRUE(pre_tokenizer_from_name("starcoder", &kind));
  EXPECT_EQ(kind, PreTokenizer::kDigitsThenGpt2);
  EXPECT_TRUE(pre_tokenizer_from_name("gpt2", &kind));
  EXPECT_EQ(kind, PreTokenizer::kGpt2);
  EXPECT_FALSE(pre_tokenizer_from_name("llama3", &kind));
  EXPECT_EQ(supported_pre_tokenizer_names(), "smollm, starcoder, refact, command-r, gpt2");
}

TEST(PreTokenizer, Gpt2KindKeepsDigitRunsTogether) {
  PreTokenized out;
  pre_tokenize(PreTokenizer::kGpt2, "Hello world! 123", out);
  Words w;
  uint32_t start = 0;
  for (uint32_t end : out.word_ends) {
    w.push_back(out.bytes.substr(start, end - start));
    start = end;
  }
  EXPECT_EQ(w, (Words{"Hello", " world", "!", " 123"}));
}

TEST(PreTokenizer, SplitsEveryDigit) {
  EXPECT_EQ(words("Hello world! 123"), (Words{"Hello", " world", "!", " ", "1", "2", "3"}));
  EXPECT_EQ(words("abc123def"), (Words{"abc", "1", "2", "3", "def"}));
  EXPECT_EQ(words("x\xD9\xA3\xD9\xA4"), (Words{"x", "\xD9\xA3", "\xD9\xA4"}));  // ٣٤
  // Lookahead stops at a digit: the two spaces stay together (llama.cpp's chunking).
  EXPECT_EQ(words("a  1"), (Words{"a", "  ", "1"}));
}

TEST(PreTokenizer, MatchesGpt2Alternatives) {
  EXPECT_EQ(words("I'm don't we're"), (Words{"I", "'m", " don", "'t", " we", "'re"}));
  EXPECT_EQ(words("IT'S"), (Words{"IT", "'", "S"}));  // contractions are case-sensitive
  EXPECT_EQ(words("a, b...!"), (Words{"a", ",", " b", "...!"}));
  EXPECT_EQ(words("café naïve"), (Words{"café", " naïve"}));
  EXPECT_EQ(words("e\xCC\x81"), (Words{"e", "\xCC\x81"}));  // a combining mark is not \p{L}
}

TEST(PreTokenizer, WhitespaceKeepsItsLastCharacterForTheNextWord) {
  EXPECT_EQ(words("a   b"), (Words{"a", "  ", " b"}));
  EXPECT_EQ(words("a \n b"), (Words{"a", " \n", " b"}));
  EXPECT_EQ(words("end   "), (Words{"end", "   "}));
  EXPECT_EQ(words("\tx"), (Words{"\t", "x"}));
  EXPECT_EQ(words("a\xE3\x80\x80z"), (Words{"a", "\xE3\x80\x80", "z"}));  // U+3000
  EXPECT_EQ(words(""), Words{});
}

TEST(PreTokenizer, ReplacesInvalidUtf8) {
  EXPECT_EQ(words("a\xFF"), (Words{"a", "\xEF\xBF\xBD"}));
}

}  // namespace
}  // namespace lorakv::formats
