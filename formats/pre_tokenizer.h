// formats/pre_tokenizer.h: splits raw text into the words that byte-level BPE then merges
// one at a time. Mirrors llama.cpp's pre-tokenizer for `tokenizer.ggml.pre` = "smollm"
// (shared by starcoder, refact and command-r): every \p{N} codepoint becomes its own
// piece, then each remaining run is split by GPT-2's regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// with a hand-written matcher (no std::regex). Torch-free, stateless, thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lorakv::formats {

// The pre-tokenizers lorakv implements, by their GGUF `tokenizer.ggml.pre` names.
// kDigitsThenGpt2: SmolLM2's (every digit alone, then GPT-2's regex). kGpt2: GPT-2's
// regex alone (llama.cpp "gpt2"; a tokenizer.json with a bare ByteLevel pre-tokenizer).
enum class PreTokenizer : uint8_t { kDigitsThenGpt2, kGpt2 };

// Looks up a `tokenizer.ggml.pre` name; false when lorakv does not implement it.
bool pre_tokenizer_from_name(std::string_view name, PreTokenizer* out);
// "smollm, starcoder, refact, command-r": for error messages.
std::string supported_pre_tokenizer_names();

// The words of one text, concatenated. Invalid UTF-8 in the input has already been
// replaced by U+FFFD (llama.cpp does the same), so `bytes` can differ from the input.
struct PreTokenized {
  std::string bytes;                // the words, back to back, as UTF-8
  std::vector<uint32_t> word_ends;  // byte offset one past each word, ascending
};

// Splits `text` (special tokens already removed) into words; clears `out` first.
void pre_tokenize(PreTokenizer kind, std::string_view text, PreTokenized& out);

}  // namespace lorakv::formats
