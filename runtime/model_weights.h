// runtime/model_weights.h: a Llama-family model's weights in Hugging Face's layout (Q/K
// rows un-permuted): quantised GGUF blocks kept as they are (WeightForm::kNative) or
// dequantised to dense float32 / bfloat16 tensors.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <vector>

#include "lorakv/formats/llama_modules.h"
#include "lorakv/kernels/qk_unpermute.h"
#include "lorakv/runtime/linear_weight.h"
#include "lorakv/runtime/model_config.h"

namespace lorakv::formats {
class GgufFile;
struct GgufTensorInfo;
}

namespace lorakv::runtime {

// The seven linear projections of a layer (formats/llama_modules.h names them): every one
// goes through LlamaModel::project, the single place where adapters are applied.
using Module = formats::LlamaModule;
constexpr int kNumModules = formats::kNumLlamaModules;
using formats::module_name;  // HF names: "q_proj", ..., "down_proj"

// Norms and biases are in the model dtype; projections as their LinearWeight says.
struct LayerWeights {
  at::Tensor attn_norm;  // [hidden]
  at::Tensor mlp_norm;   // [hidden]
  // The projections the forward pass runs, one GEMM where several modules read the same
  // input: q, k and v rows stacked (with their biases, when the model has them: Qwen2),
  // gate and up rows stacked. LoRA still applies per module (LlamaModel::project).
  LinearWeight qkv;      // [(num_heads + 2 * num_kv_heads) * head_dim, hidden]
  LinearWeight o;        // [hidden, num_heads * head_dim]
  LinearWeight gate_up;  // [2 * intermediate, hidden]
  LinearWeight down;     // [hidden, intermediate]
  // Each module's dense rows as views into the fused tensors; undefined when quantised.
  at::Tensor q_proj;     // [num_heads * head_dim, hidden]   (HF row order)
  at::Tensor k_proj;     // [num_kv_heads * head_dim, hidden] (HF row order)
  at::Tensor v_proj;     // [num_kv_heads * head_dim, hidden]
  at::Tensor o_proj;     // [hidden, num_heads * head_dim]
  at::Tensor gate_proj;  // [intermediate, hidden]
  at::Tensor up_proj;    // [intermediate, hidden]
  at::Tensor down_proj;  // [hidden, intermediate]

  const at::Tensor& weight(Module m) const;  // the dense view (undefined when quantised)
};

struct ModelWeights {
  LinearWeight embed_tokens;  // [vocab, hidden], looked up by rows (dequantised per token)
  std::vector<LayerWeights> layers;
  at::Tensor final_norm;      // [hidden]
  LinearWeight lm_head;       // [vocab, hidden]; the same storage as embed_tokens when tied
  WeightForm form = WeightForm::kNative;
  int64_t num_bytes = 0;      // bytes held by the weights above (tied storage counted once)
};

// Inverse of llama.cpp's Q/K permutation (kernels/qk_unpermute.h), applied at GGUF load.
using kernels::unpermute_qk_rows;

// Returns the float32 tensor of a Hugging Face-named weight ("model.layers.3.mlp.up_proj.
// weight") in HF layout, checked against `shape`; throws ModelLoadError when missing.
using TensorFetcher = std::function<at::Tensor(const std::string& hf_name, const std::vector<int64_t>& shape)>;
// Returns the weight's quantised blocks in HF layout when the source keeps it quantised,
// else an empty matrix (the dense TensorFetcher is asked then).
using QuantFetcher = std::function<kernels::QuantMatrix(const std::string& hf_name, const std::vector<int64_t>& shape)>;

// Builds the model's weights from any source of HF-named tensors: norms and biases in
// `dtype`; projections and embeddings quantised where `form` is native and `fetch_quant`
// (optional) has blocks, else dense in `dtype` (native), bfloat16 or float32.
ModelWeights assemble_weights(const ModelConfig& config, at::ScalarType dtype, WeightForm form,
                              const TensorFetcher& fetch, const QuantFetcher& fetch_quant = {});

// The GGUF tensor name of an HF weight name ("model.layers.3.mlp.up_proj.weight" ->
// "blk.3.ffn_up.weight").
std::string gguf_tensor_name(const std::string& hf_name);

// Loads and checks every tensor against `config`. Q4_0, Q4_1 and Q8_0 tensors stay in blocks
// when `form` is native (other quantised types are dequantised); everything else is
// dequantised to float32 and cast as assemble_weights says. Throws ModelLoadError naming
// any missing or mis-shaped tensor.
ModelWeights load_gguf_weights(const formats::GgufFile& file, const ModelConfig& config, at::ScalarType dtype,
                               WeightForm form = WeightForm::kNative);

// A GGUF Q4_0, Q4_1 or Q8_0 tensor's blocks [rows, cols] as a QuantMatrix (Q4_0 as q4
// with m = -8d); empty for any other type.
kernels::QuantMatrix quant_matrix_from_gguf(const formats::GgufTensorInfo& info);

}  // namespace lorakv::runtime
