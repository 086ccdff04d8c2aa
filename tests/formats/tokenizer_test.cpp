// tests/formats/tokenizer_test.cpp: BpeTokenizer on small hand-built vocabularies (merge
// order, special tokens, decoding, streaming, bad vocabularies), then on the real SmolLM2
// GGUF: known vectors and id-for-id parity with llama.cpp over the oracle corpus written by
// tools/tokenizer_oracle.py. Env: LORAKV_MODEL (the GGUF), LORAKV_ORACLE_DIR (holds
// tokenizer_cases.txt). Missing ones fail the real-model tests; they are never skipped.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/test_settings.h"
#include "lorakv/common/errors.h"
#include "lorakv/formats/bpe_tokenizer.h"
#include "lorakv/formats/gguf_file.h"
#include "lorakv/formats/tokenizer_gguf.h"
#include "lorakv/formats/unicode.h"

namespace lorakv::formats {
namespace {

using Ids = std::vector<int32_t>;

// Specials first (ids 0..3), then the 256 byte tokens (id = 4 + byte), then one token per
// merge result, in merge order.
constexpr int32_t kByteBase = 4;
TokenizerVocab tiny_vocab(const std::vector<std::string>& merges = {}) {
  TokenizerVocab v;
  v.model = "gpt2";
  v.pre = "smollm";
  v.tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool>"};
  v.token_types = {3, 3, 3, 4};
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(byte_to_gpt2_utf8(static_cast<uint8_t>(b)));
    v.token_types.push_back(1);
  }
  for (const std::string& m : merges) {
    const size_t space = m.find(' ');
    v.tokens.push_back(m.substr(0, space) + m.substr(space + 1));
    v.token_types.push_back(1);
  }
  v.merges = merges;
  v.bos_id = 1;
  v.eos_id = 2;
  return v;
}

int32_t byte_id(char c) { return kByteBase + static_cast<uint8_t>(c); }

void expect_tokenizer_error(const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected a TokenizerError mentioning '" << needle << "'";
  } catch (const TokenizerError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(BpeTokenizer, MergesLowestRankFirst) {
  // "ell": with "l l" ranked first the word is e + ll; with "e l" first it is el + l.
  const BpeTokenizer ll_first(tiny_vocab({"l l", "e l"}));
  const BpeTokenizer el_first(tiny_vocab({"e l", "l l"}));
  EXPECT_EQ(ll_first.encode("ell"), (Ids{byte_id('e'), *ll_first.token_id("ll")}));
  EXPECT_EQ(el_first.encode("ell"), (Ids{*el_first.token_id("el"), byte_id('l')}));
  // Equal ranks (the same pair twice): the leftmost pair merges first.
  EXPECT_EQ(ll_first.encode("llll"), (Ids{*ll_first.token_id("ll"), *ll_first.token_id("ll")}));
}

TEST(BpeTokenizer, MergesChainAcrossTheGpt2SpaceCharacter) {
  const BpeTokenizer tok(tiny_vocab({"h e", "l l", "he ll", "hell o", "\xC4\xA0 w", "o r", "\xC4\xA0w or"}));
  const Ids ids = tok.encode("hello wor");
  EXPECT_EQ(ids, (Ids{*tok.token_id("hello"), *tok.token_id("\xC4\xA0wor")}));
  EXPECT_EQ(tok.token_text(ids[1]), "\xC4\xA0wor");  // "Ġwor"
  EXPECT_EQ(tok.decode(ids), "hello wor");
}

TEST(BpeTokenizer, RecognisesSpecialTokensBeforePreTokenizing) {
  const BpeTokenizer tok(tiny_vocab({"h i"}));
  const int32_t hi = *tok.token_id("hi");
  EXPECT_EQ(tok.encode("<|im_start|>hi<|im_end|>"), (Ids{1, hi, 2}));
  EXPECT_EQ(tok.encode("x<|endoftext|><tool>"), (Ids{byte_id('x'), 0, 3}));
  EXPECT_EQ(tok.encode("<|im_start|"), (Ids{byte_id('<'), byte_id('|'), byte_id('i'), byte_id('m'),
                                            byte_id('_'), byte_id('s'), byte_id('t'), byte_id('a'),
                                            byte_id('r'), byte_id('t'), byte_id('|')}));
  // Without parse_special control tokens are plain text; user-defined ones still match.
  const Ids plain = tok.encode("<|im_end|><tool>", /*parse_special=*/false);
  EXPECT_EQ(plain.size(), 11u);
  EXPECT_EQ(plain.back(), 3);
  EXPECT_EQ(tok.decode(plain), "<|im_end|><tool>");
  EXPECT_TRUE(tok.is_special(1));
  EXPECT_FALSE(tok.is_special(hi));
}

TEST(BpeTokenizer, LongerSpecialTokensAreCutOutFirst) {
  // llama.cpp cuts each special token out of the whole text, longest first: in "abcd" the
  // longer "bcd" wins over the earlier "ab".
  TokenizerVocab v = tiny_vocab();
  v.tokens.insert(v.tokens.end(), {"ab", "bcd"});
  v.token_types.insert(v.token_types.end(), {3, 3});
  const BpeTokenizer tok(v);
  EXPECT_EQ(tok.encode("abcd"), (Ids{byte_id('a'), *tok.token_id("bcd")}));
  EXPECT_EQ(tok.encode("abab"), (Ids{*tok.token_id("ab"), *tok.token_id("ab")}));
}

TEST(BpeTokenizer, DecodesBytesSpecialsAndRoundTrips) {
  const BpeTokenizer tok(tiny_vocab({"h e", "l l"}));
  for (const std::string s : {"", "hello\n\tworld  ", "caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87",
                              "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9 x", "a\r\nb 123"}) {
    EXPECT_EQ(tok.decode(tok.encode(s)), s);
  }
  EXPECT_EQ(tok.decode({1, byte_id('h'), 2}), "<|im_start|>h<|im_end|>");
  EXPECT_EQ(tok.decode({1, byte_id('h'), 2}, /*render_special=*/false), "h");
  EXPECT_EQ(tok.token_piece(byte_id(' ')), " ");
  expect_tokenizer_error([&] { tok.decode({tok.vocab_size()}); }, "token id out of range");
  expect_tokenizer_error([&] { tok.decode({-1}); }, "token id out of range");
}

TEST(StreamingDecoder, HoldsBackAPartialEmojiAndEmitsItWhole) {
  const BpeTokenizer tok(tiny_vocab());
  const std::string emoji = "\xF0\x9F\x98\x80";  // U+1F600, one byte token per byte here
  StreamingDecoder stream(tok);
  EXPECT_EQ(stream.feed(byte_id('a')), "a");
  EXPECT_EQ(stream.feed(byte_id(emoji[0])), "");
  EXPECT_EQ(stream.feed(byte_id(emoji[1])), "");
  EXPECT_EQ(stream.feed(byte_id(emoji[2])), "");
  EXPECT_EQ(stream.num_pending_bytes(), 3u);
  EXPECT_EQ(stream.feed(byte_id(emoji[3])), emoji);
  EXPECT_EQ(stream.feed(2), "<|im_end|>");
  // A stream cut mid-character: flush hands back U+FFFD for the held bytes, never half a
  // character (a reply cut at max_tokens stays valid UTF-8).
  EXPECT_EQ(stream.feed(byte_id(emoji[0])), "");
  EXPECT_EQ(stream.feed(byte_id(emoji[1])), "");
  EXPECT_EQ(stream.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(stream.num_pending_bytes(), 0u);
  // Ill-formed bytes are never held back (they cannot complete) and never passed on.
  EXPECT_EQ(stream.feed(byte_id('\x80')), "\xEF\xBF\xBD");
  // An overlong lead may wait for its next byte, but comes out as U+FFFD, not as bytes.
  const std::string overlong = stream.feed(byte_id('\xC0'));
  EXPECT_EQ(overlong + stream.feed(byte_id('A')), "\xEF\xBF\xBD" "A");
}

TEST(BpeTokenizer, RejectsBadVocabularies) {
  const auto build = [](TokenizerVocab v) { BpeTokenizer tok(std::move(v)); };
  TokenizerVocab v = tiny_vocab();
  v.model = "llama";
  expect_tokenizer_error([&] { build(v); }, "one of: gpt2");
  v = tiny_vocab();
  v.pre = "llama-bpe";
  expect_tokenizer_error([&] { build(v); }, "one of: smollm, starcoder, refact, command-r");
  v = tiny_vocab();
  v.merges = {"q z"};  // both parts are tokens, the result "qz" is not
  expect_tokenizer_error([&] { build(v); }, "needs 'qz'");
  v = tiny_vocab();
  v.merges = {"h \xE2\x98\x83"};  // a part that is no token
  expect_tokenizer_error([&] { build(v); }, "merge references an unknown token");
  v = tiny_vocab();
  v.merges = {"he"};
  expect_tokenizer_error([&] { build(v); }, "malformed merge");
  v = tiny_vocab();
  v.tokens.push_back("a");
  v.token_types.push_back(1);
  expect_tokenizer_error([&] { build(v); }, "duplicate token text");
  v = tiny_vocab();
  v.tokens[3] = "";
  expect_tokenizer_error([&] { build(v); }, "empty token text");
  v = tiny_vocab();
  v.token_types.pop_back();
  expect_tokenizer_error([&] { build(v); }, "token type count");
  v = tiny_vocab();
  v.token_types[5] = 9;
  expect_tokenizer_error([&] { build(v); }, "bad token type");
  v = tiny_vocab();
  v.eos_id = 100000;
  expect_tokenizer_error([&] { build(v); }, "tokenizer.ggml.eos_token_id");
  v = tiny_vocab();
  v.tokens.clear();
  v.token_types.clear();
  expect_tokenizer_error([&] { build(v); }, "vocabulary size");
}

// ---- The real SmolLM2 vocabulary ----

std::string require_env(const char* name, const char* what) {
  const std::string value = lorakv::testing::test_setting(name);
  if (value.empty()) {
    ADD_FAILURE() << name << " is not set: it must name " << what
                  << ". Run the tests through CTest (which sets it), or set it by hand.";
    return {};
  }
  return value;
}

const BpeTokenizer* smollm2() {
  static std::unique_ptr<BpeTokenizer> tokenizer = [] {
    const std::string path = require_env("LORAKV_MODEL", "the SmolLM2-135M-Instruct GGUF file");
    if (path.empty()) return std::unique_ptr<BpeTokenizer>();
    const auto file = GgufFile::open(path);
    return std::make_unique<BpeTokenizer>(tokenizer_from_gguf(*file));
  }();
  if (!tokenizer) ADD_FAILURE() << "no tokenizer: LORAKV_MODEL is missing";
  return tokenizer.get();
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

std::string printable(const std::string& bytes) {
  std::ostringstream os;
  for (unsigned char c : bytes) {
    if (c >= 0x20 && c < 0x7F && c != '\\') os << c;
    else os << "\\x" << std::hex << (c >> 4) << (c & 15) << std::dec;
  }
  return os.str();
}

std::string join(const Ids& ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

struct OracleCase {
  std::string text;
  Ids ids;
  std::string decoded;
  bool parse_special;
};

std::vector<OracleCase> load_oracle_cases() {
  const std::string dir = require_env("LORAKV_ORACLE_DIR", "the folder with tokenizer_cases.txt");
  if (dir.empty()) return {};
  const std::string path = dir + "/tokenizer_cases.txt";
  std::ifstream in(path);
  if (!in) {
    ADD_FAILURE() << "cannot read " << path << ": generate it with tools/tokenizer_oracle.py "
                  << "--model $LORAKV_MODEL --out " << path;
    return {};
  }
  std::vector<OracleCase> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> cols;
    std::stringstream ss(line);
    for (std::string col; std::getline(ss, col, '\t');) cols.push_back(col);
    if (cols.size() != 4) {
      ADD_FAILURE() << path << ": expected 4 tab-separated columns in: " << line;
      continue;
    }
    OracleCase c{from_hex(cols[0]), {}, from_hex(cols[2]), cols[3] == "1"};
    std::stringstream ids(cols[1]);
    for (int32_t id; ids >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  return cases;
}

TEST(TokenizerSmolLM2, ReadsTheVocabularyFromGguf) {
  const BpeTokenizer* tok = smollm2();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 49152);
  EXPECT_EQ(tok->pre(), "smollm");
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_FALSE(tok->add_bos());
  EXPECT_EQ(tok->token_id("<|im_end|>"), 2);
  EXPECT_EQ(tok->token_type(2), TokenType::kControl);
  EXPECT_NE(tok->chat_template().find("<|im_start|>"), std::string::npos);
}

TEST(TokenizerSmolLM2, KnownVectors) {
  // Checked against llama.cpp (llama-cpp-python 0.3.36) on this GGUF.
  const BpeTokenizer* tok = smollm2();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->encode("The capital of France is"), (Ids{504, 3575, 282, 4649, 314}));
  EXPECT_EQ(tok->encode("Hello world! 123"), (Ids{19556, 905, 17, 216, 33, 34, 35}));
  EXPECT_EQ(tok->encode("\n"), (Ids{198}));
  EXPECT_EQ(tok->encode("<|im_start|>user\nhi<|im_end|>"), (Ids{1, 4093, 198, 6004, 2}));
  EXPECT_EQ(tok->encode(""), Ids{});
}

TEST(TokenizerParity, MatchesLlamaCppOnOracleCorpus) {
  const BpeTokenizer* tok = smollm2();
  const std::vector<OracleCase> cases = load_oracle_cases();
  ASSERT_NE(tok, nullptr);
  ASSERT_GE(cases.size(), 1000u) << "the oracle corpus is too small";
  size_t id_diffs = 0, decode_diffs = 0;
  for (const OracleCase& c : cases) {
    const Ids ours = tok->encode(c.text, c.parse_special);
    if (ours != c.ids && ++id_diffs <= 5) {
      ADD_FAILURE() << "ids differ (parse_special=" << c.parse_special << ") for \"" << printable(c.text)
                    << "\"\n  ours:   " << join(ours) << "\n  theirs: " << join(c.ids);
    }
    const std::string decoded = tok->decode(c.ids);
    if (decoded != c.decoded && ++decode_diffs <= 5) {
      ADD_FAILURE() << "decode differs for ids " << join(c.ids) << "\n  ours:   \"" << printable(decoded)
                    << "\"\n  theirs: \"" << printable(c.decoded) << "\"";
    }
  }
  EXPECT_EQ(id_diffs, 0u) << "of " << cases.size() << " cases";
  EXPECT_EQ(decode_diffs, 0u) << "of " << cases.size() << " cases";
}

TEST(TokenizerSmolLM2, DropsBytesWithoutATokenLikeLlamaCpp) {
  const BpeTokenizer* tok = smollm2();
  ASSERT_NE(tok, nullptr);
  std::string missing;
  for (int b = 0; b < 256; ++b) {
    if (tok->byte_token(static_cast<uint8_t>(b)) < 0) missing.push_back(static_cast<char>(b));
  }
  EXPECT_EQ(missing, "\x04\x06\x13\x14\x16\x1D\xC0\xC1\xF1\xF2\xF5\xF6\xF7\xF8\xF9\xFA\xFB\xFC\xFD\xFE\xFF");
  EXPECT_EQ(tok->encode("\x04"), Ids{});
  EXPECT_EQ(tok->encode("a\x04" "b"), (Ids{81, 82}));  // "a", "b": 0x04 still splits the word
}

TEST(TokenizerParity, DecodeInvertsEncodeOnValidUtf8) {
  const BpeTokenizer* tok = smollm2();
  const std::vector<OracleCase> cases = load_oracle_cases();
  ASSERT_NE(tok, nullptr);
  size_t checked = 0;
  for (const OracleCase& c : cases) {
    std::string reencoded;
    for (uint32_t cpt : utf8_to_codepoints(c.text)) append_utf8(reencoded, cpt);
    if (reencoded != c.text || c.text.find("\xEF\xBF\xBD") != std::string::npos) continue;
    ++checked;
    // Lossless except for the bytes the vocabulary has no token for.
    std::string expected;
    for (char b : c.text) {
      if (tok->byte_token(static_cast<uint8_t>(b)) >= 0) expected.push_back(b);
    }
    const Ids ids = tok->encode(c.text, c.parse_special);
    EXPECT_EQ(tok->decode(ids), expected) << printable(c.text);
    // Streaming the same ids gives the same text, every piece valid UTF-8 (the bytes the
    // vocabulary lacks may leave ill-formed sequences behind: U+FFFD each).
    StreamingDecoder stream(*tok);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string out = stream.feed(id);
      EXPECT_EQ(utf8_replace_invalid(out), out);
      streamed += out;
    }
    EXPECT_EQ(streamed + stream.flush(), utf8_replace_invalid(expected));
  }
  EXPECT_GE(checked, 1000u);
}

}  // namespace
}  // namespace lorakv::formats
