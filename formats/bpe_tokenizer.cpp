// formats/bpe_tokenizer.cpp: vocabulary validation and indexing, special-token partition,
// the BPE merge loop, decoding and the streaming decoder. See formats/bpe_tokenizer.h.
// Behaviour follows llama.cpp's llm_tokenizer_bpe_session (src/llama-vocab.cpp).
#include "lorakv/formats/bpe_tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <queue>

#include "lorakv/common/errors.h"
#include "lorakv/formats/unicode.h"

namespace lorakv::formats {
namespace {

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

bool is_special_type(TokenType type) {
  return type == TokenType::kControl || type == TokenType::kUserDefined || type == TokenType::kUnknown;
}

// llama.cpp renders a normal token by mapping each GPT-2 codepoint back to its byte; a
// codepoint outside the map becomes this marker instead of being dropped.
std::string decode_normal_token(const std::string& text) {
  std::string bytes;
  for (uint32_t cpt : utf8_to_codepoints(text)) {
    const int byte = gpt2_codepoint_to_byte(cpt);
    if (byte >= 0) {
      bytes.push_back(static_cast<char>(byte));
      continue;
    }
    bytes += "[UNK_BYTE_0x";
    char hex[3];
    for (char c : codepoint_to_utf8(cpt)) {
      std::snprintf(hex, sizeof(hex), "%02x", static_cast<unsigned>(static_cast<uint8_t>(c)));
      bytes += hex;
    }
    bytes += text + "]";
  }
  return bytes;
}

// A byte token's text is "<0xXX>" (llama.cpp reads the two hex digits).
std::string decode_byte_token(const std::string& text) {
  if (text.size() < 5) return {};
  return std::string(1, static_cast<char>(std::strtol(text.substr(3, 2).c_str(), nullptr, 16)));
}

// One piece of input text: raw text still to tokenize, or a special token cut out of it.
struct Fragment {
  int32_t token;  // -1: raw text
  size_t offset;
  size_t length;
};

}  // namespace

struct BpeTokenizer::Scratch {
  struct Symbol {
    int32_t id;    // token id, or -1 for a byte whose GPT-2 codepoint is not a token
    int32_t prev;  // neighbour symbols in the word, -1 at the ends
    int32_t next;
    uint8_t byte;  // the byte of an unmerged symbol (for the -1 fallback)
  };
  struct Candidate {
    int32_t rank;
    int32_t left;
    int32_t right;
    int32_t left_id;
    int32_t right_id;
    int32_t result;
    // Lowest rank first; among equal ranks the leftmost pair (llama.cpp's order).
    bool operator<(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::vector<Symbol> symbols;
  std::priority_queue<Candidate> queue;
  std::vector<Fragment> fragments;
  std::vector<Fragment> next_fragments;
  PreTokenized words;
};

BpeTokenizer::BpeTokenizer(TokenizerVocab vocab) : vocab_(std::move(vocab)) {
  if (vocab_.model != "gpt2") {
    throw TokenizerError("unsupported tokenizer model",
                         {"", "tokenizer.ggml.model", "one of: gpt2", "'" + vocab_.model + "'",
                          "lorakv implements GPT-2 style byte-level BPE only"});
  }
  if (!pre_tokenizer_from_name(vocab_.pre, &pre_tokenizer_)) {
    throw TokenizerError("unsupported pre-tokenizer",
                         {"", "tokenizer.ggml.pre", "one of: " + supported_pre_tokenizer_names(),
                          "'" + vocab_.pre + "'", ""});
  }
  index_tokens();
  index_merges();
}

void BpeTokenizer::index_tokens() {
  const size_t n = vocab_.tokens.size();
  if (n == 0 || n > 0x7FFFFFFF) {
    throw TokenizerError("vocabulary size out of range",
                         {"", "tokenizer.ggml.tokens", "1..2^31-1 tokens", std::to_string(n), ""});
  }
  if (vocab_.token_types.empty()) vocab_.token_types.assign(n, static_cast<int32_t>(TokenType::kNormal));
  if (vocab_.token_types.size() != n) {
    throw TokenizerError("token type count differs from token count",
                         {"", "tokenizer.ggml.token_type", std::to_string(n) + " entries",
                          std::to_string(vocab_.token_types.size()), ""});
  }
  token_to_id_.reserve(n);
  pieces_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& text = vocab_.tokens[i];
    const int32_t type = vocab_.token_types[i];
    const std::string where = "token " + std::to_string(i);
    if (text.empty()) {
      throw TokenizerError("empty token text", {"", "tokenizer.ggml.tokens", "non-empty text", where, ""});
    }
    if (type < 0 || type > static_cast<int32_t>(TokenType::kByte)) {
      throw TokenizerError("bad token type", {"", "tokenizer.ggml.token_type", "0..6",
                                              std::to_string(type) + " at " + where, ""});
    }
    if (!token_to_id_.emplace(text, static_cast<int32_t>(i)).second) {
      throw TokenizerError("duplicate token text", {"", "tokenizer.ggml.tokens", "unique texts",
                                                    "'" + text + "' again at " + where, ""});
    }
    switch (static_cast<TokenType>(type)) {
      case TokenType::kNormal: pieces_[i] = decode_normal_token(text); break;
      case TokenType::kControl:
      case TokenType::kUnknown:
      case TokenType::kUserDefined: pieces_[i] = text; break;
      case TokenType::kByte: pieces_[i] = decode_byte_token(text); break;
      default: break;  // unused and undefined tokens render as nothing (llama.cpp)
    }
    if (is_special_type(static_cast<TokenType>(type))) special_ids_.push_back(static_cast<int32_t>(i));
  }
  // Longest first, so a special token that contains a shorter one wins.
  std::stable_sort(special_ids_.begin(), special_ids_.end(), [&](int32_t a, int32_t b) {
    return vocab_.tokens[a].size() > vocab_.tokens[b].size();
  });
  const std::pair<const char*, int32_t> ids[] = {{"tokenizer.ggml.bos_token_id", vocab_.bos_id},
                                                 {"tokenizer.ggml.eos_token_id", vocab_.eos_id},
                                                 {"tokenizer.ggml.unknown_token_id", vocab_.unk_id},
                                                 {"tokenizer.ggml.padding_token_id", vocab_.pad_id}};
  for (const auto& [key, id] : ids) {
    if (id < -1 || id >= static_cast<int32_t>(n)) {
      throw TokenizerError("special token id out of range",
                           {"", key, "-1 (absent) or 0.." + std::to_string(n - 1), std::to_string(id), ""});
    }
  }
  // llama.cpp's end-of-generation spellings (llama-vocab.cpp, special_eog_ids), control
  // tokens only, so a normal token that happens to read "<|end|>" never ends a reply.
  for (const char* spelling : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>",
                               "<|eom_id|>", "<｜end▁of▁sentence｜>"}) {
    const auto it = token_to_id_.find(spelling);
    if (it != token_to_id_.end() && token_type(it->second) == TokenType::kControl) {
      end_of_generation_.push_back(it->second);
    }
  }
  if (vocab_.eos_id >= 0) end_of_generation_.push_back(vocab_.eos_id);
  std::sort(end_of_generation_.begin(), end_of_generation_.end());
  end_of_generation_.erase(std::unique(end_of_generation_.begin(), end_of_generation_.end()), end_of_generation_.end());
  for (int b = 0; b < 256; ++b) {
    const auto it = token_to_id_.find(byte_to_gpt2_utf8(static_cast<uint8_t>(b)));
    byte_token_[b] = it == token_to_id_.end() ? -1 : it->second;
    // llama.cpp's last resort for a symbol that is not a token: each byte of its text
    // looked up as a one-byte token (found only for printable ASCII, in practice).
    for (char c : byte_to_gpt2_utf8(static_cast<uint8_t>(b))) {
      const auto one = token_to_id_.find(std::string(1, c));
      if (one != token_to_id_.end()) byte_fallback_[b].push_back(one->second);
    }
  }
}

void BpeTokenizer::index_merges() {
  merges_.reserve(vocab_.merges.size());
  for (size_t rank = 0; rank < vocab_.merges.size(); ++rank) {
    const std::string& merge = vocab_.merges[rank];
    const std::string where = "merge " + std::to_string(rank) + " '" + merge + "'";
    // llama.cpp splits at the first space after the first byte.
    const size_t space = merge.find(' ', 1);
    if (space == std::string::npos) {
      throw TokenizerError("malformed merge", {"", "tokenizer.ggml.merges", "'left right'", where, ""});
    }
    const std::string left = merge.substr(0, space);
    const std::string right = merge.substr(space + 1);
    const auto l = token_to_id_.find(left);
    const auto r = token_to_id_.find(right);
    const auto m = token_to_id_.find(left + right);
    const auto* missing = l == token_to_id_.end() ? &left : r == token_to_id_.end() ? &right : nullptr;
    if (missing == nullptr && m == token_to_id_.end()) missing = &merge;
    if (missing != nullptr) {
      throw TokenizerError("merge references an unknown token",
                           {"", "tokenizer.ggml.merges", "parts and result in tokenizer.ggml.tokens",
                            where + " needs '" + (missing == &merge ? left + right : *missing) + "'",
                            "the merges do not belong to this vocabulary"});
    }
    // A repeated pair keeps its first (lowest) rank, as llama.cpp's map emplace does.
    merges_.emplace(pair_key(l->second, r->second), Merge{static_cast<int32_t>(rank), m->second});
  }
}

void BpeTokenizer::bpe_word(std::string_view word, Scratch& s, std::vector<int32_t>& out) const {
  auto& symbols = s.symbols;
  symbols.clear();
  for (size_t i = 0; i < word.size(); ++i) {
    const auto byte = static_cast<uint8_t>(word[i]);
    symbols.push_back({byte_token_[byte], static_cast<int32_t>(i) - 1,
                       i + 1 < word.size() ? static_cast<int32_t>(i + 1) : -1, byte});
  }
  const auto push_pair = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const int32_t lid = symbols[left].id, rid = symbols[right].id;
    if (lid < 0 || rid < 0) return;
    const auto it = merges_.find(pair_key(lid, rid));
    if (it != merges_.end()) s.queue.push({it->second.rank, left, right, lid, rid, it->second.result});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push_pair(i, i + 1);

  while (!s.queue.empty()) {
    const Scratch::Candidate c = s.queue.top();
    s.queue.pop();
    auto& left = symbols[c.left];
    auto& right = symbols[c.right];
    // Stale if either side was merged since (ids change, or right was absorbed).
    if (left.id != c.left_id || right.id != c.right_id || left.next != c.right) continue;
    left.id = c.result;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    right.id = -2;  // absorbed
    right.next = right.prev = -1;
    push_pair(left.prev, c.left);
    push_pair(c.left, left.next);
  }
  for (int32_t i = 0; i >= 0 && i < static_cast<int32_t>(symbols.size()); i = symbols[i].next) {
    const auto& sym = symbols[i];
    if (sym.id >= 0) {
      out.push_back(sym.id);
    } else {
      out.insert(out.end(), byte_fallback_[sym.byte].begin(), byte_fallback_[sym.byte].end());
    }
  }
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool parse_special) const {
  std::vector<int32_t> ids;
  encode(text, parse_special, ids);
  return ids;
}

void BpeTokenizer::encode(std::string_view text, bool parse_special, std::vector<int32_t>& out) const {
  Scratch s;
  auto& frags = s.fragments;
  if (!text.empty()) frags.push_back({-1, 0, text.size()});
  // Cut special tokens out of the raw fragments, longest token first, each one over the
  // whole text before the next (llama.cpp's tokenizer_st_partition).
  for (int32_t id : special_ids_) {
    const auto type = static_cast<TokenType>(vocab_.token_types[id]);
    if (!parse_special && type != TokenType::kUserDefined) continue;
    const std::string& special = vocab_.tokens[id];
    if (text.find(special) == std::string_view::npos) continue;
    s.next_fragments.clear();
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        s.next_fragments.push_back(f);
        continue;
      }
      const size_t end = f.offset + f.length;
      const std::string_view window = text.substr(0, end);
      size_t pos = f.offset;
      for (size_t m = window.find(special, pos); m != std::string_view::npos; m = window.find(special, pos)) {
        if (m > pos) s.next_fragments.push_back({-1, pos, m - pos});
        s.next_fragments.push_back({id, m, special.size()});
        pos = m + special.size();
      }
      if (pos < end) s.next_fragments.push_back({-1, pos, end - pos});
    }
    std::swap(frags, s.next_fragments);
  }

  for (const Fragment& f : frags) {
    if (f.token >= 0) {
      out.push_back(f.token);
      continue;
    }
    pre_tokenize(pre_tokenizer_, text.substr(f.offset, f.length), s.words);
    uint32_t begin = 0;
    for (uint32_t end : s.words.word_ends) {
      const std::string_view word(s.words.bytes.data() + begin, end - begin);
      if (word.size() == 1 && byte_token_[static_cast<uint8_t>(word[0])] >= 0) {
        out.push_back(byte_token_[static_cast<uint8_t>(word[0])]);  // nothing to merge
      } else {
        bpe_word(word, s, out);
      }
      begin = end;
    }
  }
}

void BpeTokenizer::check_id(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw TokenizerError("token id out of range",
                         {"", "", "0.." + std::to_string(vocab_size() - 1), std::to_string(id), ""});
  }
}

const std::string& BpeTokenizer::token_piece(int32_t id, bool render_special) const {
  static const std::string kEmpty;
  check_id(id);
  const auto type = static_cast<TokenType>(vocab_.token_types[id]);
  if (!render_special && (type == TokenType::kControl || type == TokenType::kUnknown)) return kEmpty;
  return pieces_[id];
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids, bool render_special) const {
  std::string text;
  for (int32_t id : ids) text += token_piece(id, render_special);
  return text;
}

const std::string& BpeTokenizer::token_text(int32_t id) const {
  check_id(id);
  return vocab_.tokens[id];
}

std::optional<int32_t> BpeTokenizer::token_id(std::string_view text) const {
  const auto it = token_to_id_.find(std::string(text));
  if (it == token_to_id_.end()) return std::nullopt;
  return it->second;
}

TokenType BpeTokenizer::token_type(int32_t id) const {
  check_id(id);
  return static_cast<TokenType>(vocab_.token_types[id]);
}

bool BpeTokenizer::is_special(int32_t id) const { return is_special_type(token_type(id)); }

std::string StreamingDecoder::feed(int32_t id) {
  pending_ += tokenizer_.token_piece(id, render_special_);
  const size_t ready = utf8_complete_prefix(pending_);
  std::string out = utf8_replace_invalid(std::string_view(pending_).substr(0, ready));
  pending_.erase(0, ready);
  return out;
}

std::string StreamingDecoder::flush() {
  std::string out = utf8_replace_invalid(pending_);
  pending_.clear();
  return out;
}

}  // namespace lorakv::formats
