// adapters/adapter_loader.h: loading LoRA adapters from the files users already have:
// PEFT directories (adapter_config.json + adapter_model.safetensors) and llama.cpp GGUF
// LoRA files. Everything is checked against the base model; every refusal is an
// AdapterLoadError naming the file, the field or tensor, what is supported and a hint.
// No code ever runs from an adapter file (pickled adapter_model.bin is refused).
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "lorakv/adapters/adapter.h"

namespace lorakv::formats {
class GgufFile;
}  // namespace lorakv::formats

namespace lorakv::adapters {

struct AdapterLoadOptions {
  at::ScalarType dtype = at::kFloat;  // A and B are stored in this dtype (the model's)
};

// A PEFT LoRA directory. Honours r, lora_alpha, use_rslora, target_modules (list, regex
// or "all-linear"), exclude_modules, rank_pattern, alpha_pattern, layers_to_transform
// with layers_pattern, and keeps alora_invocation_tokens (an activated LoRA: see adapter.h).
// Tensor keys as PEFT writes them, with or without the adapter-name segment
// ("...q_proj.lora_A.weight" or "...q_proj.lora_A.default.weight").
std::shared_ptr<const Adapter> load_peft_adapter(const std::string& name, const std::string& dir,
                                                 const BaseModelShape& shape, const AdapterLoadOptions& options = {});

// A llama.cpp GGUF LoRA file (general.type = adapter, adapter.type = lora,
// adapter.lora.alpha; tensors blk.N.<attn_q|...>.weight.lora_a/lora_b). q/k B rows are
// un-permuted from llama.cpp's RoPE layout to Hugging Face's, as the base weights are. Keeps
// adapter.alora.invocation_tokens (an activated LoRA: see adapter.h).
std::shared_ptr<const Adapter> load_gguf_lora(const std::string& name, const std::string& path,
                                              const BaseModelShape& shape, const AdapterLoadOptions& options = {});

// The aLoRA invocation tokens of a GGUF LoRA file: adapter.alora.invocation_tokens, an array
// of uint32 as llama.cpp's converter writes it (int32 is taken too), or empty when the file
// has no adapter.alora.* key. Throws AdapterLoadError naming the file and the key for an
// empty array, another type, an id outside [0, 2^31) or an adapter.alora.* key lorakv does
// not know (the tokens missing among them). Not checked against a vocabulary.
std::vector<int32_t> gguf_invocation_tokens(const formats::GgufFile& file);

// Picks the loader: a directory or an adapter_config.json / adapter_model.safetensors
// path is PEFT; a file starting with GGUF's magic is a GGUF LoRA; anything else is
// refused with the formats that are supported.
std::shared_ptr<const Adapter> load_adapter(const std::string& name, const std::string& path,
                                            const BaseModelShape& shape, const AdapterLoadOptions& options = {});

}  // namespace lorakv::adapters
