// runtime/hf_checkpoint.h: Hugging Face checkpoint directories: config.json, weights in
// model.safetensors or shards named by model.safetensors.index.json (F32, F16, BF16), and
// tokenizer.json. Llama-family architectures: Llama 2/3 (llama3 RoPE scaling), Mistral
// (sliding window), SmolLM/SmolLM2 (llama), Qwen2 (q/k/v biases).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "lorakv/formats/bpe_tokenizer.h"
#include "lorakv/runtime/model_config.h"
#include "lorakv/runtime/model_weights.h"

namespace lorakv::runtime {

// model_type values of config.json lorakv runs.
const std::vector<std::string>& supported_hf_model_types();

// True when `path` is a directory holding a config.json.
bool is_hf_checkpoint(const std::string& path);

// Reads and checks <dir>/config.json. Throws ConfigError (key, expected, found) for
// unsupported model types or features, ModelLoadError when the file is missing.
ModelConfig read_hf_config(const std::string& dir);

// Loads the weights named by the config, checking every shape. Throws ModelLoadError
// naming the tensor and the file.
ModelWeights load_hf_weights(const std::string& dir, const ModelConfig& config, at::ScalarType dtype,
                             WeightForm form = WeightForm::kNative);

// The tokenizer of <dir>/tokenizer.json with bos/eos from the configs and the chat
// template from tokenizer_config.json (or chat_template.jinja); null without tokenizer.json.
std::unique_ptr<formats::BpeTokenizer> load_hf_tokenizer(const std::string& dir);

}  // namespace lorakv::runtime
