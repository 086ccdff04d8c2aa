// cli/printable_text.h: bytes shown on one line as readable, unambiguous text: a token's
// piece in --logprobs, which may be a newline or half of a UTF-8 character.
#pragma once

#include <string>
#include <string_view>

namespace lorakv::cli {

// Printable ASCII and whole, valid UTF-8 characters as they are; a backslash, newline, tab
// and carriage return as \\, \n, \t and \r; every other byte (controls, DEL, a byte of an
// invalid or cut UTF-8 sequence) as \xNN. The result is valid UTF-8 without ASCII control
// characters, and different bytes give different text.
std::string printable_text(std::string_view bytes);

}  // namespace lorakv::cli
