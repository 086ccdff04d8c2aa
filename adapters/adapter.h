// adapters/adapter.h: one loaded LoRA adapter: per (layer, projection) factors A and B in
// Hugging Face's layout with the scale folded into B, plus its content identity. Also
// the little the adapters layer knows about the base model (BaseModelShape), so it never
// includes runtime/ headers: the runtime fills the shape in.
//
// Identity (common/adapter_identity.h): SHA-256 over exactly what determines the adapter's
// output: per adapted (layer, module), in (layer, module) order: the layer, the module's
// name, the rank, the effective scale, and A and the scaled B as stored (dtype name, shape,
// bytes); then, for an activated LoRA only, its invocation tokens (so a standard LoRA's
// identity is what it was before aLoRA loaded). Every option that changes the math (alpha,
// rank_pattern, rsLoRA, target rules, the GGUF Q/K un-permute) acts through those. Not
// hashed: the name, path, format, load time. So two loads of the same files, in any
// registry or process, get one identity.
//
// Activated LoRA (aLoRA; PEFT's alora_invocation_tokens, llama.cpp's GGUF key
// adapter.alora.invocation_tokens): the factors act only on some positions of a sequence.
// The rule, as PEFT 0.21.2 defines it (tuners/lora/variants.py, calculate_alora_offsets and
// ALoraLinearVariant.forward): find the LAST occurrence of the whole invocation sequence in
// the sequence's tokens; every position from that occurrence's first token on is adapted,
// the invocation tokens included; positions before it run the base model alone. With no
// occurrence the adapter adapts nothing. PEFT's generate searches the prompt once: found,
// every generated token is adapted too; not found, none is, even if the reply later holds
// the sequence (get_alora_offsets_for_generate). lorakv's engine applies it to a reader's
// private work (runtime/engine.h); everywhere else LlamaModel::check_adapter refuses such an
// adapter, so one is never run as a standard LoRA (which would adapt every position).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "lorakv/common/adapter_identity.h"
#include "lorakv/common/sha256.h"
#include "lorakv/formats/llama_modules.h"

namespace lorakv::adapters {

// The seven adaptable projections: the runtime's Module is the same type.
using ModuleId = formats::LlamaModule;
constexpr int kNumModules = formats::kNumLlamaModules;
using formats::module_from_name;  // "q_proj" -> kQ
using formats::module_name;       // "q_proj", ... (HF names)
using formats::module_path;       // "model.layers.3.self_attn.q_proj"

// What an adapter must fit: the base model's dimensions.
struct BaseModelShape {
  std::string architecture = "llama";
  int64_t num_layers = 0;
  int64_t hidden = 0;        // hidden size
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t intermediate = 0;  // MLP width
  bool gguf_permutes_qk = true;  // GGUF stores this architecture's Q/K rows permuted (llama)
  int64_t vocab_size = 0;        // token ids an aLoRA's invocation tokens may use; 0: not checked

  int64_t in_dim(ModuleId m) const;   // input features of the projection
  int64_t out_dim(ModuleId m) const;  // output features (rows of W)
};

// One adapted projection.
struct LoraModule {
  int64_t layer = 0;
  ModuleId module = ModuleId::kQ;
  int64_t rank = 0;
  double alpha = 0;
  double scale = 0;  // alpha / rank, or alpha / sqrt(rank) with rsLoRA; already folded into b
  at::Tensor a;      // [rank, in_dim], the adapter's dtype (shrink)
  at::Tensor b;      // [out_dim, rank], the adapter's dtype, HF row order, times scale (expand)
  // Set by the Adapter that holds this module:
  Sha256Digest hash;       // this module's part of the identity: layer, module, rank, scale, A, scaled B
  AdapterIdentity a_hash;  // A with its layer, module, dtype and shape: the identity of the shared-A group
                           // of the adapters whose A here is byte-equal (the cache keys its rows by it)
};

enum class AdapterFormat { kPeft, kGgufLora };
const char* adapter_format_name(AdapterFormat f);  // "peft", "gguf-lora"
// Where each format stores aLoRA invocation tokens: "alora_invocation_tokens" (PEFT's
// adapter_config.json) or "adapter.alora.invocation_tokens" (GGUF).
const char* invocation_tokens_key(AdapterFormat f);

// Immutable after construction, so any number of threads may read one adapter; it lives
// as long as someone holds its shared_ptr (a running sequence pins it that way).
class Adapter {
 public:
  // `modules` need not be sorted; each (layer, module) at most once. Hashes every module
  // (LoraModule::hash, a_hash) from its fields and tensors, then the identity from those and
  // `invocation_tokens` (non-empty: an activated LoRA; the loaders check them).
  Adapter(std::string name, std::string source, AdapterFormat format, BaseModelShape shape,
          std::vector<LoraModule> modules, std::vector<int32_t> invocation_tokens = {});

  const std::string& name() const { return name_; }
  const std::string& source() const { return source_; }  // the directory or file loaded
  AdapterFormat format() const { return format_; }
  const BaseModelShape& base_shape() const { return shape_; }
  const AdapterIdentity& identity() const { return identity_; }
  std::string content_hash() const { return identity_.hex(); }  // 64 hex digits, for users
  at::ScalarType dtype() const;

  // The factors for one projection, or nullptr when it is not adapted.
  const LoraModule* find(int64_t layer, ModuleId m) const;
  const std::vector<LoraModule>& modules() const { return modules_; }  // sorted by layer, module
  std::vector<std::string> target_names() const;  // distinct module names, in ModuleId order
  int64_t min_rank() const;
  int64_t max_rank() const;
  int64_t num_bytes() const { return num_bytes_; }  // bytes held by every A and B

  // aLoRA (see the top of this file): the token ids whose last occurrence switches the adapter
  // on; empty for a standard LoRA.
  const std::vector<int32_t>& invocation_tokens() const { return invocation_tokens_; }
  bool activated() const { return !invocation_tokens_.empty(); }
  // The file that holds the invocation tokens (adapter_config.json in a PEFT directory, or
  // the GGUF file), for messages with invocation_tokens_key(format()).
  std::string invocation_tokens_file() const;
  // Index in `tokens` of the last occurrence of the whole invocation sequence (where the
  // adapted span begins), or -1: none, or a standard LoRA.
  int64_t find_invocation(const std::vector<int32_t>& tokens) const;

 private:
  std::string name_, source_;
  AdapterFormat format_;
  BaseModelShape shape_;
  std::vector<LoraModule> modules_;
  std::vector<int32_t> invocation_tokens_;
  std::vector<int32_t> index_;  // [num_layers * kNumModules] -> position in modules_, or -1
  AdapterIdentity identity_;
  int64_t num_bytes_ = 0;
};

// Builds one LoraModule from float32 factors, checking them against the base model:
// shapes, rank in [1, min(in, out)], finite values. Folds `scale` into B and casts both
// to `dtype` (the Adapter built from it hashes them). `file` and `key` name the source
// for AdapterLoadError.
//   a: float32 [rank, in_dim];  b: float32 [out_dim, rank] (HF row order)
LoraModule make_lora_module(const BaseModelShape& shape, int64_t layer, ModuleId m, at::Tensor a, at::Tensor b,
                            double alpha, double scale, at::ScalarType dtype, const std::string& file,
                            const std::string& key);

// Refuses aLoRA invocation tokens lorakv cannot use, with an AdapterLoadError naming `file`
// and `key`: an empty list, or an id outside [0, shape.vocab_size) (the upper bound only
// when the vocabulary size is known).
void check_invocation_tokens(const std::vector<int32_t>& tokens, const BaseModelShape& shape, const std::string& file,
                             const std::string& key);

}  // namespace lorakv::adapters
