// runtime/loaded_model.h: everything needed to run a model file: the model and its
// tokenizer, loaded together with progress logged.
#pragma once

#include <memory>
#include <string>

#include "formats/bpe_tokenizer.h"
#include "runtime/llama_model.h"

namespace lorakv::runtime {

struct LoadedModel {
  std::unique_ptr<formats::BpeTokenizer> tokenizer;
  std::unique_ptr<LlamaModel> model;
};

// Loads a GGUF model file with its tokenizer. Throws ModelLoadError / TokenizerError.
LoadedModel load_model(const std::string& path);

}  // namespace lorakv::runtime
