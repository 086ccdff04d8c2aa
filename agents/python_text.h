// agents/python_text.h: the few Python str operations that define the agentic QA tools and
// action parsing (tools/agentic_qa: str.strip(), str.split(), str.isdigit(), int()), on
// UTF-8 text, so the C++ tools write exactly what the Python writes. Whitespace, decimal
// and digit characters are Python 3.11's (Unicode 14.0). Bytes that are not valid UTF-8
// count as one character each that is neither space nor digit. Torch-free.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace lorakv::agents::python {

// One character of UTF-8 text: its code point and where its bytes are.
struct CodePoint {
  char32_t value = 0;
  size_t offset = 0, size = 0;
};
std::vector<CodePoint> code_points(std::string_view text);

bool is_space(char32_t c);        // str.isspace
int decimal_value(char32_t c);    // 0..9 for str.isdecimal characters, else -1
bool is_digit(char32_t c);        // str.isdigit: decimals and other digits (superscripts...)

std::string strip(std::string_view text);                // str.strip()
std::vector<std::string> split(std::string_view text);   // str.split()
bool is_digits(std::string_view text);                   // str.isdigit(): non-empty, all digits
std::string first_chars(std::string_view text, size_t n);  // text[:n]

}  // namespace lorakv::agents::python
