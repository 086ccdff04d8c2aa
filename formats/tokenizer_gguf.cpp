// formats/tokenizer_gguf.cpp: GGUF tokenizer metadata -> TokenizerVocab -> BpeTokenizer.
#include "lorakv/formats/tokenizer_gguf.h"

#include <limits>
#include <string>

#include "lorakv/common/errors.h"

namespace lorakv::formats {
namespace {

constexpr const char* kModelKey = "tokenizer.ggml.model";

void require_key(const GgufFile& file, const std::string& key, const std::string& what) {
  if (!file.has(key)) {
    throw TokenizerError("missing tokenizer metadata",
                         {file.path(), key, what, "no such key",
                          "the GGUF file was written without a tokenizer; re-convert it with one"});
  }
}

int32_t optional_id(const GgufFile& file, const std::string& key) {
  const std::optional<int64_t> id = file.find_int(key);
  if (!id) return -1;
  if (*id < 0 || *id > std::numeric_limits<int32_t>::max()) {
    throw TokenizerError("special token id out of range",
                         {file.path(), key, "a token id", std::to_string(*id), ""});
  }
  return static_cast<int32_t>(*id);
}

}  // namespace

TokenizerVocab vocab_from_gguf(const GgufFile& file) {
  TokenizerVocab vocab;
  require_key(file, kModelKey, "the tokenizer model name");
  vocab.model = file.get_string(kModelKey);
  if (vocab.model != "gpt2") {
    throw TokenizerError("unsupported tokenizer model",
                         {file.path(), kModelKey, "one of: gpt2", "'" + vocab.model + "'",
                          "lorakv implements GPT-2 style byte-level BPE only"});
  }
  vocab.pre = file.find_string("tokenizer.ggml.pre").value_or("");
  require_key(file, "tokenizer.ggml.tokens", "the token texts");
  vocab.tokens = file.get_string_array("tokenizer.ggml.tokens");
  if (file.has("tokenizer.ggml.token_type")) {
    const std::vector<int64_t> types = file.get_int_array("tokenizer.ggml.token_type");
    vocab.token_types.reserve(types.size());
    for (int64_t t : types) {
      const bool fits = t >= std::numeric_limits<int32_t>::min() && t <= std::numeric_limits<int32_t>::max();
      vocab.token_types.push_back(fits ? static_cast<int32_t>(t) : -1);  // -1 is rejected later
    }
  }
  require_key(file, "tokenizer.ggml.merges", "the BPE merges");
  vocab.merges = file.get_string_array("tokenizer.ggml.merges");
  vocab.bos_id = optional_id(file, "tokenizer.ggml.bos_token_id");
  vocab.eos_id = optional_id(file, "tokenizer.ggml.eos_token_id");
  vocab.unk_id = optional_id(file, "tokenizer.ggml.unknown_token_id");
  vocab.pad_id = optional_id(file, "tokenizer.ggml.padding_token_id");
  // SmolLM2's converter writes add_bos_token = false; absent means false for gpt2 vocabs.
  vocab.add_bos = file.find_bool("tokenizer.ggml.add_bos_token").value_or(false);
  vocab.chat_template = file.find_string("tokenizer.chat_template").value_or("");
  return vocab;
}

BpeTokenizer tokenizer_from_gguf(const GgufFile& file) {
  TokenizerVocab vocab = vocab_from_gguf(file);
  try {
    return BpeTokenizer(std::move(vocab));
  } catch (const TokenizerError& e) {
    ErrorContext context = e.context();
    context.file = file.path();
    throw TokenizerError(e.message(), std::move(context));
  }
}

}  // namespace lorakv::formats
