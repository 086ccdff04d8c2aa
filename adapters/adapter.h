// adapters/adapter.h: one loaded LoRA adapter: per (layer, projection) factors A and B in
// Hugging Face's layout with the scale folded into B, plus its content identity. Also
// the little the adapters layer knows about the base model (BaseModelShape), so it never
// includes runtime/ headers: the runtime fills the shape in and converts module ids.
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lorakv::adapters {

// The seven adaptable projections, in the runtime's Module order (runtime checks that).
constexpr int kNumModules = 7;
enum class ModuleId { kQ = 0, kK, kV, kO, kGate, kUp, kDown };
const char* module_name(ModuleId m);                      // "q_proj", ... (HF names)
std::optional<ModuleId> module_from_name(const std::string& name);  // "q_proj" -> kQ
std::string module_path(int64_t layer, ModuleId m);      // "model.layers.3.self_attn.q_proj"

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
  std::string hash;    // content hash of this module: layer, module, rank, scale, A, scaled B
  std::string a_hash;  // content hash of A alone (shared-A groups compare these)
};

enum class AdapterFormat { kPeft, kGgufLora };
const char* adapter_format_name(AdapterFormat f);  // "peft", "gguf-lora"

// An adapter's identity for anything cached on its behalf (residual rows): its content
// hash plus a serial number unique to this load, so replacing or reloading an adapter
// under the same name never reuses what the old one computed, even from identical bytes.
struct AdapterIdentity {
  std::string content_hash;  // 32 hex digits over every module's hash
  uint64_t load_serial = 0;  // unique per load in this process
  friend bool operator==(const AdapterIdentity& a, const AdapterIdentity& b) {
    return a.content_hash == b.content_hash && a.load_serial == b.load_serial;
  }
  friend bool operator!=(const AdapterIdentity& a, const AdapterIdentity& b) { return !(a == b); }
};

// Immutable after construction, so any number of threads may read one adapter; it lives
// as long as someone holds its shared_ptr (a running sequence pins it that way).
class Adapter {
 public:
  // `modules` need not be sorted; each (layer, module) at most once. Computes the hashes
  // and assigns a fresh load serial.
  Adapter(std::string name, std::string source, AdapterFormat format, BaseModelShape shape,
          std::vector<LoraModule> modules);

  const std::string& name() const { return name_; }
  const std::string& source() const { return source_; }  // the directory or file loaded
  AdapterFormat format() const { return format_; }
  const BaseModelShape& base_shape() const { return shape_; }
  const AdapterIdentity& identity() const { return identity_; }
  const std::string& content_hash() const { return identity_.content_hash; }
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
// shapes, rank in [1, min(in, out)], finite values. Folds `scale` into B, casts both to
// `dtype` and hashes them. `file` and `key` name the source for AdapterLoadError.
//   a: float32 [rank, in_dim];  b: float32 [out_dim, rank] (HF row order)
LoraModule make_lora_module(const BaseModelShape& shape, int64_t layer, ModuleId m, at::Tensor a, at::Tensor b,
                            double alpha, double scale, at::ScalarType dtype, const std::string& file,
                            const std::string& key);

}  // namespace lorakv::adapters
