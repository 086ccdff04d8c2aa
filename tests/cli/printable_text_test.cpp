// tests/cli/printable_text_test.cpp: token pieces shown as text (--logprobs): whole UTF-8
// characters as they are, controls and broken bytes escaped, nothing ambiguous.
#include <gtest/gtest.h>

#include <string>

#include "lorakv/cli/printable_text.h"

namespace lorakv::cli {
namespace {

TEST(PrintableText, KeepsTextAndEscapesTheRest) {
  EXPECT_EQ(printable_text(" Paris"), " Paris");
  EXPECT_EQ(printable_text("\n\n"), "\\n\\n");
  EXPECT_EQ(printable_text("a\tb\r"), "a\\tb\\r");
  EXPECT_EQ(printable_text("C:\\n"), "C:\\\\n");  // a backslash then n, not a newline
  EXPECT_EQ(printable_text(std::string("\0\x1f\x7f", 3)), "\\x00\\x1F\\x7F");
  EXPECT_EQ(printable_text("caf\xc3\xa9"), "caf\xc3\xa9");                  // é, two bytes
  EXPECT_EQ(printable_text("\xe2\x82\xac"), "\xe2\x82\xac");                // €, three bytes
  EXPECT_EQ(printable_text("\xf0\x9f\x90\x89"), "\xf0\x9f\x90\x89");        // 🐉, four bytes
}

// A token may hold part of a character: its bytes are shown, not dropped or replaced.
TEST(PrintableText, EscapesBytesOfBrokenOrForbiddenSequences) {
  EXPECT_EQ(printable_text("\xf0\x9f"), "\\xF0\\x9F");          // a cut four-byte character
  EXPECT_EQ(printable_text("\x90\x89"), "\\x90\\x89");          // its tail alone
  EXPECT_EQ(printable_text("\xc0\xaf"), "\\xC0\\xAF");          // overlong '/'
  EXPECT_EQ(printable_text("\xe0\x80\xaf"), "\\xE0\\x80\\xAF");  // overlong in three bytes
  EXPECT_EQ(printable_text("\xed\xb2\x80"), "\\xED\\xB2\\x80");  // a surrogate (U+DC80)
  EXPECT_EQ(printable_text("\xf4\x90\x80\x80"), "\\xF4\\x90\\x80\\x80");  // above U+10FFFF
  EXPECT_EQ(printable_text("a\xc3"), "a\\xC3");
}

}  // namespace
}  // namespace lorakv::cli
