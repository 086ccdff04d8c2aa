// runtime/loaded_model.h: everything needed to run a model file: the model and its
// tokenizer, loaded together with progress logged.
#pragma once

#include <memory>
#include <string>

#include "lorakv/formats/bpe_tokenizer.h"
#include "lorakv/runtime/llama_model.h"

namespace lorakv::runtime {

struct LoadedModel {
  std::unique_ptr<formats::BpeTokenizer> tokenizer;  // may be null for an HF directory
  std::unique_ptr<LlamaModel> model;
};

// "float32" / "bfloat16" (also "f32", "bf16"); throws ConfigError listing the choices.
at::ScalarType parse_model_dtype(const std::string& name);

// Loads a model with its tokenizer: a GGUF file, or a Hugging Face checkpoint directory
// (config.json + safetensors; the tokenizer is null without tokenizer.json). Activations
// (and dense weights of the native form) in `dtype`; weights kept as `form` says. Throws
// ModelLoadError / TokenizerError.
LoadedModel load_model(const std::string& path, at::ScalarType dtype = at::kFloat,
                       WeightForm form = WeightForm::kNative);

}  // namespace lorakv::runtime
