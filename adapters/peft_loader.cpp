// adapters/peft_loader.cpp: PEFT LoRA directories. The target rules (PEFT's own, in
// adapters/peft_config_rules.h) pick the modules; this file reads and checks the weights.
#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include "lorakv/adapters/adapter_loader.h"
#include "lorakv/adapters/peft_config_rules.h"
#include "lorakv/common/errors.h"
#include "lorakv/formats/json.h"
#include "lorakv/formats/safetensors_file.h"

namespace lorakv::adapters {
namespace {

namespace fs = std::filesystem;
using formats::JsonValue;

at::Tensor read_f32(const formats::SafetensorsTensorInfo& t) {
  at::Tensor out = at::empty(t.shape, at::kFloat);
  formats::convert_to_f32(t, out.data_ptr<float>());
  return out;
}

}  // namespace

std::shared_ptr<const Adapter> load_peft_adapter(const std::string& name, const std::string& dir,
                                                 const BaseModelShape& shape, const AdapterLoadOptions& options) {
  const std::string config_path = (fs::path(dir) / "adapter_config.json").string();
  const std::string weights_path = (fs::path(dir) / "adapter_model.safetensors").string();
  const std::string pickle_path = (fs::path(dir) / "adapter_model.bin").string();
  if (!fs::exists(weights_path) && fs::exists(pickle_path)) {
    throw AdapterLoadError("pickled adapter weights are not loaded: lorakv never runs code from files",
                           {pickle_path, "adapter_model.bin", "adapter_model.safetensors", "adapter_model.bin",
                            "convert it: save_pretrained(..., safe_serialization=True) or the safetensors convert tool"});
  }
  if (!fs::exists(config_path)) {
    throw AdapterLoadError("not a PEFT adapter directory", {dir, "adapter_config.json", "adapter_config.json and "
                                                            "adapter_model.safetensors", "no adapter_config.json", ""});
  }
  if (!fs::exists(weights_path)) {
    throw AdapterLoadError("adapter weights missing", {dir, "adapter_model.safetensors", "the file", "nothing", ""});
  }
  PeftRules rules;
  std::unique_ptr<formats::SafetensorsFile> st;
  try {
    const JsonValue cfg = formats::parse_json_file(config_path);
    rules = parse_peft_rules(config_path, cfg, shape.num_layers);
    if (!rules.invocation_tokens.empty()) {
      check_invocation_tokens(rules.invocation_tokens, shape, config_path, invocation_tokens_key(AdapterFormat::kPeft));
    }
    st = formats::SafetensorsFile::open(weights_path);
  } catch (const AdapterLoadError&) {
    throw;
  } catch (const InternalError&) {  // a bug stays one
    throw;
  } catch (const Error& e) {
    ErrorContext c = e.context();
    if (c.file.empty()) c.file = config_path;
    throw AdapterLoadError(e.message(), c);
  }

  // Tensor keys: base_model.model.<module path>.lora_<A|B>[.<adapter name>].weight
  static const std::regex key_re(R"(^base_model\.model\.(.+)\.lora_(A|B)(?:\.[A-Za-z0-9_\-]+)?\.weight$)");
  static const std::regex path_re(R"(^model\.layers\.(\d+)\.(self_attn|mlp)\.([a-z_]+)$)");
  std::map<std::pair<int64_t, int>, std::pair<const formats::SafetensorsTensorInfo*, const formats::SafetensorsTensorInfo*>> found;
  for (const formats::SafetensorsTensorInfo& t : st->tensors()) {
    std::smatch km, pm;
    if (!std::regex_match(t.name, km, key_re)) {
      throw AdapterLoadError("unsupported tensor in a LoRA adapter",
                             {weights_path, t.name, "base_model.model.<module>.lora_A/lora_B[.<name>].weight", t.name,
                              "DoRA magnitudes, biases, embeddings and saved modules are not supported"});
    }
    const std::string path = km[1].str();
    std::optional<ModuleId> mod;
    if (std::regex_match(path, pm, path_re)) mod = module_from_name(pm[3].str());
    const bool attn = mod && (*mod == ModuleId::kQ || *mod == ModuleId::kK || *mod == ModuleId::kV || *mod == ModuleId::kO);
    if (!mod || (pm[2].str() == "self_attn") != attn) {
      throw AdapterLoadError("LoRA on a module lorakv cannot adapt",
                             {weights_path, t.name, "model.layers.N.self_attn.{q,k,v,o}_proj or model.layers.N.mlp."
                              "{gate,up,down}_proj", path, "was the adapter trained for another architecture?"});
    }
    const int64_t layer = std::stoll(pm[1].str());
    if (layer >= shape.num_layers) {
      throw AdapterLoadError("layer out of range", {weights_path, t.name, "layers 0.." + std::to_string(shape.num_layers - 1),
                                                    std::to_string(layer), "was the adapter trained for another base model?"});
    }
    auto& slot = found[{layer, static_cast<int>(*mod)}];
    (km[2].str() == "A" ? slot.first : slot.second) = &t;
  }

  std::vector<LoraModule> modules;
  for (int64_t layer = 0; layer < shape.num_layers; ++layer) {
    for (int mi = 0; mi < kNumModules; ++mi) {
      const ModuleId m = static_cast<ModuleId>(mi);
      const std::string path = module_path(layer, m);
      const bool targeted = is_targeted(rules, path, layer);
      auto it = found.find({layer, mi});
      if (it == found.end()) {
        if (targeted) {
          throw AdapterLoadError("adapter_config.json targets a module with no LoRA weights",
                                 {weights_path, path, "lora_A and lora_B for " + path, "none",
                                  "check target_modules / layers_to_transform against the saved weights"});
        }
        continue;
      }
      const auto [a_info, b_info] = it->second;
      if (!targeted) {
        throw AdapterLoadError("LoRA weights for a module adapter_config.json does not target",
                               {weights_path, path, "target_modules to include it", "weights for it", ""});
      }
      if (a_info == nullptr || b_info == nullptr) {
        throw AdapterLoadError("LoRA factor missing", {weights_path, path, "both lora_A and lora_B",
                                                       a_info == nullptr ? "only lora_B" : "only lora_A", ""});
      }
      at::Tensor a, b;
      try {
        a = read_f32(*a_info);
        b = read_f32(*b_info);
      } catch (const InternalError&) {  // a bug stays one
        throw;
      } catch (const Error& e) {
        throw AdapterLoadError(e.message(), e.context());
      }
      const int64_t r = pattern_rank(rules, path).value_or(rules.r);
      const double alpha = pattern_alpha(rules, path).value_or(rules.alpha);
      if (a.dim() == 2 && a.size(0) != r) {
        throw AdapterLoadError("LoRA rank differs from adapter_config.json", {weights_path, a_info->name,
                               "rank " + std::to_string(r) + " (r / rank_pattern)", "rank " + std::to_string(a.size(0)), ""});
      }
      if (r < 1) throw AdapterLoadError("LoRA rank out of range", {config_path, path, "r >= 1", std::to_string(r), ""});
      const double scale = rules.rslora ? alpha / std::sqrt(static_cast<double>(r)) : alpha / static_cast<double>(r);
      modules.push_back(make_lora_module(shape, layer, m, a, b, alpha, scale, options.dtype, weights_path, a_info->name));
    }
  }
  if (modules.empty()) {
    throw AdapterLoadError("the adapter adapts no module", {dir, "target_modules", "at least one module", "none", ""});
  }
  return std::make_shared<Adapter>(name, dir, AdapterFormat::kPeft, shape, std::move(modules),
                                   std::move(rules.invocation_tokens));
}

}  // namespace lorakv::adapters
