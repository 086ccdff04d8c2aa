// adapters/adapter.cpp: module naming, shape checks, folding and hashing of LoRA factors.
#include "adapters/adapter.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "adapters/content_hash.h"
#include "common/errors.h"

namespace lorakv::adapters {
namespace {

constexpr const char* kNames[kNumModules] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

std::atomic<uint64_t> g_next_serial{1};

std::string shape_text(at::IntArrayRef s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

void hash_tensor(ContentHasher& h, const at::Tensor& t) {
  const at::Tensor c = t.contiguous().cpu();
  h.update(std::string(c10::toString(c.scalar_type())));
  for (int64_t d : c.sizes()) h.update_u64(static_cast<uint64_t>(d));
  h.update(c.data_ptr(), c.nbytes());
}

}  // namespace

const char* module_name(ModuleId m) { return kNames[static_cast<int>(m)]; }

std::optional<ModuleId> module_from_name(const std::string& name) {
  for (int i = 0; i < kNumModules; ++i) {
    if (name == kNames[i]) return static_cast<ModuleId>(i);
  }
  return std::nullopt;
}

std::string module_path(int64_t layer, ModuleId m) {
  const bool attn = m == ModuleId::kQ || m == ModuleId::kK || m == ModuleId::kV || m == ModuleId::kO;
  return "model.layers." + std::to_string(layer) + (attn ? ".self_attn." : ".mlp.") + module_name(m);
}

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
                            "A " + shape_text(a.sizes()) + " and B " + shape_text(b.sizes()),
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
  ContentHasher ha;
  hash_tensor(ha, mod.a);
  mod.a_hash = ha.hex();
  ContentHasher h;
  h.update(path);
  h.update_u64(static_cast<uint64_t>(rank));
  h.update_double(scale);
  h.update(mod.a_hash);
  hash_tensor(h, mod.b);
  mod.hash = h.hex();
  return mod;
}

Adapter::Adapter(std::string name, std::string source, AdapterFormat format, BaseModelShape shape,
                 std::vector<LoraModule> modules)
    : name_(std::move(name)),
      source_(std::move(source)),
      format_(format),
      shape_(std::move(shape)),
      modules_(std::move(modules)),
      index_(static_cast<size_t>(shape_.num_layers * kNumModules), -1) {
  std::sort(modules_.begin(), modules_.end(), [](const LoraModule& x, const LoraModule& y) {
    return std::pair(x.layer, static_cast<int>(x.module)) < std::pair(y.layer, static_cast<int>(y.module));
  });
  ContentHasher h;
  h.update(shape_.architecture);
  for (size_t i = 0; i < modules_.size(); ++i) {
    const LoraModule& m = modules_[i];
    LORAKV_ASSERT(m.layer >= 0 && m.layer < shape_.num_layers, "adapter module layer out of range");
    int32_t& slot = index_[static_cast<size_t>(m.layer * kNumModules + static_cast<int>(m.module))];
    LORAKV_ASSERT(slot < 0, "adapter module given twice: " << module_path(m.layer, m.module));
    slot = static_cast<int32_t>(i);
    h.update(m.hash);
    num_bytes_ += static_cast<int64_t>(m.a.nbytes() + m.b.nbytes());
  }
  identity_.content_hash = h.hex();
  identity_.load_serial = g_next_serial.fetch_add(1);
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
    if (seen[i]) out.emplace_back(kNames[i]);
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
