// runtime/llama_model.h: the Llama-family forward pass (RMSNorm, RoPE, GQA attention,
// SwiGLU MLP, tied or separate LM head) over a batch of sequences of different lengths.
// Prefill and incremental decode are the same call: each sequence's new tokens continue
// from the rows its KV cache already holds.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "lorakv/adapters/adapter.h"
#include "lorakv/common/ids.h"
#include "lorakv/kernels/lora.h"
#include "lorakv/runtime/kv_cache.h"
#include "lorakv/runtime/model_config.h"
#include "lorakv/runtime/model_weights.h"

namespace lorakv::formats {
class GgufFile;
}

namespace lorakv::runtime {

// New tokens for one sequence in a step.
struct SequenceInput {
  SeqId seq;
  std::vector<int32_t> tokens;  // appended after the sequence's cached rows
  // The LoRA adapter this sequence runs with; null for the base model. Not owned: the
  // caller keeps it alive (pinned) for the call; its dtype must be the model's.
  const adapters::Adapter* adapter = nullptr;
  // false: the adapter's k_proj and v_proj updates are left out of K and V, so they stay the
  // base rows; the attention backend keeps the adapter's part apart as residual rows C = X A
  // (the shared-base modes). true: K and V include the adapter's output (full rows).
  bool kv_lora_in_rows = true;
  // Also the base rows' K and V (LayerAttentionInput::k_base, v_base), the adapter's update
  // left out, beside K and V with it: a reply kept as full rows for its author to read and
  // as the shared layout's base rows for its commit (writer `author`).
  bool base_kv_too = false;
  // Position of tokens[0] with an AttentionBackend (the KvCache overload continues from the
  // cache's rows instead).
  int64_t first_position = 0;
  // RoPE position of tokens[0] when it differs from first_position (AttentionBackend only):
  // endless streaming rotates by a token's index among the rows kept, while the causal mask
  // keeps its position. -1: first_position.
  int64_t rope_first_position = -1;
  // Logits for every new token of this sequence, not only its last (ForwardOptions::all_logits
  // asks it of every sequence). The LM head runs on the rows asked for, nobody else's.
  bool all_logits = false;
  // An activated LoRA adapter (adapters/adapter.h) runs only where its caller applied the
  // activation rule: true says every new token of this sequence lies in the adapted span (the
  // engine's private work of an aLoRA reader from its invocation on). false refuses one.
  bool activation_applied = false;
};

// The packed rows that run with one adapter (grouped over every sequence using it with the
// same kv_lora_in_rows).
struct AdapterRows {
  const adapters::Adapter* adapter = nullptr;
  kernels::LoraRows rows;  // one contiguous range when its sequences are adjacent, else indices
  bool kv_lora_in_rows = true;
};

struct ForwardOptions {
  bool all_logits = false;  // logits for every new token, not only each sequence's last
};

// Index data built once per forward and read by every layer (plan once, run per layer).
struct StepPlan {
  std::vector<int64_t> offsets;  // rows of sequence i: [offsets[i], offsets[i+1]) of the packed batch
  at::Tensor positions;          // int64 [T]: each packed row's token position
  std::vector<AdapterRows> adapter_rows;  // one entry per distinct (adapter, kv_lora_in_rows)
  at::Tensor rope_cos, rope_sin;          // float32 [T, head_dim]: each row's rotation
};

// One layer's attention inputs for the whole packed batch (rows as in StepPlan::offsets).
struct LayerAttentionInput {
  int64_t layer = 0;
  at::Tensor x;    // [T, hidden]: the normed attention input (residual shrinks C = X A read it)
  at::Tensor q;    // [T, num_heads, head_dim], RoPE applied
  at::Tensor k;    // [T, num_kv_heads, head_dim], RoPE applied; base rows unless kv_lora_in_rows
  at::Tensor k_before_rope;  // the same before RoPE, when the backend asks (keys_before_rope())
  at::Tensor v;    // [T, num_kv_heads, head_dim]
  // When a sequence asks (SequenceInput::base_kv_too): K (RoPE applied, and before it when
  // the backend asks) and V of every row without any adapter's k/v update; else undefined.
  at::Tensor k_base, k_base_before_rope, v_base;
  at::Tensor out;  // [T, num_heads, head_dim] to fill, q's dtype
};

// Where a layer's new K/V rows go and what each sequence's queries attend over: the seam
// between the model (projections, norms, MLP) and the cache. The contiguous reference cache
// and the engine's paged, shared cache implement it.
class AttentionBackend {
 public:
  virtual ~AttentionBackend() = default;
  // Stores the step's rows of `in.layer` and writes the attention output of every row.
  virtual void attend(const LayerAttentionInput& in, const StepPlan& plan) = 0;
  // True: the backend stores keys before RoPE, so each layer's input carries them too.
  virtual bool keys_before_rope() const { return false; }
};

// What an adapter must fit, from a model's hyperparameters (a header is enough).
adapters::BaseModelShape adapter_shape_of(const ModelConfig& config);

class LlamaModel {
 public:
  LlamaModel(ModelConfig config, ModelWeights weights);

  // Loads config and weights from a GGUF file; dtype (activations, norms) at::kFloat or
  // at::kBFloat16; weights kept as `form` says. Throws ModelLoadError.
  static std::unique_ptr<LlamaModel> from_gguf(const formats::GgufFile& file, at::ScalarType dtype = at::kFloat,
                                               WeightForm form = WeightForm::kNative);

  at::ScalarType dtype() const { return weights_.final_norm.scalar_type(); }

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  // What adapters must fit (layers, widths, heads) for this model.
  adapters::BaseModelShape adapter_shape() const;  // adapter_shape_of(config())
  // Throws ConfigError for an adapter of another model (shape) or dtype, or whose aLoRA
  // invocation tokens lie outside the vocabulary. Unless `activation_applied`, also for an
  // activated LoRA (adapters/adapter.h): run as a standard LoRA it would adapt every token,
  // and only the engine applies its rule (runtime/engine.h). Called wherever an adapter meets
  // the model: the engine adding a reader and every forward.
  void check_adapter(const adapters::Adapter& adapter, bool activation_applied = false) const;

  // A cache sized for this model.
  std::unique_ptr<KvCache> make_cache() const;

  // Runs the new tokens of every sequence through the model, appending their K/V rows to
  // `cache` and committing them. Returns float32 logits [rows, vocab] in input order: each
  // sequence's last new token, or every new token of the sequences with all_logits (all of
  // them with options.all_logits). Throws ConfigError for out-of-range token ids or an empty input.
  at::Tensor forward(const std::vector<SequenceInput>& batch, KvCache& cache, ForwardOptions options = {}) const;
  // The same over any attention backend (the engine's paged cache); the backend is told each
  // layer's rows and stores them itself. Returns what forward returns.
  at::Tensor forward(const std::vector<SequenceInput>& batch, AttentionBackend& backend,
                     ForwardOptions options = {}) const;

  // RoPE tables in the fused kernel's layout (rotate_half halves): float32 [rows, head_dim / 2].
  std::pair<at::Tensor, at::Tensor> rope_half_tables(int64_t rows) const;
  // Softmax scale of attention.
  double attention_scale() const;
  // Drops the adapter factors kept across decode steps (lora_stacks_), so an adapter
  // unloaded from its registry is freed once no reader holds it. Thread-safe.
  void forget_adapter_stacks() const;

 private:
  // The one choke point for every linear projection of a layer: x [T, in] -> [T, out]:
  // the base GEMM of `weight` (the stacked rows of `modules`, in order), then each module's
  // adapter shrink/expand over its rows (plan.adapter_rows) on that module's columns.
  // `base_copy`, when given, receives the base GEMM's columns from `base_copy_from` on,
  // before any adapter's update.
  at::Tensor project(const at::Tensor& x, int64_t layer, const LinearWeight& weight,
                     std::initializer_list<Module> modules, const StepPlan& plan,
                     at::Tensor* base_copy = nullptr, int64_t base_copy_from = 0) const;
  at::Tensor forward_from(const std::vector<SequenceInput>& batch, const std::function<int64_t(size_t)>& first_position,
                          AttentionBackend& backend, ForwardOptions options) const;
  // Output width of one module's projection.
  int64_t module_width(Module module) const;
  // Builds StepPlan::adapter_rows; throws ConfigError for an adapter of another model or dtype.
  std::vector<AdapterRows> plan_adapters(const std::vector<SequenceInput>& batch, const std::vector<int64_t>& offsets) const;

  ModelConfig config_;
  ModelWeights weights_;
  at::Tensor inv_freq_;  // float32 [head_dim / 2]
  // Stacked adapter factors of decode batches, kept across steps: one per (layer, module).
  mutable std::vector<kernels::LoraStackCache> lora_stacks_;
};

}  // namespace lorakv::runtime
