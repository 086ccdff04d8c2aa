// formats/pre_tokenizer.cpp: the digit split and the GPT-2 regex matcher. The matcher
// follows llama.cpp's unicode_regex_split_custom_gpt2 (src/unicode.cpp) decision by
// decision, including its quirks: lookahead never crosses the boundary of the chunk being
// split (so a digit ends the chunk before it), and a lone non-space whitespace codepoint
// before a word is a word of its own.
#include "lorakv/formats/pre_tokenizer.h"

#include "lorakv/formats/unicode.h"

namespace lorakv::formats {
namespace {

struct NamedPreTokenizer {
  const char* name;
  PreTokenizer kind;
};

// llama.cpp (llama-vocab.cpp) gives these the same two regexes.
constexpr NamedPreTokenizer kPreTokenizers[] = {
    {"smollm", PreTokenizer::kDigitsThenGpt2},
    {"starcoder", PreTokenizer::kDigitsThenGpt2},
    {"refact", PreTokenizer::kDigitsThenGpt2},
    {"command-r", PreTokenizer::kDigitsThenGpt2},
    {"gpt2", PreTokenizer::kGpt2},
};

bool is_contraction(const std::vector<uint32_t>& cpts, size_t pos, size_t end, size_t* len) {
  // 's 't 'm 'd 're 've 'll, case-sensitive as in GPT-2's regex.
  if (cpts[pos] != '\'' || pos + 1 >= end) return false;
  const uint32_t a = cpts[pos + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') {
    *len = 2;
    return true;
  }
  if (pos + 2 >= end) return false;
  const uint32_t b = cpts[pos + 2];
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
    *len = 3;
    return true;
  }
  return false;
}

// Splits cpts[begin, end) by the GPT-2 regex; appends each word's end (codepoint index).
void split_gpt2(const std::vector<uint32_t>& cpts, const std::vector<CharClass>& cls,
                size_t begin, size_t end, std::vector<size_t>& ends) {
  // Class at `i`, or kOther-but-absent past the chunk: `valid` tells the two apart.
  const auto class_at = [&](size_t i, bool* valid) {
    *valid = i < end;
    return *valid ? cls[i] : CharClass::kOther;
  };
  size_t pos = begin;
  while (pos < end) {
    size_t len = 0;
    if (is_contraction(cpts, pos, end, &len)) {
      pos += len;
      ends.push_back(pos);
      continue;
    }
    // " ?X+" for X in letters, numbers, and "anything but whitespace, letter, number".
    const size_t first = cpts[pos] == ' ' ? pos + 1 : pos;
    bool valid = false;
    const CharClass run = class_at(first, &valid);
    if (valid && run != CharClass::kWhitespace) {
      size_t stop = first + 1;
      while (stop < end && cls[stop] == run) ++stop;
      pos = stop;
      ends.push_back(pos);
      continue;
    }
    // "\s+(?!\S)" keeps the last whitespace for the next word; "\s+" takes the rest.
    size_t num_ws = 0;
    while (pos + num_ws < end && cls[pos + num_ws] == CharClass::kWhitespace) ++num_ws;
    if (num_ws > 1 && pos + num_ws < end) {
      pos += num_ws - 1;
    } else if (num_ws > 0) {
      pos += num_ws;
    } else {
      pos += 1;  // unreachable in practice; llama.cpp's "no match" fallback
    }
    ends.push_back(pos);
  }
}

}  // namespace

bool pre_tokenizer_from_name(std::string_view name, PreTokenizer* out) {
  for (const auto& entry : kPreTokenizers) {
    if (name == entry.name) {
      *out = entry.kind;
      return true;
    }
  }
  return false;
}

std::string supported_pre_tokenizer_names() {
  std::string names;
  for (const auto& entry : kPreTokenizers) {
    if (!names.empty()) names += ", ";
    names += entry.name;
  }
  return names;
}

void pre_tokenize(PreTokenizer kind, std::string_view text, PreTokenized& out) {
  out.bytes.clear();
  out.word_ends.clear();
  const std::vector<uint32_t> cpts = utf8_to_codepoints(text);
  std::vector<CharClass> cls(cpts.size());
  for (size_t i = 0; i < cpts.size(); ++i) cls[i] = char_class(cpts[i]);

  // Pass 1 ("\p{N}"): each number codepoint is a chunk, so is each run between them.
  // Pass 2: the GPT-2 matcher within each chunk.
  std::vector<size_t> ends;
  ends.reserve(cpts.size() / 2 + 1);
  size_t chunk = 0;
  while (chunk < cpts.size()) {
    size_t chunk_end = chunk + 1;
    if (kind == PreTokenizer::kGpt2) {
      chunk_end = cpts.size();  // no digit pass: one chunk
    } else if (cls[chunk] != CharClass::kNumber) {
      while (chunk_end < cpts.size() && cls[chunk_end] != CharClass::kNumber) ++chunk_end;
    }
    split_gpt2(cpts, cls, chunk, chunk_end, ends);
    chunk = chunk_end;
  }

  // Re-encode: words are byte ranges of the (replacement-normalised) UTF-8.
  out.bytes.reserve(text.size() + 8);
  out.word_ends.reserve(ends.size());
  size_t cpt = 0;
  for (size_t end : ends) {
    for (; cpt < end; ++cpt) append_utf8(out.bytes, cpts[cpt]);
    out.word_ends.push_back(static_cast<uint32_t>(out.bytes.size()));
  }
}

}  // namespace lorakv::formats
