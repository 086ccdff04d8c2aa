// formats/tokenizer_json.h: a Hugging Face `tokenizer.json` (byte-level BPE) as a
// TokenizerVocab, so HF checkpoints tokenize with the same BpeTokenizer as GGUF files.
// Supported: model.type "BPE" with a ByteLevel pre-tokenizer, optionally preceded by
// Digits(individual_digits) (SmolLM2's); anything else is refused with a TokenizerError.
#pragma once

#include <string>

#include "lorakv/formats/bpe_tokenizer.h"

namespace lorakv::formats {

// Reads `path` (a tokenizer.json). Added tokens marked special become control tokens,
// the others user-defined. Throws TokenizerError / ConfigError naming the file and key.
TokenizerVocab vocab_from_tokenizer_json(const std::string& path);

}  // namespace lorakv::formats
