// adapters/adapter.cpp: shape checks, folding and hashing of LoRA factors.
#include "lorakv/adapters/adapter.h"

#include <algorithm>
#include <cmath>

#include "lorakv/common/errors.h"
#include "lorakv/common/shape_string.h"

namespace lorakv::adapters {
namespace {

// Domain tags: an adapter, a module and a shared-A group never hash the same bytes, so no
// identity of one kind can equal one of another. A new tag version re-keys every cache.
constexpr const char* kAdapterTag = "lorakv.adapter.v1";
constexpr const char* kModuleTag = "lorakv.lora_module.v1";
constexpr const char* kSharedATag = "lorakv.shared_a.v1";
// Follows the module digests of an activated LoRA only: a standard LoRA hashes as before.
constexpr const char* kInvocationTag = "lorakv.alora_invocation_tokens.v1";

// dtype name, rank, sizes, then the bytes (native order: little-endian on every machine
// lorakv builds for).
void hash_tensor(Sha256& h, const at::Tensor& t) {
  const at::Tensor c = t.contiguous().cpu();
  h.update_string(c10::toString(c.scalar_type()));
  h.update_u64(static_cast<uint64_t>(c.dim()));
  for (int64_t d : c.sizes()) h.update_u64(static_cast<uint64_t>(d));
  h.update(c.data_ptr(), c.nbytes());
}

void hash_place(Sha256& h, int64_t layer, ModuleId m) {
  h.update_u64(static_cast<uint64_t>(layer));
  h.update_string(module_name(m));  // by name, so the identity does not hang on the enum's order
}

// Sets m.a_hash and m.hash from the module's own fields and tensors.
void hash_module(LoraModule& m) {
  Sha256 ha;
  ha.update_string(kSharedATag);
  hash_place(ha, m.layer, m.module);
  hash_tensor(ha, m.a);
  m.a_hash = AdapterIdentity{ha.finish()};
  Sha256 h;
  h.update_string(kModuleTag);
  hash_place(h, m.layer, m.module);
  h.update_u64(static_cast<uint64_t>(m.rank));
  h.update_f64(m.scale);
  h.update_digest(m.a_hash.digest);
  hash_tensor(h, m.b);
  m.hash = h.finish();
}

}  // namespace

int64_t BaseModelShape::in_dim(ModuleId m) const {
  switch (m) {
    case ModuleId::kO: return num_heads * head_dim;
    case ModuleId::kDown: return intermediate;
    default: return hidden;
  }
}

int64_t BaseModelShape::out_dim(ModuleId m) const {
  switch (m) {
    case ModuleId::kQ: return num_heads * head_dim;
    case ModuleId::kK:
    case ModuleId::kV: return num_kv_heads * head_dim;
    case ModuleId::kGate:
    case ModuleId::kUp: return intermediate;
    default: return hidden;
  }
}

const char* adapter_format_name(AdapterFormat f) { return f == AdapterFormat::kPeft ? "peft" : "gguf-lora"; }

const char* invocation_tokens_key(AdapterFormat f) {
  return f == AdapterFormat::kPeft ? "alora_invocation_tokens" : "adapter.alora.invocation_tokens";
}

void check_invocation_tokens(const std::vector<int32_t>& tokens, const BaseModelShape& shape, const std::string& file,
                             const std::string& key) {
  // PEFT indexes the first token of the list, so an empty one cannot mean "always on".
  if (tokens.empty()) {
    throw AdapterLoadError("activated LoRA without invocation tokens",
                           {file, key, "a non-empty list of token ids", "an empty list",
                            "remove the key for a standard LoRA"});
  }
  const int64_t top = shape.vocab_size > 0 ? shape.vocab_size - 1 : INT32_MAX;
  for (int32_t t : tokens) {
    if (t < 0 || t > top) {
      throw AdapterLoadError("activated LoRA invocation token outside the vocabulary",
                             {file, key, "token ids in 0.." + std::to_string(top), std::to_string(t),
                              "was the adapter trained for another base model?"});
    }
  }
}

LoraModule make_lora_module(const BaseModelShape& shape, int64_t layer, ModuleId m, at::Tensor a, at::Tensor b,
                            double alpha, double scale, at::ScalarType dtype, const std::string& file,
                            const std::string& key) {
  const std::string path = module_path(layer, m);
  if (layer < 0 || layer >= shape.num_layers) {
    throw AdapterLoadError("layer out of range", {file, key, "a layer in 0.." + std::to_string(shape.num_layers - 1),
                                                  std::to_string(layer), "was the adapter trained for another base model?"});
  }
  const int64_t in = shape.in_dim(m), out = shape.out_dim(m);
  if (a.dim() != 2 || b.dim() != 2 || a.size(1) != in || b.size(0) != out || a.size(0) != b.size(1)) {
    throw AdapterLoadError("LoRA factors do not fit the base model's " + path,
                           {file, key, "A [r, " + std::to_string(in) + "] and B [" + std::to_string(out) + ", r]",
                            "A " + shape_string(a.sizes()) + " and B " + shape_string(b.sizes()),
                            "was the adapter trained for another base model?"});
  }
  const int64_t rank = a.size(0);
  if (rank < 1 || rank > std::min(in, out)) {
    throw AdapterLoadError("LoRA rank out of range for " + path,
                           {file, key, "1.." + std::to_string(std::min(in, out)), std::to_string(rank), ""});
  }
  if (!at::isfinite(a).all().item<bool>() || !at::isfinite(b).all().item<bool>()) {
    throw AdapterLoadError("LoRA weights contain NaN or Inf", {file, key, "finite values", "NaN or Inf",
                                                                "the adapter file is corrupt or training diverged"});
  }
  if (!std::isfinite(scale)) {
    throw AdapterLoadError("LoRA scale is not finite", {file, key, "a finite alpha / r", std::to_string(scale), ""});
  }
  LoraModule mod;
  mod.layer = layer;
  mod.module = m;
  mod.rank = rank;
  mod.alpha = alpha;
  mod.scale = scale;
  mod.a = a.to(at::kFloat).to(dtype).contiguous();
  mod.b = (b.to(at::kFloat) * scale).to(dtype).contiguous();
  return mod;
}

Adapter::Adapter(std::string name, std::string source, AdapterFormat format, BaseModelShape shape,
                 std::vector<LoraModule> modules, std::vector<int32_t> invocation_tokens)
    : name_(std::move(name)),
      source_(std::move(source)),
      format_(format),
      shape_(std::move(shape)),
      modules_(std::move(modules)),
      invocation_tokens_(std::move(invocation_tokens)),
      index_(static_cast<size_t>(shape_.num_layers * kNumModules), -1) {
  std::sort(modules_.begin(), modules_.end(), [](const LoraModule& x, const LoraModule& y) {
    return std::pair(x.layer, static_cast<int>(x.module)) < std::pair(y.layer, static_cast<int>(y.module));
  });
  Sha256 h;
  h.update_string(kAdapterTag);
  h.update_u64(modules_.size());
  for (size_t i = 0; i < modules_.size(); ++i) {
    LoraModule& m = modules_[i];
    hash_module(m);
    LORAKV_ASSERT(m.layer >= 0 && m.layer < shape_.num_layers, "adapter module layer out of range");
    int32_t& slot = index_[static_cast<size_t>(m.layer * kNumModules + static_cast<int>(m.module))];
    LORAKV_ASSERT(slot < 0, "adapter module given twice: " << module_path(m.layer, m.module));
    slot = static_cast<int32_t>(i);
    h.update_digest(m.hash);
    num_bytes_ += static_cast<int64_t>(m.a.nbytes() + m.b.nbytes());
  }
  if (!invocation_tokens_.empty()) {
    // Which positions the factors act on changes the output as much as the factors do.
    h.update_string(kInvocationTag);
    h.update_u64(invocation_tokens_.size());
    for (int32_t t : invocation_tokens_) h.update_u64(static_cast<uint64_t>(static_cast<uint32_t>(t)));
  }
  identity_ = AdapterIdentity{h.finish()};
}

int64_t Adapter::find_invocation(const std::vector<int32_t>& tokens) const {
  if (invocation_tokens_.empty()) return -1;
  const auto n = static_cast<int64_t>(tokens.size()), k = static_cast<int64_t>(invocation_tokens_.size());
  for (int64_t i = n - k; i >= 0; --i) {
    if (std::equal(invocation_tokens_.begin(), invocation_tokens_.end(), tokens.begin() + i)) return i;
  }
  return -1;
}

std::string Adapter::invocation_tokens_file() const {
  return format_ == AdapterFormat::kPeft ? source_ + "/adapter_config.json" : source_;
}

at::ScalarType Adapter::dtype() const { return modules_.empty() ? at::kFloat : modules_.front().a.scalar_type(); }

const LoraModule* Adapter::find(int64_t layer, ModuleId m) const {
  if (layer < 0 || layer >= shape_.num_layers) return nullptr;
  const int32_t slot = index_[static_cast<size_t>(layer * kNumModules + static_cast<int>(m))];
  return slot < 0 ? nullptr : &modules_[static_cast<size_t>(slot)];
}

std::vector<std::string> Adapter::target_names() const {
  bool seen[kNumModules] = {};
  for (const LoraModule& m : modules_) seen[static_cast<int>(m.module)] = true;
  std::vector<std::string> out;
  for (int i = 0; i < kNumModules; ++i) {
    if (seen[i]) out.emplace_back(module_name(static_cast<ModuleId>(i)));
  }
  return out;
}

int64_t Adapter::min_rank() const {
  int64_t r = 0;
  for (const LoraModule& m : modules_) r = r == 0 ? m.rank : std::min(r, m.rank);
  return r;
}

int64_t Adapter::max_rank() const {
  int64_t r = 0;
  for (const LoraModule& m : modules_) r = std::max(r, m.rank);
  return r;
}

}  // namespace lorakv::adapters
