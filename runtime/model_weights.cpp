// runtime/model_weights.cpp: GGUF tensors -> ATen tensors in HF layout.
#include "runtime/model_weights.h"

#include <ATen/Parallel.h>

#include "common/errors.h"
#include "common/logging.h"
#include "formats/gguf_file.h"

namespace lorakv::runtime {
namespace {

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

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

const char* module_name(Module m) {
  static const char* names[kNumModules] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  return names[static_cast<int>(m)];
}

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

at::Tensor unpermute_qk_rows(const at::Tensor& w, int64_t num_heads) {
  const int64_t out = w.size(0);
  const int64_t head_dim = out / num_heads;
  LORAKV_ASSERT(out % num_heads == 0 && head_dim % 2 == 0, "bad Q/K shape for un-permute");
  // GGUF row 2j+i of a head holds HF row j + i*head_dim/2: view [heads, hd/2, 2, ...],
  // swap the two middle axes, flatten back.
  std::vector<int64_t> shape = {num_heads, head_dim / 2, 2};
  for (int64_t d = 1; d < w.dim(); ++d) shape.push_back(w.size(d));
  return w.reshape(shape).transpose(1, 2).reshape(w.sizes()).contiguous();
}

ModelWeights load_gguf_weights(const formats::GgufFile& file, const ModelConfig& c, at::ScalarType dtype) {
  const int64_t h = c.hidden_dim;
  const int64_t q_dim = c.num_heads * c.head_dim;
  const int64_t kv_dim = c.num_kv_heads * c.head_dim;
  const bool unpermute = gguf_permutes_qk(c.architecture);
  log::Stopwatch watch;

  ModelWeights w;
  w.embed_tokens = load_tensor(file, "token_embd.weight", {c.vocab_size, h}, dtype);
  w.final_norm = load_tensor(file, "output_norm.weight", {h}, dtype);
  w.lm_head = c.tied_embeddings ? w.embed_tokens : load_tensor(file, "output.weight", {c.vocab_size, h}, dtype);
  w.layers.reserve(static_cast<size_t>(c.num_layers));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights lw;
    lw.attn_norm = load_tensor(file, p + "attn_norm.weight", {h}, dtype);
    lw.q_proj = load_tensor(file, p + "attn_q.weight", {q_dim, h}, dtype);
    lw.k_proj = load_tensor(file, p + "attn_k.weight", {kv_dim, h}, dtype);
    if (unpermute) {
      lw.q_proj = unpermute_qk_rows(lw.q_proj, c.num_heads);
      lw.k_proj = unpermute_qk_rows(lw.k_proj, c.num_kv_heads);
    }
    lw.v_proj = load_tensor(file, p + "attn_v.weight", {kv_dim, h}, dtype);
    lw.o_proj = load_tensor(file, p + "attn_output.weight", {h, q_dim}, dtype);
    lw.mlp_norm = load_tensor(file, p + "ffn_norm.weight", {h}, dtype);
    lw.gate_proj = load_tensor(file, p + "ffn_gate.weight", {c.intermediate_dim, h}, dtype);
    lw.up_proj = load_tensor(file, p + "ffn_up.weight", {c.intermediate_dim, h}, dtype);
    lw.down_proj = load_tensor(file, p + "ffn_down.weight", {h, c.intermediate_dim}, dtype);
    for (const at::Tensor* t : {&lw.attn_norm, &lw.q_proj, &lw.k_proj, &lw.v_proj, &lw.o_proj, &lw.mlp_norm,
                                &lw.gate_proj, &lw.up_proj, &lw.down_proj}) {
      w.num_bytes += static_cast<int64_t>(t->nbytes());
    }
    w.layers.push_back(std::move(lw));
    if ((l + 1) % 10 == 0 || l + 1 == c.num_layers) {
      log::debug("loaded layer " + std::to_string(l + 1) + "/" + std::to_string(c.num_layers));
    }
  }
  w.num_bytes += static_cast<int64_t>(w.embed_tokens.nbytes() + w.final_norm.nbytes());
  if (!c.tied_embeddings) w.num_bytes += static_cast<int64_t>(w.lm_head.nbytes());
  log::info("loaded " + std::to_string(c.num_layers) + " layers, " + std::to_string(w.num_bytes >> 20) +
            " MiB of " + std::string(c10::toString(dtype)) + " weights in " + std::to_string(watch.seconds()).substr(0, 4) + " s");
  return w;
}

}  // namespace lorakv::runtime
