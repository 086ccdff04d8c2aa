// formats/llama_modules.h: the seven linear projections of a Llama-family decoder layer and
// their names in the two file formats lorakv reads: Hugging Face's ("q_proj", under
// "model.layers.N.self_attn.") and GGUF's ("attn_q", under "blk.N."). One table for the
// model loader (runtime/), the adapter loaders (adapters/) and the CLI. Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace lorakv::formats {

// In layer order of use; runtime/ and adapters/ index per-module arrays by this value.
enum class LlamaModule { kQ = 0, kK, kV, kO, kGate, kUp, kDown };
constexpr int kNumLlamaModules = 7;

const char* module_name(LlamaModule m);       // Hugging Face's: "q_proj", ..., "down_proj"
const char* gguf_module_name(LlamaModule m);  // GGUF's: "attn_q", ..., "ffn_down"
bool is_attention_module(LlamaModule m);      // q/k/v/o (under self_attn); the rest are mlp
// "model.layers.3.self_attn.q_proj", "model.layers.0.mlp.down_proj"
std::string module_path(int64_t layer, LlamaModule m);

std::optional<LlamaModule> module_from_name(const std::string& name);       // "q_proj" -> kQ
std::optional<LlamaModule> module_from_gguf_name(const std::string& name);  // "attn_q" -> kQ

}  // namespace lorakv::formats
