// runtime/output_prefixes.cpp: the allowed-token set of a prefix constraint.
#include "lorakv/runtime/output_prefixes.h"

#include "lorakv/common/errors.h"

namespace lorakv::runtime {

namespace {

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

OutputPrefixes::OutputPrefixes(const formats::BpeTokenizer& tokenizer, std::vector<std::string> prefixes)
    : tokenizer_(tokenizer), prefixes_(std::move(prefixes)) {
  for (const std::string& p : prefixes_) {
    if (p.empty()) throw ConfigError("an allowed output prefix is empty", {"", "allowed_prefixes", "", "\"\"", ""});
  }
}

bool OutputPrefixes::active() const {
  if (prefixes_.empty()) return false;
  for (const std::string& p : prefixes_) {
    if (starts_with(text_, p)) return false;
  }
  return true;
}

// The text with `candidate` is still on a prefix: a start of one, or past a whole one.
bool OutputPrefixes::fits(const std::string& candidate) const {
  for (const std::string& p : prefixes_) {
    if (starts_with(p, candidate) || starts_with(candidate, p)) return true;
  }
  return false;
}

std::vector<int32_t> OutputPrefixes::allowed() const {
  std::vector<int32_t> ids;
  std::string candidate = text_;
  for (int32_t id = 0; id < tokenizer_.vocab_size(); ++id) {
    if (tokenizer_.is_special(id)) continue;
    const std::string& piece = tokenizer_.token_piece(id, /*render_special=*/false);
    if (piece.empty()) continue;
    candidate.resize(text_.size());
    candidate += piece;
    if (fits(candidate)) ids.push_back(id);
  }
  if (ids.empty()) {
    throw ConfigError("no token continues the allowed output prefixes", {"", "allowed_prefixes", "", text_, ""});
  }
  return ids;
}

void OutputPrefixes::accept(int32_t token) { text_ += tokenizer_.token_piece(token, /*render_special=*/false); }

}  // namespace lorakv::runtime
