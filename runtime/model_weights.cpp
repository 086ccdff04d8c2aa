// runtime/model_weights.cpp: GGUF tensors -> ATen tensors in HF layout.
#include "lorakv/runtime/model_weights.h"

#include <ATen/Parallel.h>

#include <cstring>

#include "lorakv/common/errors.h"
#include "lorakv/common/logging.h"
#include "lorakv/common/shape_string.h"
#include "lorakv/formats/gguf_file.h"

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

namespace {

// The dense dtype a weight of `form` is kept in when it is not quantised.
at::ScalarType dense_dtype(WeightForm form, at::ScalarType model_dtype) {
  switch (form) {
    case WeightForm::kFloat32: return at::kFloat;
    case WeightForm::kBFloat16: return at::kBFloat16;
    case WeightForm::kNative: break;
  }
  return model_dtype;
}

// For the load line: how quantised projections are laid out and multiplied at decode
// ("" for dense weights), e.g. "; q4 codes in pair order, decode GEMV activations int8".
std::string quant_layout_note(const ModelWeights& w) {
  const kernels::QuantMatrix& q = w.layers.empty() ? w.embed_tokens.quant : w.layers[0].qkv.quant;
  if (!q.defined()) return "";
  return std::string("; ") + (q.format() == kernels::QuantFormat::kQ4 ? "q4 codes in pair order, " : "") +
         "decode GEMV activations " + kernels::quant_activations_name(kernels::selected_quant_activations()) + " (" +
         kernels::kQuantActivationsVariable + ")";
}

// One projection's weight as `form` keeps it.
LinearWeight fetch_linear(const std::string& name, const std::vector<int64_t>& shape, WeightForm form,
                          at::ScalarType model_dtype, const TensorFetcher& fetch, const QuantFetcher& fetch_quant) {
  LinearWeight w;
  if (form == WeightForm::kNative && fetch_quant) w.quant = fetch_quant(name, shape);
  if (!w.quant.defined()) w.dense = fetch(name, shape).to(dense_dtype(form, model_dtype));
  return w;
}

// Rows of several projections stacked into one weight (q|k|v, gate|up): blocks stacked when
// all are quantised alike, else everything dense in the first dense part's dtype (or the
// model's). Biases stack the same way, zeros for a part without one.
LinearWeight stack_rows(const std::vector<LinearWeight>& parts, at::ScalarType model_dtype) {
  LinearWeight out;
  bool all_quant = true;
  at::ScalarType dtype = model_dtype;
  for (const LinearWeight& p : parts) {
    all_quant = all_quant && p.quant.defined() && p.quant.format() == parts[0].quant.format();
    if (p.dense.defined()) dtype = p.dense.scalar_type();
  }
  if (all_quant) {
    std::vector<const kernels::QuantMatrix*> qs;
    for (const LinearWeight& p : parts) qs.push_back(&p.quant);
    out.quant = kernels::QuantMatrix::stack_rows(qs);
  } else {
    std::vector<at::Tensor> ds;
    for (const LinearWeight& p : parts) ds.push_back(p.dense.defined() ? p.dense.to(dtype) : p.quant.dequantize().to(dtype));
    out.dense = at::cat(ds, 0);
  }
  bool any_bias = false;
  for (const LinearWeight& p : parts) any_bias = any_bias || p.bias.defined();
  if (any_bias) {
    std::vector<at::Tensor> bs;
    for (const LinearWeight& p : parts) {
      bs.push_back(p.bias.defined() ? p.bias : at::zeros({p.out_features()}, at::TensorOptions(model_dtype)));
    }
    out.bias = at::cat(bs, 0);
  }
  return out;
}

// Dense views of the stacked rows: [offset, offset + rows) of `fused` for each part.
void split_views(const LinearWeight& fused, const std::vector<std::pair<at::Tensor*, int64_t>>& parts) {
  int64_t offset = 0;
  for (const auto& [view, rows] : parts) {
    if (fused.dense.defined()) *view = fused.dense.narrow(0, offset, rows);
    offset += rows;
  }
}

}  // namespace

ModelWeights assemble_weights(const ModelConfig& c, at::ScalarType dtype, WeightForm form, const TensorFetcher& fetch,
                              const QuantFetcher& fetch_quant) {
  const int64_t h = c.hidden_dim;
  const int64_t q_dim = c.num_heads * c.head_dim;
  const int64_t kv_dim = c.num_kv_heads * c.head_dim;
  log::Stopwatch watch;
  auto get = [&](const std::string& name, std::vector<int64_t> shape) {
    at::Tensor t = fetch(name, shape);
    return t.scalar_type() == dtype ? t : t.to(dtype);
  };
  auto linear = [&](const std::string& name, std::vector<int64_t> shape) {
    return fetch_linear(name, shape, form, dtype, fetch, fetch_quant);
  };

  ModelWeights w;
  w.form = form;
  w.embed_tokens = linear("model.embed_tokens.weight", {c.vocab_size, h});
  w.final_norm = get("model.norm.weight", {h});
  w.lm_head = c.tied_embeddings ? w.embed_tokens : linear("lm_head.weight", {c.vocab_size, h});
  w.layers.reserve(static_cast<size_t>(c.num_layers));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    auto proj = [&](Module m, const char* suffix) { return module_path(l, m) + suffix; };
    LayerWeights lw;
    lw.attn_norm = get(p + "input_layernorm.weight", {h});
    lw.mlp_norm = get(p + "post_attention_layernorm.weight", {h});
    LinearWeight q = linear(proj(Module::kQ, ".weight"), {q_dim, h});
    LinearWeight k = linear(proj(Module::kK, ".weight"), {kv_dim, h});
    LinearWeight v = linear(proj(Module::kV, ".weight"), {kv_dim, h});
    if (c.attention_bias) {
      q.bias = get(proj(Module::kQ, ".bias"), {q_dim});
      k.bias = get(proj(Module::kK, ".bias"), {kv_dim});
      v.bias = get(proj(Module::kV, ".bias"), {kv_dim});
    }
    lw.qkv = stack_rows({q, k, v}, dtype);
    split_views(lw.qkv, {{&lw.q_proj, q_dim}, {&lw.k_proj, kv_dim}, {&lw.v_proj, kv_dim}});
    lw.o = linear(proj(Module::kO, ".weight"), {h, q_dim});
    lw.o_proj = lw.o.dense;
    lw.gate_up = stack_rows({linear(proj(Module::kGate, ".weight"), {c.intermediate_dim, h}),
                             linear(proj(Module::kUp, ".weight"), {c.intermediate_dim, h})},
                            dtype);
    split_views(lw.gate_up, {{&lw.gate_proj, c.intermediate_dim}, {&lw.up_proj, c.intermediate_dim}});
    lw.down = linear(proj(Module::kDown, ".weight"), {h, c.intermediate_dim});
    lw.down_proj = lw.down.dense;
    w.num_bytes += static_cast<int64_t>(lw.attn_norm.nbytes() + lw.mlp_norm.nbytes()) + lw.qkv.nbytes() +
                   lw.o.nbytes() + lw.gate_up.nbytes() + lw.down.nbytes();
    w.layers.push_back(std::move(lw));
    log::debug("loaded layer " + std::to_string(l + 1) + "/" + std::to_string(c.num_layers));
  }
  w.num_bytes += w.embed_tokens.nbytes() + static_cast<int64_t>(w.final_norm.nbytes());
  if (!c.tied_embeddings) w.num_bytes += w.lm_head.nbytes();
  log::info("loaded " + std::to_string(c.num_layers) + " layers, " + std::to_string(w.num_bytes >> 20) +
            " MiB of weights (" + weight_form_name(form) + ": projections " + w.layers[0].qkv.form_name() +
            ", embeddings " + w.embed_tokens.form_name() + quant_layout_note(w) + ") in " +
            std::to_string(watch.seconds()).substr(0, 4) + " s");
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

kernels::QuantMatrix quant_matrix_from_gguf(const formats::GgufTensorInfo& info) {
  const formats::GgmlType type = info.type();
  if (type != formats::GgmlType::kQ4_0 && type != formats::GgmlType::kQ4_1 && type != formats::GgmlType::kQ8_0) return {};
  const int64_t cols = info.dims[0];
  const int64_t rows = info.num_elements / cols;
  const int64_t nb = cols / kernels::kQuantBlock;
  const bool q8 = type == formats::GgmlType::kQ8_0;
  // ggml blocks: half d, (Q4_1: half m), then 16 nibble bytes (Q4) or 32 int8 codes (Q8).
  const int64_t block_bytes = q8 ? 34 : type == formats::GgmlType::kQ4_1 ? 20 : 18;
  const int64_t code_bytes = q8 ? 32 : 16;
  at::Tensor codes = at::empty({rows, nb * code_bytes}, q8 ? at::kChar : at::kByte);
  at::Tensor scales = at::empty({rows, nb}, at::kShort);
  at::Tensor mins = q8 ? at::Tensor() : at::empty({rows, nb}, at::kShort);
  auto* c = static_cast<uint8_t*>(codes.data_ptr());
  auto* d = scales.data_ptr<int16_t>();
  int16_t* m = q8 ? nullptr : mins.data_ptr<int16_t>();
  at::parallel_for(0, rows, 256, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* src = info.data + (r * nb + b) * block_bytes;
        const int64_t i = r * nb + b;
        std::memcpy(&d[i], src, 2);
        if (type == formats::GgmlType::kQ4_1) {
          std::memcpy(&m[i], src + 2, 2);
        } else if (type == formats::GgmlType::kQ4_0) {  // (q - 8) d = d q + (-8 d); -8d is exact in half
          uint16_t bits;
          std::memcpy(&bits, src, 2);
          const c10::Half minus_8d(-8.0f * formats::fp16_to_f32(bits));
          std::memcpy(&m[i], &minus_8d.x, 2);
        }
        std::memcpy(c + i * code_bytes, src + block_bytes - code_bytes, static_cast<size_t>(code_bytes));
      }
    }
  });
  return kernels::QuantMatrix(q8 ? kernels::QuantFormat::kQ8 : kernels::QuantFormat::kQ4, codes, scales, mins);
}

ModelWeights load_gguf_weights(const formats::GgufFile& file, const ModelConfig& c, at::ScalarType dtype,
                               WeightForm form) {
  const bool unpermute = gguf_permutes_qk(c.architecture);
  // The row order that undoes llama.cpp's Q/K permutation, read off a column of row numbers.
  auto qk_heads = [&](const std::string& hf_name) -> int64_t {
    if (!unpermute) return 0;
    if (hf_name.find(".self_attn.q_proj.") != std::string::npos) return c.num_heads;
    if (hf_name.find(".self_attn.k_proj.") != std::string::npos) return c.num_kv_heads;
    return 0;
  };
  auto fetch = [&](const std::string& hf_name, const std::vector<int64_t>& shape) {
    at::Tensor t = load_tensor(file, gguf_tensor_name(hf_name), shape, at::kFloat);
    const int64_t heads = qk_heads(hf_name);
    return heads > 0 ? unpermute_qk_rows(t, heads) : t;
  };
  auto fetch_quant = [&](const std::string& hf_name, const std::vector<int64_t>& shape) {
    const std::string name = gguf_tensor_name(hf_name);
    const formats::GgufTensorInfo& info = file.tensor(name);
    if (info.torch_shape() != shape) return kernels::QuantMatrix();  // fetch() reports the mismatch
    kernels::QuantMatrix q = quant_matrix_from_gguf(info);
    const int64_t heads = qk_heads(hf_name);
    if (!q.defined() || heads == 0) return q;
    const at::Tensor row_ids = at::arange(shape[0], at::kLong).to(at::kFloat).unsqueeze(1);  // exact below 2^24
    return q.select_rows(unpermute_qk_rows(row_ids, heads).squeeze(1).to(at::kLong));
  };
  return assemble_weights(c, dtype, form, fetch, fetch_quant);
}

}  // namespace lorakv::runtime
