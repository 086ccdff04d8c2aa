// tests/support/model_tokenizer.h: the real model's tokenizer (LORAKV_MODEL's GGUF), read
// once per test binary, for tests that need a vocabulary but no weights.
#pragma once

#include <memory>
#include <string>

#include "lorakv/common/errors.h"
#include "lorakv/formats/bpe_tokenizer.h"
#include "lorakv/formats/gguf_file.h"
#include "lorakv/formats/tokenizer_gguf.h"
#include "tests/support/test_settings.h"

namespace lorakv::testing {

inline const formats::BpeTokenizer& model_tokenizer() {
  static const std::unique_ptr<formats::BpeTokenizer> tokenizer = [] {
    const std::string path = test_setting("LORAKV_MODEL");
    if (path.empty()) throw ConfigError("LORAKV_MODEL is not set", {"", "LORAKV_MODEL"});
    const std::unique_ptr<formats::GgufFile> file = formats::GgufFile::open(path);
    return std::make_unique<formats::BpeTokenizer>(formats::tokenizer_from_gguf(*file));
  }();
  return *tokenizer;
}

}  // namespace lorakv::testing
