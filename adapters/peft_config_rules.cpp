// adapters/peft_config_rules.cpp: PEFT target rules (see peft_config_rules.h).
#include "lorakv/adapters/peft_config_rules.h"

#include <regex>

#include "lorakv/common/errors.h"

namespace lorakv::adapters {
namespace {

using formats::JsonValue;

[[noreturn]] void refuse(const PeftRules& r, const std::string& key, const std::string& what, const std::string& expected,
                         const std::string& found, const std::string& hint = "") {
  throw AdapterLoadError(what, {r.file, key, expected, found, hint});
}

bool ends_with_segment(const std::string& path, const std::string& name) {
  return path == name ||
         (path.size() > name.size() && path.compare(path.size() - name.size(), name.size(), name) == 0 &&
          path[path.size() - name.size() - 1] == '.');
}

// Patterns come from the adapter's config, so matching must not take exponential time:
// ECMAScript's backtracking matcher does on patterns such as "a+.*++" (which Python's re
// refuses) or "(a|a)*". libstdc++'s polynomial matcher gives the same yes/no answers and
// refuses back-references (a regex_error, so an AdapterLoadError below). Only the yes/no
// answer is used, never submatch positions, so nothing else changes.
#ifdef __GLIBCXX__
constexpr auto kRegexFlags = std::regex::ECMAScript | std::regex_constants::__polynomial;
#else
constexpr auto kRegexFlags = std::regex::ECMAScript;
#endif

// Whether `p` has a repeat count ("{m,n}") or back-reference number ("\N") of more than
// six significant digits. libstdc++ reads those into a long without an overflow check
// (undefined behaviour), and no real pattern needs one: its state limit is 100000.
bool has_oversized_number(const std::string& p) {
  constexpr size_t kMaxDigits = 6;
  const auto significant_digits_at = [&](size_t k) {
    while (k < p.size() && p[k] == '0') ++k;
    size_t n = 0;
    while (k + n < p.size() && p[k + n] >= '0' && p[k + n] <= '9') ++n;
    return n;
  };
  bool in_braces = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\') {
      if (significant_digits_at(i + 1) > kMaxDigits) return true;
      ++i;  // the escaped character is a literal, never a brace or a comma
      continue;
    }
    if (c == '{') in_braces = true;
    if (c == '}') in_braces = false;
    if ((c == '{' || (c == ',' && in_braces)) && significant_digits_at(i + 1) > kMaxDigits) return true;
  }
  return false;
}

std::regex compile(const PeftRules& r, const std::string& key, const std::string& pattern) {
  if (has_oversized_number(pattern)) {
    refuse(r, key, "invalid regular expression", "repeat counts and group numbers of at most 6 digits", pattern);
  }
  try {
    return std::regex(pattern, kRegexFlags);
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

// PEFT's get_pattern_key: the first pattern key k with re.match("(.*\.)?(k)$", path).
template <typename T>
std::optional<T> pattern_value(const PeftRules& r, const char* field, const std::vector<std::pair<std::string, T>>& ps,
                               const std::string& path) {
  for (const auto& [k, v] : ps) {
    if (k == path || std::regex_match(path, compile(r, field, "(.*\\.)?(" + k + ")"))) return v;
  }
  return std::nullopt;
}

}  // namespace

PeftRules parse_peft_rules(const std::string& file, const JsonValue& cfg, int64_t num_layers) {
  PeftRules r;
  r.file = file;
  check_unsupported(r, cfg);
  r.invocation_tokens = parse_invocation_tokens(file, cfg);
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
      if (l < 0 || l >= num_layers) {
        refuse(r, "layers_to_transform", "layer out of range", "layers 0.." + std::to_string(num_layers - 1),
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

std::vector<int32_t> parse_invocation_tokens(const std::string& file, const JsonValue& cfg) {
  constexpr const char* kKey = "alora_invocation_tokens";
  const JsonValue* v = cfg.find(kKey);
  if (v == nullptr || v->is_null()) return {};
  const auto refuse_value = [&](const std::string& what, const std::string& found) {
    throw AdapterLoadError(what, {file, kKey, "a non-empty list of token ids (integers >= 0)", found,
                                  "null or no key for a standard LoRA"});
  };
  if (!v->is_array()) refuse_value("activated LoRA invocation tokens are not a list", v->to_string());
  if (v->size() == 0) refuse_value("activated LoRA without invocation tokens", "an empty list");
  std::vector<int32_t> out;
  for (const JsonValue& e : v->as_array()) {
    if (!e.is_integer() || e.as_int() < 0 || e.as_int() > INT32_MAX) {
      refuse_value("activated LoRA invocation token is not a token id", e.to_string());
    }
    out.push_back(static_cast<int32_t>(e.as_int()));
  }
  return out;
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

std::optional<int64_t> pattern_rank(const PeftRules& rules, const std::string& path) {
  return pattern_value(rules, "rank_pattern", rules.rank_pattern, path);
}

std::optional<double> pattern_alpha(const PeftRules& rules, const std::string& path) {
  return pattern_value(rules, "alpha_pattern", rules.alpha_pattern, path);
}

}  // namespace lorakv::adapters
