// adapters/peft_loader.cpp: PEFT LoRA directories. The target rules follow PEFT's own
// check_target_module_exists / get_pattern_key (peft 0.21), applied to module paths such
// as "model.layers.3.self_attn.q_proj" (the names PEFT matches inside LlamaForCausalLM).
#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include "adapters/adapter_loader.h"
#include "common/errors.h"
#include "formats/json.h"
#include "formats/safetensors_file.h"

namespace lorakv::adapters {
namespace {

namespace fs = std::filesystem;
using formats::JsonValue;

// Parsed target rules of one adapter_config.json.
struct PeftRules {
  std::string file;
  int64_t r = 8;
  double alpha = 8;
  bool rslora = false;
  bool all_linear = false;
  std::optional<std::string> target_regex;
  std::vector<std::string> target_list;
  std::optional<std::string> exclude_regex;
  std::vector<std::string> exclude_list;
  std::optional<std::vector<int64_t>> layers;  // layers_to_transform
  std::vector<std::string> layers_pattern;
  std::vector<std::pair<std::string, int64_t>> rank_pattern;
  std::vector<std::pair<std::string, double>> alpha_pattern;
};

[[noreturn]] void refuse(const PeftRules& r, const std::string& key, const std::string& what, const std::string& expected,
                         const std::string& found, const std::string& hint = "") {
  throw AdapterLoadError(what, {r.file, key, expected, found, hint});
}

bool ends_with_segment(const std::string& path, const std::string& name) {
  return path == name ||
         (path.size() > name.size() && path.compare(path.size() - name.size(), name.size(), name) == 0 &&
          path[path.size() - name.size() - 1] == '.');
}

std::regex compile(const PeftRules& r, const std::string& key, const std::string& pattern) {
  try {
    return std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    refuse(r, key, "invalid regular expression", "a regex lorakv (ECMAScript) understands", pattern, e.what());
  }
}

std::vector<std::string> string_list(const PeftRules& r, const JsonValue& v, const std::string& key) {
  std::vector<std::string> out;
  if (v.is_string()) return {v.as_string()};
  if (!v.is_array()) refuse(r, key, "unsupported value", "a string or a list of strings", v.describe());
  for (const JsonValue& e : v.as_array()) out.push_back(e.as_string());
  return out;
}

bool present(const JsonValue& cfg, const char* key) {
  const JsonValue* v = cfg.find(key);
  if (v == nullptr || v->is_null()) return false;
  if (v->is_bool()) return v->as_bool();
  if (v->is_array() || v->is_object()) return v->size() > 0;
  return true;
}

// Refuses every PEFT feature lorakv does not apply, naming the field.
void check_unsupported(const PeftRules& r, const JsonValue& cfg) {
  if (auto t = cfg.find_string("peft_type"); t && *t != "LORA") {
    refuse(r, "peft_type", "unsupported PEFT method", "LORA", *t);
  }
  if (auto b = cfg.find_string("bias"); b && *b != "none") {
    refuse(r, "bias", "LoRA bias terms are not supported", "\"none\"", "\"" + *b + "\"",
           "retrain with bias=\"none\" or merge the biases into the base model");
  }
  const std::pair<const char*, const char*> unsupported[] = {
      {"lora_bias", "false"},
      {"modules_to_save", "null or []: lorakv shares the base model's other modules"},
      {"use_dora", "false (DoRA's magnitude vectors are not supported)"},
      {"trainable_token_indices", "null (trainable tokens are not supported)"},
      {"layer_replication", "null (layer replication is not supported)"},
      {"target_parameters", "null or [] (only nn.Linear modules can be adapted)"},
      {"fan_in_fan_out", "false (Llama projections are nn.Linear)"},
      // LoRA variants whose forward is not plain x·A·B (PEFT 0.21 fields).
      {"alora_invocation_tokens", "null (activated LoRA is not supported)"},
      {"use_qalora", "false (QA-LoRA is not supported)"},
      {"use_bdlora", "null (block-diagonal LoRA is not supported)"},
      {"arrow_config", "null (Arrow routing is not supported)"},
      {"kasa_config", "null (this LoRA variant is not supported)"},
      {"monteclora_config", "null (this LoRA variant is not supported)"},
      {"velora_config", "null (this LoRA variant is not supported)"},
  };
  for (const auto& [key, expected] : unsupported) {
    if (present(cfg, key)) refuse(r, key, std::string(key) + " is not supported", expected, cfg.at(key).to_string());
  }
}

PeftRules parse_rules(const std::string& file, const JsonValue& cfg, const BaseModelShape& shape) {
  PeftRules r;
  r.file = file;
  check_unsupported(r, cfg);
  r.r = cfg.find_int("r").value_or(8);
  r.alpha = cfg.find_double("lora_alpha").value_or(8.0);
  r.rslora = cfg.find_bool("use_rslora").value_or(false);
  if (r.r < 1) refuse(r, "r", "LoRA rank out of range", "r >= 1", std::to_string(r.r));
  const JsonValue* targets = cfg.find("target_modules");
  if (targets == nullptr || targets->is_null()) {
    r.target_list = {"q_proj", "v_proj"};  // PEFT's default for Llama
  } else if (targets->is_string()) {
    if (targets->as_string() == "all-linear") {
      r.all_linear = true;
    } else {
      r.target_regex = targets->as_string();
    }
  } else {
    r.target_list = string_list(r, *targets, "target_modules");
  }
  if (const JsonValue* ex = cfg.find("exclude_modules"); ex != nullptr && !ex->is_null()) {
    if (ex->is_string()) {
      r.exclude_regex = ex->as_string();
    } else {
      r.exclude_list = string_list(r, *ex, "exclude_modules");
    }
  }
  if (const JsonValue* lt = cfg.find("layers_to_transform"); lt != nullptr && !lt->is_null()) {
    std::vector<int64_t> layers;
    if (lt->is_array()) {
      for (const JsonValue& e : lt->as_array()) layers.push_back(e.as_int());
    } else {
      layers.push_back(lt->as_int());
    }
    for (int64_t l : layers) {
      if (l < 0 || l >= shape.num_layers) {
        refuse(r, "layers_to_transform", "layer out of range", "layers 0.." + std::to_string(shape.num_layers - 1),
               std::to_string(l), "was the adapter trained for another base model?");
      }
    }
    if (!layers.empty()) r.layers = layers;
  }
  if (const JsonValue* lp = cfg.find("layers_pattern"); lp != nullptr && !lp->is_null()) {
    r.layers_pattern = string_list(r, *lp, "layers_pattern");
  }
  for (const char* key : {"rank_pattern", "alpha_pattern"}) {
    const JsonValue* p = cfg.find(key);
    if (p == nullptr || p->is_null()) continue;
    for (const auto& [k, v] : p->as_object()) {
      if (std::string(key) == "rank_pattern") {
        r.rank_pattern.emplace_back(k, v.as_int());
      } else {
        r.alpha_pattern.emplace_back(k, v.as_double());
      }
    }
  }
  return r;
}

// PEFT's check_target_module_exists for one module path.
bool is_targeted(const PeftRules& r, const std::string& path, int64_t layer) {
  if (r.exclude_regex && std::regex_match(path, compile(r, "exclude_modules", *r.exclude_regex))) return false;
  for (const std::string& e : r.exclude_list) {
    if (ends_with_segment(path, e)) return false;
  }
  if (r.all_linear) return true;  // every Linear but lm_head, which lorakv never adapts
  if (r.target_regex) return std::regex_match(path, compile(r, "target_modules", *r.target_regex));
  bool found = false;
  for (const std::string& t : r.target_list) found = found || ends_with_segment(path, t);
  if (!found || !r.layers) return found;
  // layers_to_transform applies to list targets only (as in PEFT): the first numbered
  // segment after a layers_pattern (any, when none is given) is the layer index.
  if (!r.layers_pattern.empty()) {
    bool matched = false;
    for (const std::string& p : r.layers_pattern) {
      std::smatch m;
      if (std::regex_search(path, m, compile(r, "layers_pattern", "(?:^|\\.)" + p + "\\.(\\d+)\\."))) {
        matched = true;
        break;
      }
    }
    if (!matched) return false;
  }
  for (int64_t l : *r.layers) {
    if (l == layer) return true;
  }
  return false;
}

// PEFT's get_pattern_key: the first pattern key k with re.match("(.*\.)?(k)$", path).
template <typename T>
std::optional<T> pattern_value(const PeftRules& r, const char* field, const std::vector<std::pair<std::string, T>>& ps,
                               const std::string& path) {
  for (const auto& [k, v] : ps) {
    if (k == path || std::regex_match(path, compile(r, field, "(.*\\.)?(" + k + ")"))) return v;
  }
  return std::nullopt;
}

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
    rules = parse_rules(config_path, cfg, shape);
    st = formats::SafetensorsFile::open(weights_path);
  } catch (const AdapterLoadError&) {
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
      } catch (const Error& e) {
        throw AdapterLoadError(e.message(), e.context());
      }
      const int64_t r = pattern_value(rules, "rank_pattern", rules.rank_pattern, path).value_or(rules.r);
      const double alpha = pattern_value(rules, "alpha_pattern", rules.alpha_pattern, path).value_or(rules.alpha);
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
  return std::make_shared<Adapter>(name, dir, AdapterFormat::kPeft, shape, std::move(modules));
}

}  // namespace lorakv::adapters
