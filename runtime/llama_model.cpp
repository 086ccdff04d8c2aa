// runtime/llama_model.cpp: the forward pass. All new tokens of the batch are packed into
// one [T_total, hidden] matrix so every projection is a single matmul; attention goes
// through an AttentionBackend: per sequence over the contiguous reference cache
// (runtime/kv_cache.h), or the engine's paged cache with one fused kernel call per layer
// for every sequence of the step.
#include "lorakv/runtime/llama_model.h"

#include <algorithm>

#include "lorakv/common/errors.h"
#include "lorakv/formats/gguf_file.h"
#include "lorakv/kernels/attention.h"
#include "lorakv/runtime/layer_attention.h"
#include "lorakv/runtime/reproducible_blas.h"
#include "lorakv/kernels/rope.h"

namespace lorakv::runtime {

namespace {

// RoPE inverse frequencies with the config's scaling applied. float32 [head_dim / 2].
at::Tensor make_inv_freq(const ModelConfig& c) {
  at::Tensor inv_freq = kernels::rope_inv_freq(c.head_dim, c.rope_theta);
  const RopeScaling& s = c.rope_scaling;
  if (s.type == "linear") return inv_freq / s.factor;
  if (s.type == "llama3") {
    return kernels::rope_llama3_scaling(inv_freq, s.factor, s.low_freq_factor, s.high_freq_factor,
                                        static_cast<double>(s.original_max_position));
  }
  LORAKV_ASSERT(s.type == "default", "unchecked rope scaling type " << s.type);
  return inv_freq;
}

}  // namespace

LlamaModel::LlamaModel(ModelConfig config, ModelWeights weights)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      inv_freq_(make_inv_freq(config_)),
      lora_stacks_(static_cast<size_t>(config_.num_layers * kNumModules)) {
  (void)reproducible_blas_requested();  // links the request (reproducible_blas.cpp) into every program with a model
}

std::unique_ptr<LlamaModel> LlamaModel::from_gguf(const formats::GgufFile& file, at::ScalarType dtype,
                                                  WeightForm form) {
  if (dtype != at::kFloat && dtype != at::kBFloat16) {
    throw ConfigError("unsupported model dtype", {"", "dtype", "float32 or bfloat16", c10::toString(dtype), ""});
  }
  ModelConfig config = read_model_config(file);
  ModelWeights weights = load_gguf_weights(file, config, dtype, form);
  return std::make_unique<LlamaModel>(std::move(config), std::move(weights));
}

std::unique_ptr<KvCache> LlamaModel::make_cache() const {
  return std::make_unique<ContiguousKvCache>(config_.num_layers, config_.num_kv_heads, config_.head_dim, dtype());
}

adapters::BaseModelShape adapter_shape_of(const ModelConfig& c) {
  return {c.architecture, c.num_layers, c.hidden_dim,      c.num_heads,
          c.num_kv_heads, c.head_dim,   c.intermediate_dim, gguf_permutes_qk(c.architecture),
          c.vocab_size};
}

adapters::BaseModelShape LlamaModel::adapter_shape() const { return adapter_shape_of(config_); }

int64_t LlamaModel::module_width(Module module) const {
  const ModelConfig& c = config_;
  switch (module) {
    case Module::kQ: return c.num_heads * c.head_dim;
    case Module::kK:
    case Module::kV: return c.num_kv_heads * c.head_dim;
    case Module::kGate:
    case Module::kUp: return c.intermediate_dim;
    case Module::kO:
    case Module::kDown: return c.hidden_dim;
  }
  return 0;
}

at::Tensor LlamaModel::project(const at::Tensor& x, int64_t layer, const LinearWeight& weight,
                               std::initializer_list<Module> modules, const StepPlan& plan,
                               at::Tensor* base_copy, int64_t base_copy_from) const {
  at::Tensor out = weight.linear(x);  // [T, Σ widths]: the base projection, kept apart from LoRA
  if (base_copy != nullptr) *base_copy = out.narrow(1, base_copy_from, out.size(1) - base_copy_from).clone();
  if (plan.adapter_rows.empty()) return out;
  int64_t offset = 0;
  for (Module module : modules) {
    const int64_t width = module_width(module);
    // runtime::Module and adapters::ModuleId are one type (formats::LlamaModule).
    std::vector<kernels::LoraSegment> segments;
    const bool kv = module == Module::kK || module == Module::kV;
    for (const AdapterRows& g : plan.adapter_rows) {
      if (kv && !g.kv_lora_in_rows) continue;  // kept apart as residual rows by the backend
      if (const adapters::LoraModule* m = g.adapter->find(layer, module)) segments.push_back({g.rows, m->a, m->b});
    }
    if (!segments.empty()) {
      at::Tensor columns = out.narrow(1, offset, width);  // a view: the update lands in `out`
      kernels::lora_add(columns, x, segments,
                        &lora_stacks_[static_cast<size_t>(layer * kNumModules + static_cast<int64_t>(module))]);
    }
    offset += width;
  }
  return out;
}

void LlamaModel::check_adapter(const adapters::Adapter& a, bool activation_applied) const {
  const adapters::BaseModelShape want = adapter_shape(), have = a.base_shape();
  if (have.num_layers != want.num_layers || have.hidden != want.hidden || have.num_heads != want.num_heads ||
      have.num_kv_heads != want.num_kv_heads || have.head_dim != want.head_dim || have.intermediate != want.intermediate) {
    throw ConfigError("adapter was loaded for another base model", {a.source(), a.name(), config_.name, "", ""});
  }
  if (a.dtype() != dtype()) {
    throw ConfigError("adapter dtype differs from the model's",
                      {a.source(), a.name(), c10::toString(dtype()), c10::toString(a.dtype()), ""});
  }
  if (a.activated()) {
    const std::vector<int32_t>& tokens = a.invocation_tokens();
    const std::string file = a.invocation_tokens_file(), key = adapters::invocation_tokens_key(a.format());
    // Out-of-vocabulary ids first: such an adapter is wrong for this model whatever runs it.
    for (int32_t t : tokens) {
      if (t < 0 || t >= config_.vocab_size) {
        throw ConfigError("activated LoRA invocation token outside the model's vocabulary",
                          {file, key, "token ids in 0.." + std::to_string(config_.vocab_size - 1), std::to_string(t),
                           "was adapter '" + a.name() + "' trained for another base model?"});
      }
    }
    if (activation_applied) return;
    // Run as a standard LoRA it would adapt every position instead of those from its invocation on.
    throw ConfigError("adapter '" + a.name() + "' is an activated LoRA (aLoRA): it runs only in the engine (sessions, "
                      "lorakv run), which applies its activation rule",
                      {file, key, "a standard LoRA adapter", std::to_string(tokens.size()) + " invocation tokens",
                       "run it through the engine; running it as a standard LoRA would adapt every token"});
  }
}

// Groups the batch's rows by adapter: adjacent sequences with one adapter form a range;
// an adapter whose sequences are apart gets an index tensor (still one matmul pair).
std::vector<AdapterRows> LlamaModel::plan_adapters(const std::vector<SequenceInput>& batch,
                                                   const std::vector<int64_t>& offsets) const {
  std::vector<std::pair<const adapters::Adapter*, bool>> order;
  std::vector<std::vector<size_t>> members;
  for (size_t i = 0; i < batch.size(); ++i) {
    const adapters::Adapter* a = batch[i].adapter;
    if (a == nullptr) continue;
    if (a->activated() && !batch[i].activation_applied) check_adapter(*a);  // throws
    const std::pair<const adapters::Adapter*, bool> key{a, batch[i].kv_lora_in_rows};
    auto it = std::find(order.begin(), order.end(), key);
    if (it == order.end()) {
      check_adapter(*a, /*activation_applied=*/true);  // each sequence's activation checked above
      order.push_back(key);
      members.emplace_back();
      it = order.end() - 1;
    }
    members[static_cast<size_t>(it - order.begin())].push_back(i);
  }
  std::vector<AdapterRows> out;
  for (size_t g = 0; g < order.size(); ++g) {
    const std::vector<size_t>& seqs = members[g];
    bool adjacent = true;
    for (size_t k = 1; k < seqs.size(); ++k) adjacent = adjacent && seqs[k] == seqs[k - 1] + 1;
    AdapterRows rows{order[g].first, {}, order[g].second};
    if (adjacent) {
      rows.rows.begin = offsets[seqs.front()];
      rows.rows.length = offsets[seqs.back() + 1] - rows.rows.begin;
    } else {
      std::vector<int64_t> idx;
      for (size_t i : seqs) {
        for (int64_t r = offsets[i]; r < offsets[i + 1]; ++r) idx.push_back(r);
      }
      rows.rows.rows = at::tensor(idx, at::kLong);
    }
    out.push_back(std::move(rows));
  }
  return out;
}

namespace {

// The contiguous per-sequence cache behind the backend seam: rows appended per layer, one
// fused-kernel call for every sequence. The reference path of tests.
class ContiguousAttention final : public AttentionBackend {
 public:
  ContiguousAttention(const ModelConfig& c, const std::vector<SequenceInput>& batch, KvCache& cache, double scale)
      : c_(c), batch_(batch), cache_(cache), scale_(scale) {}
  void attend(const LayerAttentionInput& in, const StepPlan& plan) override {
    std::vector<SequenceAttention> seqs;
    seqs.reserve(batch_.size());
    for (size_t i = 0; i < batch_.size(); ++i) {
      const int64_t begin = plan.offsets[i], len = plan.offsets[i + 1] - begin;
      const at::Tensor pos = plan.positions.narrow(0, begin, len);
      cache_.append(batch_[i].seq, in.layer, in.k.narrow(0, begin, len), in.v.narrow(0, begin, len), pos);
      seqs.push_back({in.q.narrow(0, begin, len), pos, cache_.view(batch_[i].seq, in.layer), in.out.narrow(0, begin, len)});
    }
    attend_sequences(seqs, c_.num_heads, c_.num_kv_heads, c_.head_dim, scale_, c_.sliding_window);
  }

 private:
  const ModelConfig& c_;
  const std::vector<SequenceInput>& batch_;
  KvCache& cache_;
  double scale_;
};

}  // namespace

double LlamaModel::attention_scale() const { return 1.0 / std::sqrt(static_cast<double>(config_.head_dim)); }

std::pair<at::Tensor, at::Tensor> LlamaModel::rope_half_tables(int64_t rows) const {
  const at::Tensor angles = at::outer(at::arange(rows, at::kFloat), inv_freq_);  // [rows, D/2]
  return {angles.cos().contiguous(), angles.sin().contiguous()};
}

at::Tensor LlamaModel::forward(const std::vector<SequenceInput>& batch, KvCache& cache,
                               ForwardOptions options) const {
  if (batch.empty()) throw ConfigError("forward called with no sequences");
  ContiguousAttention backend(config_, batch, cache, attention_scale());
  at::Tensor logits = forward_from(batch, [&](size_t i) { return cache.length(batch[i].seq); }, backend, options);
  for (const SequenceInput& s : batch) cache.commit(s.seq);
  return logits;
}

at::Tensor LlamaModel::forward(const std::vector<SequenceInput>& batch, AttentionBackend& backend,
                               ForwardOptions options) const {
  return forward_from(batch, [&](size_t i) { return batch[i].first_position; }, backend, options);
}

at::Tensor LlamaModel::forward_from(const std::vector<SequenceInput>& batch,
                                    const std::function<int64_t(size_t)>& first_position, AttentionBackend& backend,
                                    ForwardOptions options) const {
  const ModelConfig& c = config_;
  if (batch.empty()) throw ConfigError("forward called with no sequences");

  // Pack token ids and positions of all sequences: row offsets[i] .. offsets[i+1].
  std::vector<int64_t> ids, positions, rope_positions, offsets = {0};
  for (size_t i = 0; i < batch.size(); ++i) {
    const SequenceInput& s = batch[i];
    if (s.tokens.empty()) throw ConfigError("a sequence in the batch has no new tokens", {"", "seq " + std::to_string(s.seq.value())});
    const int64_t start = first_position(i);
    for (size_t t = 0; t < s.tokens.size(); ++t) {
      const int32_t id = s.tokens[t];
      if (id < 0 || id >= c.vocab_size) {
        throw ConfigError("token id out of range", {"", "", "0.." + std::to_string(c.vocab_size - 1), std::to_string(id), ""});
      }
      ids.push_back(id);
      positions.push_back(start + static_cast<int64_t>(t));
      rope_positions.push_back((s.rope_first_position >= 0 ? s.rope_first_position : start) + static_cast<int64_t>(t));
    }
    offsets.push_back(static_cast<int64_t>(ids.size()));
  }
  const int64_t total = static_cast<int64_t>(ids.size());
  at::Tensor id_tensor = at::tensor(ids, at::kLong);  // [T]
  StepPlan plan{offsets, at::tensor(positions, at::kLong), plan_adapters(batch, offsets), {}, {}};
  // RoPE by each row's rope position (its position unless the sequence gives another).
  std::tie(plan.rope_cos, plan.rope_sin) = kernels::rope_cos_sin(at::tensor(rope_positions, at::kLong), inv_freq_);  // [T, D] each

  const bool base_kv_too = std::any_of(batch.begin(), batch.end(), [](const SequenceInput& s) { return s.base_kv_too; });
  const LinearWeight& embed = weights_.embed_tokens;
  at::Tensor hidden = embed.quant.defined() ? embed.quant.dequantize_rows(id_tensor).to(dtype())
                                            : at::embedding(embed.dense, id_tensor).to(dtype());  // [T, hidden]
  const int64_t q_dim = c.num_heads * c.head_dim, kv_dim = c.num_kv_heads * c.head_dim;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const LayerWeights& w = weights_.layers[static_cast<size_t>(l)];
    LayerAttentionInput in;
    in.layer = l;
    in.x = kernels::rms_norm(hidden, w.attn_norm, c.rms_norm_eps);
    at::Tensor kv_base;  // [T, 2 kv]: K and V before any adapter's update, when a sequence asks
    const at::Tensor qkv = project(in.x, l, w.qkv, {Module::kQ, Module::kK, Module::kV}, plan,
                                   base_kv_too ? &kv_base : nullptr, q_dim);  // [T, q + 2 kv]
    in.q = qkv.narrow(1, 0, q_dim).view({total, c.num_heads, c.head_dim});
    in.k = qkv.narrow(1, q_dim, kv_dim).view({total, c.num_kv_heads, c.head_dim});
    in.v = qkv.narrow(1, q_dim + kv_dim, kv_dim).view({total, c.num_kv_heads, c.head_dim});
    if (backend.keys_before_rope()) in.k_before_rope = in.k.clone();
    kernels::apply_rope_(in.q, plan.rope_cos, plan.rope_sin);  // in place, in the qkv buffer
    kernels::apply_rope_(in.k, plan.rope_cos, plan.rope_sin);
    if (base_kv_too) {
      in.k_base = kv_base.narrow(1, 0, kv_dim).view({total, c.num_kv_heads, c.head_dim});
      in.v_base = kv_base.narrow(1, kv_dim, kv_dim).view({total, c.num_kv_heads, c.head_dim});
      if (backend.keys_before_rope()) in.k_base_before_rope = in.k_base.clone();
      kernels::apply_rope_(in.k_base, plan.rope_cos, plan.rope_sin);
    }
    in.out = at::empty({total, c.num_heads, c.head_dim}, in.q.options());
    backend.attend(in, plan);
    hidden.add_(project(in.out.view({total, q_dim}), l, w.o, {Module::kO}, plan));

    const at::Tensor x = kernels::rms_norm(hidden, w.mlp_norm, c.rms_norm_eps);
    const at::Tensor gate_up = project(x, l, w.gate_up, {Module::kGate, Module::kUp}, plan);  // [T, 2 I]
    const at::Tensor gated = at::silu(gate_up.narrow(1, 0, c.intermediate_dim)).mul_(
        gate_up.narrow(1, c.intermediate_dim, c.intermediate_dim));
    hidden.add_(project(gated, l, w.down, {Module::kDown}, plan));
  }

  const bool every_row = options.all_logits || std::all_of(batch.begin(), batch.end(), [](const SequenceInput& s) {
    return s.all_logits;
  });
  if (!every_row) {
    std::vector<int64_t> rows;  // the rows whose logits were asked for, in input order
    for (size_t i = 1; i < offsets.size(); ++i) {
      const int64_t first = batch[i - 1].all_logits ? offsets[i - 1] : offsets[i] - 1;
      for (int64_t r = first; r < offsets[i]; ++r) rows.push_back(r);
    }
    hidden = hidden.index_select(0, at::tensor(rows, at::kLong));
  }
  hidden = kernels::rms_norm(hidden, weights_.final_norm, c.rms_norm_eps);
  return weights_.lm_head.linear(hidden).to(at::kFloat);
}

void LlamaModel::forget_adapter_stacks() const {
  for (kernels::LoraStackCache& stacks : lora_stacks_) stacks.clear();
}

}  // namespace lorakv::runtime
