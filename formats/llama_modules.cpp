// formats/llama_modules.cpp: the projection name table.
#include "lorakv/formats/llama_modules.h"

namespace lorakv::formats {
namespace {

struct ModuleNames {
  const char* hf;
  const char* gguf;
};

constexpr ModuleNames kNames[kNumLlamaModules] = {
    {"q_proj", "attn_q"},       {"k_proj", "attn_k"}, {"v_proj", "attn_v"},     {"o_proj", "attn_output"},
    {"gate_proj", "ffn_gate"}, {"up_proj", "ffn_up"}, {"down_proj", "ffn_down"}};

const ModuleNames& names(LlamaModule m) { return kNames[static_cast<int>(m)]; }

template <typename Field>
std::optional<LlamaModule> find_by(const std::string& name, Field field) {
  for (int i = 0; i < kNumLlamaModules; ++i) {
    if (name == kNames[i].*field) return static_cast<LlamaModule>(i);
  }
  return std::nullopt;
}

}  // namespace

const char* module_name(LlamaModule m) { return names(m).hf; }

const char* gguf_module_name(LlamaModule m) { return names(m).gguf; }

bool is_attention_module(LlamaModule m) {
  return m == LlamaModule::kQ || m == LlamaModule::kK || m == LlamaModule::kV || m == LlamaModule::kO;
}

std::string module_path(int64_t layer, LlamaModule m) {
  return "model.layers." + std::to_string(layer) + (is_attention_module(m) ? ".self_attn." : ".mlp.") + module_name(m);
}

std::optional<LlamaModule> module_from_name(const std::string& name) { return find_by(name, &ModuleNames::hf); }

std::optional<LlamaModule> module_from_gguf_name(const std::string& name) { return find_by(name, &ModuleNames::gguf); }

}  // namespace lorakv::formats
