// formats/bpe_tokenizer.h: GPT-2-style byte-level BPE (SmolLM2's tokenizer), built from a
// plain vocabulary (formats/tokenizer_gguf.h reads one from a GGUF file) and matching
// llama.cpp's tokenizer id for id: special tokens written in the text are cut out first
// (llama.cpp's tokenizer_st_partition), the rest is pre-tokenized (formats/pre_tokenizer.h),
// mapped byte -> GPT-2 codepoint and merged lowest merge rank first. Torch-free.
// A built BpeTokenizer is immutable: every const method is safe to call from many threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "lorakv/formats/pre_tokenizer.h"

namespace lorakv::formats {

// GGUF `tokenizer.ggml.token_type` values.
enum class TokenType : int32_t {
  kUndefined = 0, kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5,
  kByte = 6,
};

// Everything a tokenizer is built from, as stored in GGUF `tokenizer.*` keys.
struct TokenizerVocab {
  std::vector<std::string> tokens;   // token text, id = index (GPT-2 codepoints for normal ones)
  std::vector<int32_t> token_types;  // TokenType per token; empty = all normal
  std::vector<std::string> merges;   // "left right", rank = index
  int32_t bos_id = -1;               // -1: absent
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  bool add_bos = false;       // whether callers should prepend bos_id (encode never does)
  std::string pre;            // pre-tokenizer name, e.g. "smollm"
  std::string model;          // tokenizer model name, "gpt2"
  std::string chat_template;  // Jinja source; empty when absent
};

class BpeTokenizer {
 public:
  // Validates and indexes `vocab`. Throws TokenizerError for an unsupported model or
  // pre-tokenizer, empty or duplicate tokens, bad token types, special ids out of range,
  // merges that are not "left right" or whose parts or result are not tokens.
  explicit BpeTokenizer(TokenizerVocab vocab);

  // Text -> ids. With `parse_special`, control, user-defined and unknown-type tokens written
  // in the text become their ids; without it only user-defined ones do (as llama.cpp).
  // Never prepends BOS (see add_bos()). Invalid UTF-8 is tokenized as U+FFFD.
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;
  void encode(std::string_view text, bool parse_special, std::vector<int32_t>& out) const;

  // Ids -> bytes (usually UTF-8; a cut through a character is not repaired). Control and
  // unknown tokens render as their text when `render_special`, else as nothing.
  // Throws TokenizerError for an id outside [0, vocab_size()).
  std::string decode(const std::vector<int32_t>& ids, bool render_special = true) const;
  // The bytes one token decodes to (same rules as decode()).
  const std::string& token_piece(int32_t id, bool render_special = true) const;

  // The raw vocabulary string of `id` (GPT-2 codepoints for normal tokens: "ĠThe").
  const std::string& token_text(int32_t id) const;
  std::optional<int32_t> token_id(std::string_view text) const;
  TokenType token_type(int32_t id) const;
  bool is_special(int32_t id) const;  // control, user-defined or unknown type
  // Token of a byte's GPT-2 codepoint, or -1 when the vocabulary has none. encode() drops
  // such bytes, as llama.cpp does (SmolLM2 lacks 21: 0x04, 0x06, 0x13, 0x14, 0x16, 0x1D,
  // 0xC0, 0xC1, 0xF1, 0xF2, 0xF5..0xFF), so decode(encode(s)) == s only without them.
  int32_t byte_token(uint8_t byte) const { return byte_token_[byte]; }
  int32_t vocab_size() const { return static_cast<int32_t>(vocab_.tokens.size()); }

  int32_t bos_id() const { return vocab_.bos_id; }
  int32_t eos_id() const { return vocab_.eos_id; }
  int32_t unk_id() const { return vocab_.unk_id; }
  int32_t pad_id() const { return vocab_.pad_id; }
  bool add_bos() const { return vocab_.add_bos; }
  // The tokens that end a generation (llama.cpp's end-of-generation set): eos_id and every
  // control token spelled as an end of turn or of text ("<|im_end|>", "<|endoftext|>",
  // "<|eot_id|>", ...), ascending.
  const std::vector<int32_t>& end_of_generation_ids() const { return end_of_generation_; }
  const std::string& pre() const { return vocab_.pre; }
  const std::string& chat_template() const { return vocab_.chat_template; }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  struct Scratch;  // per-call working memory of encode()
  void check_id(int32_t id) const;
  void index_tokens();
  void index_merges();
  void bpe_word(std::string_view word, Scratch& scratch, std::vector<int32_t>& out) const;

  TokenizerVocab vocab_;
  PreTokenizer pre_tokenizer_ = PreTokenizer::kDigitsThenGpt2;
  std::unordered_map<std::string, int32_t> token_to_id_;
  std::unordered_map<uint64_t, Merge> merges_;   // (left id << 32 | right id) -> merge
  int32_t byte_token_[256] = {};                 // token of each byte's GPT-2 codepoint, or -1
  std::vector<int32_t> byte_fallback_[256];      // llama.cpp's ids when byte_token_ is -1
  std::vector<int32_t> special_ids_;             // longest text first
  std::vector<int32_t> end_of_generation_;       // end_of_generation_ids()
  std::vector<std::string> pieces_;              // decoded bytes per token
};

// Turns a stream of generated ids into valid UTF-8 text without splitting a character
// between feed() calls: feed() holds back a trailing multi-byte sequence that is valid so
// far but incomplete until the bytes that finish it arrive (utf8_complete_prefix); ill-formed
// bytes become U+FFFD (utf8_replace_invalid). flush() returns what is held back, a cut
// character as one U+FFFD. Concatenating every feed() and the final flush() gives
// utf8_replace_invalid(decode(ids)), what transformers' decode gives; decode() itself keeps
// the bytes (llama.cpp's detokenizer does). One decoder per stream; it keeps a reference to
// the tokenizer, which must outlive it.
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const BpeTokenizer& tokenizer, bool render_special = true)
      : tokenizer_(tokenizer), render_special_(render_special) {}

  std::string feed(int32_t id);  // throws TokenizerError for an out-of-range id
  std::string flush();           // what is held back (a cut character: U+FFFD); then empty
  void reset() { pending_.clear(); }
  size_t num_pending_bytes() const { return pending_.size(); }

 private:
  const BpeTokenizer& tokenizer_;
  bool render_special_;
  std::string pending_;
};

}  // namespace lorakv::formats
