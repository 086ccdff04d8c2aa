// adapters/adapter.h: one loaded LoRA adapter: per (layer, projection) factors A and B in
// Hugging Face's layout with the scale folded into B, plus its content identity. Also
// the little the adapters layer knows about the base model (BaseModelShape), so it never
// includes runtime/ headers: the runtime fills the shape in.
//
// Identity (common/adapter_identity.h): SHA-256 over exactly what determines the adapter's
// output: per adapted (layer, module), in (layer, module) order: the layer, the module's
// name, the rank, the effective scale, and A and the scaled B as stored (dtype name, shape,
// bytes). Every option that changes the math (alpha, rank_pattern, rsLoRA, target rules,
// the GGUF Q/K un-permute) acts through those. Not hashed: the name, path, format, load
// time. So two loads of the same files, in any registry or process, get one identity.
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

// Immutable after construction, so any number of threads may read one adapter; it lives
// as long as someone holds its shared_ptr (a running sequence pins it that way).
class Adapter {
 public:
  // `modules` need not be sorted; each (layer, module) at most once. Hashes every module
  // (LoraModule::hash, a_hash) from its fields and tensors, then the identity from those.
  Adapter(std::string name, std::string source, AdapterFormat format, BaseModelShape shape,
          std::vector<LoraModule> modules);

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

 private:
  std::string name_, source_;
  AdapterFormat format_;
  BaseModelShape shape_;
  std::vector<LoraModule> modules_;
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

}  // namespace lorakv::adapters
