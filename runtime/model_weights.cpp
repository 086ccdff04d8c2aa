// runtime/model_weights.cpp: GGUF tensors -> ATen tensors in HF layout.
#include "runtime/model_weights.h"

#include <ATen/Parallel.h>

#include "common/errors.h"
#include "common/logging.h"
#include "common/shape_string.h"
#include "formats/gguf_file.h"

namespace lorakv::runtime {
namespace {

// Dequantises one tensor in PyTorch shape, checking it against `shape`, then casts it to
// the model dtype.
at::Tensor load_tensor(const formats::GgufFile& file, const std::string& name, const std::vector<int64_t>& shape,
                       at::ScalarType dtype) {
  const formats::GgufTensorInfo& info = file.tensor(name);
  if (info.torch_shape() != shape) {
    throw ModelLoadError("tensor shape disagrees with the model's metadata",
                         {file.path(), name, shape_string(shape), shape_string(info.torch_shape()),
                          "the file's hyperparameters and tensors do not belong together"});
  }
  at::Tensor out = at::empty(shape, at::kFloat);
  float* dst = out.data_ptr<float>();
  // Rows are whole quantisation blocks, so rows dequantise independently in parallel.
  const int64_t row = info.dims[0];
  const int64_t num_rows = info.num_elements / row;
  const int64_t row_bytes = info.num_bytes / num_rows;
  at::parallel_for(0, num_rows, 64, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      formats::dequantize_to_f32(info.type(), info.data + r * row_bytes, dst + r * row, row);
    }
  });
  return dtype == at::kFloat ? out : out.to(dtype);
}

}  // namespace

const at::Tensor& LayerWeights::weight(Module m) const {
  switch (m) {
    case Module::kQ: return q_proj;
    case Module::kK: return k_proj;
    case Module::kV: return v_proj;
    case Module::kO: return o_proj;
    case Module::kGate: return gate_proj;
    case Module::kUp: return up_proj;
    case Module::kDown: return down_proj;
  }
  return q_proj;
}

const at::Tensor& LayerWeights::bias(Module m) const {
  static const at::Tensor none;
  switch (m) {
    case Module::kQ: return q_bias;
    case Module::kK: return k_bias;
    case Module::kV: return v_bias;
    default: return none;
  }
}

ModelWeights assemble_weights(const ModelConfig& c, at::ScalarType dtype, const TensorFetcher& fetch) {
  const int64_t h = c.hidden_dim;
  const int64_t q_dim = c.num_heads * c.head_dim;
  const int64_t kv_dim = c.num_kv_heads * c.head_dim;
  log::Stopwatch watch;
  auto get = [&](const std::string& name, std::vector<int64_t> shape) {
    at::Tensor t = fetch(name, shape);
    return t.scalar_type() == dtype ? t : t.to(dtype);
  };

  ModelWeights w;
  w.embed_tokens = get("model.embed_tokens.weight", {c.vocab_size, h});
  w.final_norm = get("model.norm.weight", {h});
  w.lm_head = c.tied_embeddings ? w.embed_tokens : get("lm_head.weight", {c.vocab_size, h});
  w.layers.reserve(static_cast<size_t>(c.num_layers));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    auto proj = [&](Module m, const char* suffix) { return module_path(l, m) + suffix; };
    LayerWeights lw;
    lw.attn_norm = get(p + "input_layernorm.weight", {h});
    lw.q_proj = get(proj(Module::kQ, ".weight"), {q_dim, h});
    lw.k_proj = get(proj(Module::kK, ".weight"), {kv_dim, h});
    lw.v_proj = get(proj(Module::kV, ".weight"), {kv_dim, h});
    if (c.attention_bias) {
      lw.q_bias = get(proj(Module::kQ, ".bias"), {q_dim});
      lw.k_bias = get(proj(Module::kK, ".bias"), {kv_dim});
      lw.v_bias = get(proj(Module::kV, ".bias"), {kv_dim});
    }
    lw.o_proj = get(proj(Module::kO, ".weight"), {h, q_dim});
    lw.mlp_norm = get(p + "post_attention_layernorm.weight", {h});
    lw.gate_proj = get(proj(Module::kGate, ".weight"), {c.intermediate_dim, h});
    lw.up_proj = get(proj(Module::kUp, ".weight"), {c.intermediate_dim, h});
    lw.down_proj = get(proj(Module::kDown, ".weight"), {h, c.intermediate_dim});
    for (const at::Tensor* t : {&lw.attn_norm, &lw.q_proj, &lw.k_proj, &lw.v_proj, &lw.o_proj, &lw.mlp_norm,
                                &lw.gate_proj, &lw.up_proj, &lw.down_proj, &lw.q_bias, &lw.k_bias, &lw.v_bias}) {
      if (t->defined()) w.num_bytes += static_cast<int64_t>(t->nbytes());
    }
    w.layers.push_back(std::move(lw));
    log::debug("loaded layer " + std::to_string(l + 1) + "/" + std::to_string(c.num_layers));
  }
  w.num_bytes += static_cast<int64_t>(w.embed_tokens.nbytes() + w.final_norm.nbytes());
  if (!c.tied_embeddings) w.num_bytes += static_cast<int64_t>(w.lm_head.nbytes());
  log::info("loaded " + std::to_string(c.num_layers) + " layers, " + std::to_string(w.num_bytes >> 20) + " MiB of " +
            std::string(dtype == at::kFloat ? "float32" : dtype == at::kBFloat16 ? "bfloat16" : c10::toString(dtype)) + " weights in " + std::to_string(watch.seconds()).substr(0, 4) + " s");
  return w;
}

std::string gguf_tensor_name(const std::string& hf_name) {
  static const std::pair<const char*, const char*> norm_names[] = {
      {"input_layernorm.weight", "attn_norm.weight"}, {"post_attention_layernorm.weight", "ffn_norm.weight"}};
  if (hf_name == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf_name == "model.norm.weight") return "output_norm.weight";
  if (hf_name == "lm_head.weight") return "output.weight";
  const std::string prefix = "model.layers.";
  LORAKV_ASSERT(hf_name.rfind(prefix, 0) == 0, "no GGUF name for " << hf_name);
  const size_t dot = hf_name.find('.', prefix.size());
  const std::string layer = hf_name.substr(prefix.size(), dot - prefix.size());
  const std::string rest = hf_name.substr(dot + 1);
  const std::string blk = "blk." + layer + ".";
  for (const auto& [hf, gguf] : norm_names) {
    if (rest == hf) return blk + gguf;
  }
  for (int i = 0; i < kNumModules; ++i) {  // projections: formats/llama_modules.h's two names
    const Module m = static_cast<Module>(i);
    const std::string path = module_path(std::stoll(layer), m);
    for (const char* suffix : {".weight", ".bias"}) {
      if (hf_name == path + suffix) return blk + gguf_module_name(m) + suffix;
    }
  }
  LORAKV_ASSERT(false, "no GGUF name for " << hf_name);
  return "";
}

ModelWeights load_gguf_weights(const formats::GgufFile& file, const ModelConfig& c, at::ScalarType dtype) {
  const bool unpermute = gguf_permutes_qk(c.architecture);
  return assemble_weights(c, dtype, [&](const std::string& hf_name, const std::vector<int64_t>& shape) {
    at::Tensor t = load_tensor(file, gguf_tensor_name(hf_name), shape, at::kFloat);
    if (unpermute && hf_name.find(".self_attn.q_proj.") != std::string::npos) return unpermute_qk_rows(t, c.num_heads);
    if (unpermute && hf_name.find(".self_attn.k_proj.") != std::string::npos) return unpermute_qk_rows(t, c.num_kv_heads);
    return t;
  });
}

}  // namespace lorakv::runtime
