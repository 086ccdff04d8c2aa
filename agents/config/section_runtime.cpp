// agents/config/section_runtime.cpp: the keys that set up the runtime: `model`,
// `adapters`, `cache`, and `output`.
#include <algorithm>

#include "lorakv/agents/config/paths.h"
#include "lorakv/agents/config/sections.h"

namespace lorakv::agents::config {
namespace {

const char* const kModelHint = "model: {path: ../models/SmolLM2-135M-Instruct.Q4_1.gguf} (a GGUF file or an HF folder)";

// A path written as `key: PATH` or `key: {path: PATH}`.
Field path_field(const ConfigReader& r, const Field& f, const std::vector<std::string>& keys, const std::string& hint) {
  if (f.node.kind == YamlNode::Kind::kScalar) return f;
  const MapReader map(r, f, keys);
  return map.get("path", hint);
}

}  // namespace

void require_one_line_name(const ConfigReader& r, SourceMark mark, const std::string& path, const std::string& name) {
  const bool has_control = std::any_of(name.begin(), name.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20; });
  const bool padded = !name.empty() && (name.front() == ' ' || name.back() == ' ');
  if (name.empty() || has_control || padded) {
    r.fail(mark, path, "the name `" + name + "` must be one line of text without spaces at its ends",
           "e.g. planner");
  }
}

void require_known_name(const ConfigReader& r, const Field& f, const std::string& name,
                        const std::vector<std::string>& known, const std::string& kind, const std::string& section) {
  if (std::find(known.begin(), known.end(), name) != known.end()) return;
  const std::string near = nearest_name(name, known);
  r.fail(f.node.mark, f.path,
         "`" + f.path + "` names the " + kind + " `" + name + "`, which `" + section + "` does not define" +
             (near.empty() ? "" : "; did you mean " + near + "?"),
         known.empty() ? "define it under `" + section + "`" : "the " + section + " are " + join_names(known));
}

void read_model_section(const ConfigReader& r, const MapReader& top, SessionConfig& config) {
  const Field model = top.get("model", kModelHint);
  const Field path = path_field(r, model, {"path", "dtype", "threads"}, kModelHint);
  config.model.path = resolve_path(r, path);
  require_model_path(r, path, config.model.path);
  if (model.node.kind != YamlNode::Kind::kMap) return;
  const MapReader map(r, model, {"path", "dtype", "threads"});
  if (map.has("dtype")) config.model.dtype = read_choice(r, map.get("dtype"), {"float32", "bfloat16"});
  if (map.has("threads")) {
    config.model.threads = static_cast<int>(read_int(r, map.get("threads"), 0, 4096, "0: libtorch's default"));
  }
}

void read_adapters_section(const ConfigReader& r, const MapReader& top, SessionConfig& config) {
  const YamlNode* node = top.find("adapters");
  if (node == nullptr) return;
  const Field adapters{*node, "adapters"};
  if (node->kind != YamlNode::Kind::kMap) {
    r.fail(node->mark, "adapters", "`adapters` must be a map of name: path, found " + std::string(node->kind_name()),
           "adapters: {planner: ../assets/role_adapters/qv_shared_a/planner}");
  }
  require_at_most(r, adapters, node->entries.size(), kMaxEntries, "adapters");
  for (const YamlEntry& entry : node->entries) {
    const std::string path = child_path("adapters", entry.key);
    r.marks().set(path, entry.key_mark);
    require_one_line_name(r, entry.key_mark, path, entry.key);
    const Field value{entry.value, path};
    if (entry.value.kind == YamlNode::Kind::kNull) {
      r.fail(entry.key_mark, path, "the adapter `" + entry.key + "` has no path", "write `" + entry.key + ": PATH`");
    }
    const Field file = path_field(r, value, {"path"}, "a PEFT folder or a GGUF LoRA file");
    AdapterSection adapter{entry.key, resolve_path(r, file)};
    require_adapter_path(r, file, adapter.path);
    config.adapters.push_back(std::move(adapter));
  }
}

// `cache.eviction.layer_budgets`: pyramid, flat, or a list of one weight per layer.
void read_layer_budgets(const ConfigReader& r, const Field& f, cache::eviction::EvictionConfig& e) {
  if (f.node.kind != YamlNode::Kind::kSequence) {
    e.layer_budgets = read_choice(r, f, {"pyramid", "flat"});
    return;
  }
  e.layer_budgets = "list";
  for (size_t i = 0; i < f.node.items.size(); ++i) {
    const Field item{f.node.items[i], f.path + "[" + std::to_string(i) + "]"};
    e.layer_weights.push_back(read_number(r, item, 0, 1e9, true, "a layer's weight, > 0"));
  }
  if (e.layer_weights.empty()) r.fail(f.node.mark, f.path, "the list of layer weights is empty", "one weight per layer, e.g. [1, 1, 2]");
}

// The policies' own keys: scoring, the per-layer and per-head budgets, leverage's rank, capkv's.
void read_policy_keys(const ConfigReader& r, const MapReader& ev, cache::eviction::EvictionConfig& e) {
  if (ev.has("scoring")) e.scoring = read_choice(r, ev.get("scoring"), cache::eviction::scoring_names());
  if (ev.has("layer_budgets")) read_layer_budgets(r, ev.get("layer_budgets"), e);
  if (ev.has("pyramid_beta")) e.pyramid_beta = read_number(r, ev.get("pyramid_beta"), 1, 1e6, false, "the pyramid's steepness, >= 1");
  if (ev.has("head_floor")) e.head_floor = read_number(r, ev.get("head_floor"), 0, 1, false, "a share of a head's budget, in [0, 1]");
  if (ev.has("leverage_rank")) e.leverage_rank = read_int(r, ev.get("leverage_rank"), 1, 1 << 16, "directions of the keys kept, >= 1");
  if (ev.has("capkv_tau")) e.capkv_tau = read_number(r, ev.get("capkv_tau"), 0, 1e6, false, "capkv's temperature, >= 0");
  if (ev.has("window_growth")) {
    e.window_growth = read_number(r, ev.get("window_growth"), 0, 1e6, false, "the window's growth per reply token, >= 0");
  }
  if (ev.has("loss_bound")) e.loss_bound = read_choice(r, ev.get("loss_bound"), {"true", "false"}) == "true";
  if (ev.has("capkv_future_positions")) {
    e.capkv_future_positions =
        read_int(r, ev.get("capkv_future_positions"), 1, 1 << 20, "positions the anchor's RoPE averages over, >= 1");
  }
}

// `cache.eviction`: a budget in tokens (a whole number) or as a share of the trajectory (a
// number with a point, in (0, 1]); the policy needs one, and a budget needs a policy.
void read_eviction(const ConfigReader& r, const Field& field, cache::eviction::EvictionConfig& e) {
  const MapReader ev(r, field,
                     {"policy", "budget", "sinks", "window", "scoring", "layer_budgets", "pyramid_beta", "head_floor", "leverage_rank",
                      "capkv_tau", "capkv_future_positions", "window_growth", "loss_bound"});
  if (ev.has("policy")) e.policy = read_choice(r, ev.get("policy"), cache::eviction::policy_names());
  if (ev.has("budget")) {
    const Field budget = ev.get("budget");
    if (budget.node.kind == YamlNode::Kind::kScalar && budget.node.scalar.find('.') != std::string::npos) {
      e.budget_fraction = read_number(r, budget, 0, 1, true, "a share of the trajectory's tokens, in (0, 1]");
    } else {
      e.budget_tokens = read_int(r, budget, 1, int64_t{1} << 30, "tokens kept per layer, or a share such as 0.25");
    }
  }
  if (ev.has("sinks")) e.sinks = read_int(r, ev.get("sinks"), 0, int64_t{1} << 20, "first positions never evicted");
  if (ev.has("window")) e.window = read_int(r, ev.get("window"), 0, int64_t{1} << 30, "newest tokens never evicted");
  read_policy_keys(r, ev, e);
  const bool has_budget = e.budget_tokens > 0 || e.budget_fraction > 0;
  if (e.enabled() && !has_budget) {
    r.fail(field.node.mark, field.path, "`" + field.path + ".policy` " + e.policy + " needs a budget",
           "add `budget: 1024` (tokens) or `budget: 0.25` (a share of the trajectory)");
  }
  if (!e.enabled() && has_budget) {
    r.fail(field.node.mark, field.path, "`" + field.path + ".budget` is set but no policy keeps it",
           "add `policy: streaming_llm` or `policy: h2o`");
  }
  try {
    e.check(field.path);  // what only the keys together can tell (scoring for a policy without scores...)
  } catch (const ConfigError& error) {
    const std::string key = error.context().key;
    const std::string name = key.substr(key.rfind('.') + 1);
    const YamlNode* at = ev.find(name);
    r.fail((at ? *at : field.node).mark, key, error.message(), error.context().hint);
  }
}

void read_cache_section(const ConfigReader& r, const MapReader& top, SessionConfig& config) {
  const YamlNode* node = top.find("cache");
  if (node == nullptr) return;
  const MapReader cache(r, Field{*node, "cache"},
                        {"mode", "writer", "block_size", "pool_bytes", "kv_dtype", "residual_dtype", "rerotate",
                         "per_head_token_sets", "residual_rows_per_base_row", "prefill_chunk", "step_token_budget",
                         "eviction"});
  CacheSection& c = config.cache;
  if (cache.has("mode")) c.mode = read_choice(r, cache.get("mode"), cache_mode_names());
  if (cache.has("writer")) c.writer = read_choice(r, cache.get("writer"), cache_writer_names());
  if (cache.has("block_size")) c.block_size = read_int(r, cache.get("block_size"), 1, 1 << 16, "token rows per cache block");
  if (cache.has("pool_bytes")) c.pool_bytes = read_byte_size(r, cache.get("pool_bytes"));
  if (cache.has("kv_dtype")) c.kv_dtype = read_choice(r, cache.get("kv_dtype"), {"float32", "bfloat16", "int8"});
  if (cache.has("rerotate")) c.rerotate = read_choice(r, cache.get("rerotate"), {"true", "false"}) == "true";
  if (cache.has("per_head_token_sets")) {
    c.per_head_token_sets = read_choice(r, cache.get("per_head_token_sets"), {"true", "false"}) == "true";
  }
  if (cache.has("residual_dtype")) c.residual_dtype = read_choice(r, cache.get("residual_dtype"), {"float32", "bfloat16"});
  if (cache.has("residual_rows_per_base_row")) {
    c.residual_rows_per_base_row = read_number(r, cache.get("residual_rows_per_base_row"), 0, 1e6, true,
                                               "the residual pools' size against the base pool's, > 0");
  }
  if (cache.has("prefill_chunk")) {
    c.prefill_chunk = read_int(r, cache.get("prefill_chunk"), 1, int64_t{1} << 30, "context tokens per agent per step");
  }
  if (cache.has("step_token_budget")) {
    c.step_token_budget = read_int(r, cache.get("step_token_budget"), 0, int64_t{1} << 30, "0: no limit");
  }
  if (cache.has("eviction")) read_eviction(r, cache.get("eviction"), c.eviction);
}

void read_output_section(const ConfigReader& r, const MapReader& top, SessionConfig& config) {
  const YamlNode* node = top.find("output");
  if (node == nullptr) return;
  const MapReader output(r, Field{*node, "output"}, {"transcript"});
  if (!output.has("transcript")) return;
  const Field transcript = output.get("transcript");
  config.output.transcript = resolve_path(r, transcript);
  require_parent_folder(r, transcript, config.output.transcript);
}

}  // namespace lorakv::agents::config
