// formats/tokenizer_gguf.h: reads a tokenizer vocabulary from GGUF `tokenizer.*` metadata
// (ggml docs/gguf.md, "Tokenizer") and builds a BpeTokenizer from it. Torch-free.
#pragma once

#include "lorakv/formats/bpe_tokenizer.h"
#include "lorakv/formats/gguf_file.h"

namespace lorakv::formats {

// Reads tokenizer.ggml.{model, pre, tokens, token_type, merges, bos_token_id, eos_token_id,
// unknown_token_id, padding_token_id, add_bos_token} and tokenizer.chat_template. Throws
// TokenizerError (naming the file and key) when the model is not "gpt2" or a required key
// (model, tokens, merges) is missing, ModelLoadError when a key has the wrong type.
TokenizerVocab vocab_from_gguf(const GgufFile& file);

// vocab_from_gguf + BpeTokenizer, with the file's path added to any TokenizerError.
BpeTokenizer tokenizer_from_gguf(const GgufFile& file);

}  // namespace lorakv::formats
