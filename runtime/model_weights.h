// runtime/model_weights.h: a Llama-family model's weights as ATen tensors in Hugging
// Face's layout (Q/K rows un-permuted), dequantised from GGUF to the model dtype.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <vector>

#include "formats/llama_modules.h"
#include "kernels/qk_unpermute.h"
#include "runtime/model_config.h"

namespace lorakv::formats {
class GgufFile;
}

namespace lorakv::runtime {

// The seven linear projections of a layer (formats/llama_modules.h names them): every one
// goes through LlamaModel::project, the single place where adapters are applied.
using Module = formats::LlamaModule;
constexpr int kNumModules = formats::kNumLlamaModules;
using formats::module_name;  // HF names: "q_proj", ..., "down_proj"

// Every tensor is in the model dtype (float32 or bfloat16).
struct LayerWeights {
  at::Tensor attn_norm;  // [hidden]
  at::Tensor q_proj;     // [num_heads * head_dim, hidden]   (HF row order)
  at::Tensor k_proj;     // [num_kv_heads * head_dim, hidden] (HF row order)
  at::Tensor v_proj;     // [num_kv_heads * head_dim, hidden]
  at::Tensor o_proj;     // [hidden, num_heads * head_dim]
  at::Tensor mlp_norm;   // [hidden]
  at::Tensor gate_proj;  // [intermediate, hidden]
  at::Tensor up_proj;    // [intermediate, hidden]
  at::Tensor down_proj;  // [hidden, intermediate]
  at::Tensor q_bias;     // [num_heads * head_dim], undefined when the model has none (Qwen2 has)
  at::Tensor k_bias;     // [num_kv_heads * head_dim] or undefined
  at::Tensor v_bias;     // [num_kv_heads * head_dim] or undefined

  const at::Tensor& weight(Module m) const;
  const at::Tensor& bias(Module m) const;  // undefined tensor when the projection has no bias
};

struct ModelWeights {
  at::Tensor embed_tokens;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  at::Tensor final_norm;    // [hidden]
  at::Tensor lm_head;       // [vocab, hidden]; the same storage as embed_tokens when tied
  int64_t num_bytes = 0;    // bytes held by the tensors above (tied storage counted once)
};

// Inverse of llama.cpp's Q/K permutation (kernels/qk_unpermute.h), applied at GGUF load.
using kernels::unpermute_qk_rows;

// Returns the float32 tensor of a Hugging Face-named weight ("model.layers.3.mlp.up_proj.
// weight") in HF layout, checked against `shape`; throws ModelLoadError when missing.
using TensorFetcher = std::function<at::Tensor(const std::string& hf_name, const std::vector<int64_t>& shape)>;

// Builds the model's weights from any source of HF-named tensors, cast to `dtype`.
ModelWeights assemble_weights(const ModelConfig& config, at::ScalarType dtype, const TensorFetcher& fetch);

// The GGUF tensor name of an HF weight name ("model.layers.3.mlp.up_proj.weight" ->
// "blk.3.ffn_up.weight").
std::string gguf_tensor_name(const std::string& hf_name);

// Loads and checks every tensor against `config`, dequantised to float32 and then cast to
// `dtype` (at::kFloat or at::kBFloat16). Throws ModelLoadError naming any missing or
// mis-shaped tensor.
ModelWeights load_gguf_weights(const formats::GgufFile& file, const ModelConfig& config, at::ScalarType dtype);

}  // namespace lorakv::runtime
