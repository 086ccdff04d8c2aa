// formats/tokenizer_json.cpp: tokenizer.json -> TokenizerVocab.
#include "lorakv/formats/tokenizer_json.h"

#include "lorakv/common/errors.h"
#include "lorakv/formats/json.h"

namespace lorakv::formats {
namespace {

[[noreturn]] void unsupported(const std::string& path, const std::string& key, const std::string& expected,
                              const std::string& found) {
  throw TokenizerError("unsupported tokenizer.json", {path, key, expected, found,
                                                     "lorakv reads byte-level BPE tokenizers (GPT-2 style)"});
}

bool is_byte_level(const JsonValue& p) { return p.find_string("type").value_or("") == "ByteLevel"; }
bool is_individual_digits(const JsonValue& p) {
  return p.find_string("type").value_or("") == "Digits" && p.find_bool("individual_digits").value_or(false);
}

// The pre-tokenizer name BpeTokenizer understands, from the JSON description.
std::string pre_tokenizer_name(const std::string& path, const JsonValue* pre) {
  const std::string expected = "ByteLevel, or Sequence[Digits(individual_digits), ByteLevel]";
  if (pre == nullptr || pre->is_null()) unsupported(path, "pre_tokenizer", expected, "none");
  if (is_byte_level(*pre)) {
    if (pre->find_bool("add_prefix_space").value_or(false)) {
      unsupported(path, "pre_tokenizer.add_prefix_space", "false", "true");
    }
    return "gpt2";
  }
  if (pre->find_string("type").value_or("") == "Sequence") {
    const auto& items = pre->at("pretokenizers").as_array();
    if (items.size() == 2 && is_individual_digits(items[0]) && is_byte_level(items[1])) return "smollm";
  }
  unsupported(path, "pre_tokenizer", expected, pre->to_string().substr(0, 120));
}

}  // namespace

TokenizerVocab vocab_from_tokenizer_json(const std::string& path) {
  JsonParseOptions options;
  options.source = path;
  const JsonValue root = parse_json_file(path, options);
  const JsonValue& model = root.at("model");
  const std::string type = model.find_string("type").value_or("");
  if (type != "BPE") unsupported(path, "model.type", "BPE", "'" + type + "'");

  TokenizerVocab v;
  v.model = "gpt2";
  v.pre = pre_tokenizer_name(path, root.find("pre_tokenizer"));
  const auto& vocab = model.at("vocab").as_object();
  int64_t size = static_cast<int64_t>(vocab.size());
  const JsonValue* added = root.find("added_tokens");
  if (added != nullptr && !added->is_null()) {
    for (const JsonValue& t : added->as_array()) size = std::max(size, t.at("id").as_int() + 1);
  }
  v.tokens.assign(static_cast<size_t>(size), "");
  v.token_types.assign(static_cast<size_t>(size), static_cast<int32_t>(TokenType::kNormal));
  for (const auto& [text, id] : vocab) {
    const int64_t i = id.as_int();
    if (i < 0 || i >= size) {
      throw TokenizerError("token id out of range", {path, "model.vocab." + text, "0.." + std::to_string(size - 1),
                                                     std::to_string(i), ""});
    }
    v.tokens[static_cast<size_t>(i)] = text;
  }
  if (added != nullptr && !added->is_null()) {
    for (const JsonValue& t : added->as_array()) {
      const size_t i = static_cast<size_t>(t.at("id").as_int());
      v.tokens[i] = t.at("content").as_string();
      const bool special = t.find_bool("special").value_or(false);
      v.token_types[i] = static_cast<int32_t>(special ? TokenType::kControl : TokenType::kUserDefined);
    }
  }
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (v.tokens[i].empty()) {
      throw TokenizerError("vocabulary has a gap", {path, "model.vocab", "every id below " + std::to_string(size),
                                                    "no token for id " + std::to_string(i), ""});
    }
  }
  // Merges: "left right" strings (older files) or [left, right] pairs (newer files).
  for (const JsonValue& m : model.at("merges").as_array()) {
    if (m.is_string()) {
      v.merges.push_back(m.as_string());
    } else {
      const auto& pair = m.as_array();
      if (pair.size() != 2) {
        throw TokenizerError("merge is not a pair", {path, m.display_path(), "2 strings", m.describe(), ""});
      }
      v.merges.push_back(pair[0].as_string() + " " + pair[1].as_string());
    }
  }
  return v;
}

}  // namespace lorakv::formats
