// tests/adapters/adapter_loading_test.cpp: PEFT and GGUF LoRA loading on small hand-made
// adapters: the config rules PEFT applies, scale folding, identity hashes, and one test
// per refusal (each checks the message names the field and what is supported).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "adapters/adapter_loader.h"
#include "common/errors.h"
#include "tests/support/gguf_builder.h"
#include "tests/support/safetensors_builder.h"

namespace lorakv::adapters {
namespace {

namespace fs = std::filesystem;
using testing::SafetensorsBuilder;

// A tiny Llama: 2 layers, hidden 8, 2 heads of 4 (q 8 wide), 1 KV head (k/v 4 wide), MLP 12.
BaseModelShape tiny() { return {"llama", 2, 8, 2, 1, 4, 12, true}; }

std::vector<float> values(int64_t n, float start) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + 0.01f * static_cast<float>(i);
  return v;
}

std::string key(int64_t layer, const std::string& module, const std::string& ab, const std::string& name = "") {
  const bool attn = module[0] == 'q' || module[0] == 'k' || module[0] == 'v' || module[0] == 'o';
  return "base_model.model.model.layers." + std::to_string(layer) + (attn ? ".self_attn." : ".mlp.") + module +
         ".lora_" + ab + (name.empty() ? "" : "." + name) + ".weight";
}

// Adds A [r, in] and B [out, r] for `module` of `layer` with recognisable values.
void add_module(SafetensorsBuilder& b, int64_t layer, const std::string& module, int64_t r, const std::string& name = "") {
  const BaseModelShape s = tiny();
  const ModuleId m = *module_from_name(module);
  b.add_f32(key(layer, module, "A", name), {r, s.in_dim(m)}, values(r * s.in_dim(m), 0.1f * static_cast<float>(layer + 1)));
  b.add_f32(key(layer, module, "B", name), {s.out_dim(m), r}, values(s.out_dim(m) * r, -0.2f));
}

// Writes a PEFT directory; returns its path.
std::string write_peft(const std::string& dir_name, const std::string& config_json, const SafetensorsBuilder& b) {
  const fs::path dir = fs::path(testing::temp_path(dir_name));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "adapter_config.json") << config_json;
  b.write((dir / "adapter_model.safetensors").string());
  return dir.string();
}

SafetensorsBuilder qv_modules(int64_t r, const std::string& name = "") {
  SafetensorsBuilder b;
  for (int64_t l = 0; l < 2; ++l) {
    add_module(b, l, "q_proj", r, name);
    add_module(b, l, "v_proj", r, name);
  }
  return b;
}

const char* kQvConfig = R"({"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ["q_proj", "v_proj"],
  "bias": "none", "use_dora": false, "modules_to_save": null, "layers_to_transform": null})";

// Expects load to throw AdapterLoadError whose message contains every `needle`.
void expect_refused(const std::string& dir, const std::vector<std::string>& needles) {
  try {
    load_adapter("x", dir, tiny());
    ADD_FAILURE() << "loaded " << dir << " but expected a refusal";
  } catch (const AdapterLoadError& e) {
    for (const std::string& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

TEST(PeftLoading, LoadsFoldsScaleAndKeepsHfLayout) {
  const std::string dir = write_peft("peft_ok", kQvConfig, qv_modules(2));
  std::shared_ptr<const Adapter> a = load_adapter("ok", dir, tiny());
  EXPECT_EQ(a->modules().size(), 4u);
  EXPECT_EQ(a->target_names(), (std::vector<std::string>{"q_proj", "v_proj"}));
  const LoraModule* q1 = a->find(1, ModuleId::kQ);
  ASSERT_NE(q1, nullptr);
  EXPECT_EQ(a->find(0, ModuleId::kK), nullptr);
  EXPECT_DOUBLE_EQ(q1->scale, 2.0);  // alpha 4 / r 2
  EXPECT_TRUE(at::allclose(q1->a, at::tensor(values(16, 0.2f)).view({2, 8})));
  EXPECT_TRUE(at::allclose(q1->b, at::tensor(values(16, -0.2f)).view({8, 2}) * 2.0));
  EXPECT_EQ(a->num_bytes(), (2 * (16 + 16) + 2 * (16 + 8)) * 4);
  EXPECT_EQ(a->format(), AdapterFormat::kPeft);
}

TEST(PeftLoading, KeysWithTheAdapterNameSegmentLoadTheSame) {
  auto plain = load_adapter("a", write_peft("peft_plain", kQvConfig, qv_modules(2)), tiny());
  auto named = load_adapter("b", write_peft("peft_named", kQvConfig, qv_modules(2, "default")), tiny());
  EXPECT_EQ(plain->content_hash(), named->content_hash());
}

TEST(PeftLoading, IdentityIsContentPlusLoad) {
  const std::string dir = write_peft("peft_id", kQvConfig, qv_modules(2));
  auto a = load_adapter("a", dir, tiny());
  auto b = load_adapter("a", dir, tiny());
  EXPECT_EQ(a->content_hash(), b->content_hash());
  EXPECT_EQ(a->content_hash().size(), 32u);
  EXPECT_NE(a->identity(), b->identity());  // a reload never reuses the old identity
  EXPECT_EQ(a->find(0, ModuleId::kQ)->hash, b->find(0, ModuleId::kQ)->hash);
  // Changing one value, or only the scale, changes the hash (of that module only).
  SafetensorsBuilder changed = qv_modules(2);
  changed.tensors[0] = SafetensorsBuilder().add_f32(key(0, "q_proj", "A"), {2, 8}, values(16, 0.3f));
  auto c = load_adapter("a", write_peft("peft_id2", kQvConfig, changed), tiny());
  EXPECT_NE(a->content_hash(), c->content_hash());
  EXPECT_NE(a->find(0, ModuleId::kQ)->hash, c->find(0, ModuleId::kQ)->hash);
  EXPECT_EQ(a->find(0, ModuleId::kV)->hash, c->find(0, ModuleId::kV)->hash);
  std::string alpha8 = kQvConfig;
  alpha8.replace(alpha8.find("\"lora_alpha\": 4"), 15, "\"lora_alpha\": 8");
  auto d = load_adapter("a", write_peft("peft_id3", alpha8, qv_modules(2)), tiny());
  EXPECT_NE(a->content_hash(), d->content_hash());
  EXPECT_EQ(a->find(0, ModuleId::kQ)->a_hash, d->find(0, ModuleId::kQ)->a_hash);
}

TEST(PeftLoading, TargetRulesAsPeftAppliesThem) {
  // all-linear with exclude_modules, rank_pattern, alpha_pattern and rsLoRA off.
  SafetensorsBuilder b;
  for (int64_t l = 0; l < 2; ++l) {
    for (const char* m : {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}) {
      if (l == 0 && std::string(m) == "o_proj") continue;  // excluded
      const bool q = std::string(m) == "q_proj", down1 = l == 1 && std::string(m) == "down_proj";
      add_module(b, l, m, q ? 1 : down1 ? 3 : 2);
    }
  }
  const std::string cfg = R"({"r": 2, "lora_alpha": 4, "target_modules": "all-linear",
    "exclude_modules": ["model.layers.0.self_attn.o_proj"], "rank_pattern": {"q_proj": 1, "layers.1.mlp.down_proj": 3},
    "alpha_pattern": {"v_proj": 8}})";
  auto a = load_adapter("p", write_peft("peft_rules", cfg, b), tiny());
  EXPECT_EQ(a->modules().size(), 13u);
  EXPECT_EQ(a->find(0, ModuleId::kO), nullptr);
  EXPECT_DOUBLE_EQ(a->find(0, ModuleId::kQ)->scale, 4.0);  // alpha 4 / r 1
  EXPECT_DOUBLE_EQ(a->find(1, ModuleId::kDown)->scale, 4.0 / 3.0);
  EXPECT_DOUBLE_EQ(a->find(0, ModuleId::kDown)->scale, 2.0);
  EXPECT_DOUBLE_EQ(a->find(1, ModuleId::kV)->scale, 4.0);  // alpha 8 / r 2
  EXPECT_EQ(a->min_rank(), 1);
  EXPECT_EQ(a->max_rank(), 3);
}

TEST(PeftLoading, RegexTargetsRsloraAndLayerSubsets) {
  SafetensorsBuilder b;
  add_module(b, 1, "k_proj", 4);
  const std::string regex_cfg = R"({"r": 4, "lora_alpha": 4, "use_rslora": true,
    "target_modules": ".*\\.layers\\.1\\.self_attn\\.k_proj"})";
  auto a = load_adapter("r", write_peft("peft_regex", regex_cfg, b), tiny());
  ASSERT_EQ(a->modules().size(), 1u);
  EXPECT_DOUBLE_EQ(a->find(1, ModuleId::kK)->scale, 2.0);  // alpha 4 / sqrt(4)
  const std::string subset_cfg = R"({"r": 4, "lora_alpha": 4, "target_modules": ["k_proj"],
    "layers_to_transform": [1], "layers_pattern": "layers"})";
  auto s = load_adapter("s", write_peft("peft_subset", subset_cfg, b), tiny());
  EXPECT_EQ(s->modules().size(), 1u);
  // The same weights under a config that targets layer 0 too: layer 0 has no weights.
  expect_refused(write_peft("peft_subset_missing", R"({"r": 4, "lora_alpha": 4, "target_modules": ["k_proj"]})", b),
                 {"model.layers.0.self_attn.k_proj", "no LoRA weights"});
}

struct Refusal {
  const char* field;
  const char* config_fragment;  // added to a valid q/v config
  const char* expected_text;
};

TEST(PeftLoading, RefusesUnsupportedConfigFields) {
  const Refusal cases[] = {
      {"bias", R"("bias": "lora_only")", "\"none\""},
      {"lora_bias", R"("lora_bias": true)", "false"},
      {"modules_to_save", R"("modules_to_save": ["lm_head"])", "null or []"},
      {"use_dora", R"("use_dora": true)", "DoRA"},
      {"trainable_token_indices", R"("trainable_token_indices": [1, 2])", "trainable tokens"},
      {"layer_replication", R"("layer_replication": [[0, 2]])", "layer replication"},
      {"target_parameters", R"("target_parameters": ["mlp.experts.gate_up_proj"])", "nn.Linear"},
  };
  for (const Refusal& c : cases) {
    const std::string cfg = std::string(R"({"r": 2, "lora_alpha": 4, "target_modules": ["q_proj", "v_proj"], )") +
                            c.config_fragment + "}";
    SCOPED_TRACE(c.field);
    expect_refused(write_peft(std::string("peft_refuse_") + c.field, cfg, qv_modules(2)),
                   {c.field, c.expected_text, "adapter_config.json"});
  }
}

TEST(PeftLoading, RefusesPickledWeights) {
  const fs::path dir = fs::path(testing::temp_path("peft_pickle"));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "adapter_config.json") << kQvConfig;
  std::ofstream(dir / "adapter_model.bin") << "\x80\x04pickle";
  expect_refused(dir.string(), {"adapter_model.bin", "never runs code", "safetensors"});
  expect_refused((dir / "adapter_model.bin").string(), {"adapter_model.bin", "never runs code"});
}

TEST(PeftLoading, RefusesShapesOfAnotherBaseModel) {
  SafetensorsBuilder b = qv_modules(2);
  b.tensors[0] = SafetensorsBuilder().add_f32(key(0, "q_proj", "A"), {2, 16}, values(32, 0.1f));  // hidden 16
  expect_refused(write_peft("peft_shape", kQvConfig, b), {"model.layers.0.self_attn.q_proj", "[r, 8]", "[2, 16]",
                                                          "another base model"});
}

TEST(PeftLoading, RefusesRanksOutOfRange) {
  // r = 5 exceeds v_proj's 4 output features; r = 0 in the config is refused outright.
  const std::string cfg5 = R"({"r": 5, "lora_alpha": 5, "target_modules": ["q_proj", "v_proj"]})";
  expect_refused(write_peft("peft_rank5", cfg5, qv_modules(5)), {"rank out of range", "1..4", "5"});
  const std::string cfg0 = R"({"r": 0, "lora_alpha": 5, "target_modules": ["q_proj", "v_proj"]})";
  expect_refused(write_peft("peft_rank0", cfg0, qv_modules(2)), {"[r]", "r >= 1"});
  // A rank that disagrees with the config.
  expect_refused(write_peft("peft_rank_mismatch", kQvConfig, qv_modules(3)), {"rank 2", "rank 3"});
}

TEST(PeftLoading, RefusesLayersOutOfRange) {
  SafetensorsBuilder b = qv_modules(2);
  add_module(b, 7, "q_proj", 2);
  expect_refused(write_peft("peft_layer7", kQvConfig, b), {"layer out of range", "0..1", "7", "another base model"});
  const std::string cfg = R"({"r": 2, "lora_alpha": 4, "target_modules": ["q_proj"], "layers_to_transform": [0, 9]})";
  expect_refused(write_peft("peft_layers_cfg", cfg, qv_modules(2)), {"layers_to_transform", "9"});
}

TEST(PeftLoading, RefusesNanAndInfWeights) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    SafetensorsBuilder b = qv_modules(2);
    std::vector<float> v = values(16, -0.2f);
    v[5] = bad;
    b.tensors[1] = SafetensorsBuilder().add_f32(key(0, "q_proj", "B"), {8, 2}, v);
    expect_refused(write_peft(std::isnan(bad) ? "peft_nan" : "peft_inf", kQvConfig, b),
                   {"NaN or Inf", "lora_A"});
  }
}

TEST(PeftLoading, RefusesTensorsItCannotApply) {
  SafetensorsBuilder b = qv_modules(2);
  b.add_f32("base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector", {8}, values(8, 1.0f));
  expect_refused(write_peft("peft_magnitude", kQvConfig, b), {"unsupported tensor", "lora_magnitude_vector"});
  expect_refused(testing::temp_path("no_such_adapter_dir"), {"no_such_adapter_dir"});
}

// A GGUF LoRA with q rows in llama.cpp's permuted order loads with them un-permuted.
TEST(GgufLoraLoading, UnpermutesQAndKRowsAndUsesAlphaOverRank) {
  testing::GgufBuilder g;
  g.add_string("general.architecture", "llama");
  g.add_string("general.type", "adapter");
  g.add_string("adapter.type", "lora");
  g.add_f32("adapter.lora.alpha", 2.0f);
  // q: out 8 = 2 heads x 4, r = 1. HF B rows 0..7 hold 0..7; GGUF order per head: 0,2,1,3.
  g.add_f32_tensor("blk.1.attn_q.weight.lora_a", {8, 1}, values(8, 0.5f));
  g.add_f32_tensor("blk.1.attn_q.weight.lora_b", {1, 8}, {0, 2, 1, 3, 4, 6, 5, 7});
  g.add_f32_tensor("blk.0.attn_v.weight.lora_a", {8, 1}, values(8, 0.5f));
  g.add_f32_tensor("blk.0.attn_v.weight.lora_b", {1, 4}, {0, 2, 1, 3});
  const std::string path = testing::temp_path("lora.gguf");
  g.write(path);
  auto a = load_adapter("g", path, tiny());
  EXPECT_EQ(a->format(), AdapterFormat::kGgufLora);
  const LoraModule* q = a->find(1, ModuleId::kQ);
  ASSERT_NE(q, nullptr);
  EXPECT_DOUBLE_EQ(q->scale, 2.0);
  EXPECT_TRUE(at::equal(q->b.view({8}), at::arange(8, at::kFloat) * 2.0)) << q->b;
  const LoraModule* v = a->find(0, ModuleId::kV);  // v rows are never permuted
  EXPECT_TRUE(at::equal(v->b.view({4}), at::tensor({0.f, 2.f, 1.f, 3.f}) * 2.0));
}

TEST(GgufLoraLoading, RefusesABaseModelFileAndUnknownTensors) {
  testing::GgufBuilder g;
  g.add_string("general.architecture", "llama");
  g.add_string("general.type", "model");
  const std::string path = testing::temp_path("not_lora.gguf");
  g.write(path);
  expect_refused(path, {"general.type", "\"adapter\"", "\"model\""});
  testing::GgufBuilder e;
  e.add_string("general.architecture", "llama");
  e.add_string("general.type", "adapter");
  e.add_string("adapter.type", "lora");
  e.add_f32_tensor("token_embd.weight.lora_a", {8, 1}, values(8, 0.5f));
  const std::string path2 = testing::temp_path("embd_lora.gguf");
  e.write(path2);
  expect_refused(path2, {"token_embd.weight.lora_a", "unsupported tensor"});
}

}  // namespace
}  // namespace lorakv::adapters
