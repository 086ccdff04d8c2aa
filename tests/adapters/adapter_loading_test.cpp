// tests/adapters/adapter_loading_test.cpp: PEFT and GGUF LoRA loading on small hand-made
// adapters: the config rules PEFT applies, scale folding, content identity (with shared-A
// groups and a registry holding equal identities), and one test per refusal (each checks
// the message names the field and what is supported).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <utility>

#include "lorakv/adapters/adapter_loader.h"
#include "lorakv/adapters/adapter_registry.h"
#include "lorakv/common/errors.h"
#include "tests/support/gguf_builder.h"
#include "tests/support/safetensors_builder.h"

namespace lorakv::adapters {
namespace {

namespace fs = std::filesystem;
using testing::SafetensorsBuilder;

// A tiny Llama: 2 layers, hidden 8, 2 heads of 4 (q 8 wide), 1 KV head (k/v 4 wide), MLP 12,
// vocabulary 32.
BaseModelShape tiny() { return {"llama", 2, 8, 2, 1, 4, 12, true, 32}; }

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

// Identity (adapters/adapter.h): a SHA-256 of exactly what determines the output.
TEST(AdapterIdentity, SameContentGivesOneIdentityAcrossLoadsNamesAndPaths) {
  const std::string dir = write_peft("peft_id", kQvConfig, qv_modules(2));
  auto a = load_adapter("a", dir, tiny());
  auto b = load_adapter("b", dir, tiny());  // another load, another name
  EXPECT_EQ(a->identity(), b->identity());
  EXPECT_FALSE(a->identity().is_base_model());
  EXPECT_EQ(a->content_hash(), a->identity().hex());
  EXPECT_EQ(a->content_hash().size(), 64u);
  for (const LoraModule& m : a->modules()) {
    EXPECT_EQ(m.hash, b->find(m.layer, m.module)->hash);
    EXPECT_EQ(m.a_hash, b->find(m.layer, m.module)->a_hash);
  }
  // A copy elsewhere, and an unused option (dropout only acts in training): still equal.
  const fs::path copy = fs::path(testing::temp_path("peft_id_copy"));
  fs::remove_all(copy);
  fs::copy(dir, copy);
  EXPECT_EQ(load_adapter("c", copy.string(), tiny())->identity(), a->identity());
  std::string dropout = kQvConfig;
  dropout.insert(1, R"("lora_dropout": 0.1, )");
  EXPECT_EQ(load_adapter("d", write_peft("peft_id_dropout", dropout, qv_modules(2)), tiny())->identity(), a->identity());
  // Two registries (as two processes would have) agree too.
  AdapterRegistry r1(tiny(), at::kFloat), r2(tiny(), at::kFloat);
  EXPECT_EQ(r1.load("x", dir)->identity(), r2.load("y", copy.string())->identity());
}

// Nothing process-local (addresses, serials, time) may enter the identity, or a saved
// session restored in another process would miss its rows: this digest was computed once
// and must never change unless the hashed encoding is changed on purpose (a new tag).
TEST(AdapterIdentity, IsTheSameInEveryProcess) {
  auto a = load_adapter("a", write_peft("peft_id_golden", kQvConfig, qv_modules(2)), tiny());
  EXPECT_EQ(a->identity().hex(), "8386af9f9a97b222a077df1b25a83aa7f98bd4b5efd5459f65047f15835d84b7");
}

TEST(AdapterIdentity, EveryFieldThatChangesTheOutputChangesIt) {
  const AdapterIdentity base = load_adapter("a", write_peft("peft_id_base", kQvConfig, qv_modules(2)), tiny())->identity();
  auto identity_of = [](const std::string& dir_name, const std::string& cfg, const SafetensorsBuilder& b,
                        at::ScalarType dtype = at::kFloat) {
    return load_adapter("a", write_peft(dir_name, cfg, b), tiny(), {dtype})->identity();
  };
  auto with = [](std::string cfg, const std::string& from, const std::string& to) {
    cfg.replace(cfg.find(from), from.size(), to);
    return cfg;
  };
  SafetensorsBuilder one_b = qv_modules(2);
  std::vector<float> bv = values(16, -0.2f);
  bv[7] += 0.5f;
  one_b.tensors[1] = SafetensorsBuilder().add_f32(key(0, "q_proj", "B"), {8, 2}, bv);
  EXPECT_NE(identity_of("peft_id_b", kQvConfig, one_b), base) << "one B element";
  SafetensorsBuilder one_a = qv_modules(2);
  std::vector<float> av = values(16, 0.1f);
  av[3] = -1.0f;
  one_a.tensors[0] = SafetensorsBuilder().add_f32(key(0, "q_proj", "A"), {2, 8}, av);
  EXPECT_NE(identity_of("peft_id_a", kQvConfig, one_a), base) << "one A element";
  EXPECT_NE(identity_of("peft_id_alpha", with(kQvConfig, "\"lora_alpha\": 4", "\"lora_alpha\": 8"), qv_modules(2)), base)
      << "the scale";
  EXPECT_NE(identity_of("peft_id_rslora", with(kQvConfig, "\"r\": 2", "\"r\": 2, \"use_rslora\": true"), qv_modules(2)),
            base)
      << "rsLoRA's scale";
  SafetensorsBuilder q_only, o_only;
  for (int64_t l = 0; l < 2; ++l) add_module(q_only, l, "q_proj", 2);
  const std::string q_cfg = with(kQvConfig, R"(["q_proj", "v_proj"])", R"(["q_proj"])");
  const AdapterIdentity q_identity = identity_of("peft_id_targets", q_cfg, q_only);
  EXPECT_NE(q_identity, base) << "a target module fewer";
  // The same bytes on o_proj instead of q_proj (both 8 -> 8 in the tiny model).
  for (int64_t l = 0; l < 2; ++l) {
    o_only.add_f32(key(l, "o_proj", "A"), {2, 8}, values(16, 0.1f * static_cast<float>(l + 1)));
    o_only.add_f32(key(l, "o_proj", "B"), {8, 2}, values(16, -0.2f));
  }
  EXPECT_NE(identity_of("peft_id_module", with(q_cfg, "\"q_proj\"", "\"o_proj\""), o_only), q_identity)
      << "another module";
  SafetensorsBuilder rank_q1;
  for (int64_t l = 0; l < 2; ++l) {
    add_module(rank_q1, l, "q_proj", 1);
    add_module(rank_q1, l, "v_proj", 2);
  }
  EXPECT_NE(identity_of("peft_id_rank", with(kQvConfig, "\"r\": 2", "\"r\": 2, \"rank_pattern\": {\"q_proj\": 1}"),
                        rank_q1),
            base)
      << "a rank";
  EXPECT_NE(identity_of("peft_id_bf16", kQvConfig, qv_modules(2), at::kBFloat16), base) << "the stored dtype";
  // The same q factors on layer 1 instead of layer 0.
  auto q_on_layer = [&](int64_t layer) {
    SafetensorsBuilder b;
    b.add_f32(key(layer, "q_proj", "A"), {2, 8}, values(16, 0.1f));
    b.add_f32(key(layer, "q_proj", "B"), {8, 2}, values(16, -0.2f));
    const std::string cfg = R"({"r": 2, "lora_alpha": 4, "target_modules": ["q_proj"], "layers_to_transform": [)" +
                            std::to_string(layer) + "]}";
    return identity_of("peft_id_layer" + std::to_string(layer), cfg, b);
  };
  EXPECT_NE(q_on_layer(0), q_on_layer(1)) << "the layer";
}

// The loaders fold the scale into B, so B's bytes carry it; the scale is hashed on its own
// as well, so a module whose scale were applied at run time could never alias one with it
// folded in. alpha is not hashed: only the scale it gives acts.
TEST(AdapterIdentity, HashesTheScaleButNotAlpha) {
  const LoraModule m = make_lora_module(tiny(), 0, ModuleId::kQ, at::ones({2, 8}), at::ones({8, 2}), 4.0, 2.0,
                                        at::kFloat, "test", "q");
  LoraModule other_scale = m, other_alpha = m;  // the same stored tensors
  other_scale.scale = 3.0;
  other_alpha.alpha = 8.0;
  auto identity = [](const LoraModule& mod) { return Adapter("a", "src", AdapterFormat::kPeft, tiny(), {mod}).identity(); };
  EXPECT_NE(identity(other_scale), identity(m));
  EXPECT_EQ(identity(other_alpha), identity(m));
}

// The format is not hashed: the same factors from PEFT and from GGUF are one identity.
TEST(AdapterIdentity, PeftAndGgufWithTheSameFactorsAgree) {
  SafetensorsBuilder b;
  add_module(b, 0, "v_proj", 2);
  const std::string cfg = R"({"r": 2, "lora_alpha": 4, "target_modules": ["v_proj"], "layers_to_transform": [0]})";
  auto peft = load_adapter("p", write_peft("peft_id_vs_gguf", cfg, b), tiny());
  testing::GgufBuilder g;
  g.add_string("general.architecture", "llama");
  g.add_string("general.type", "adapter");
  g.add_string("adapter.type", "lora");
  g.add_f32("adapter.lora.alpha", 4.0f);
  g.add_f32_tensor("blk.0.attn_v.weight.lora_a", {8, 2}, values(16, 0.1f));  // torch [2, 8]
  g.add_f32_tensor("blk.0.attn_v.weight.lora_b", {2, 4}, values(8, -0.2f));  // torch [4, 2]
  const std::string path = testing::temp_path("id_vs_peft.gguf");
  g.write(path);
  auto gguf = load_adapter("g", path, tiny());
  ASSERT_EQ(gguf->format(), AdapterFormat::kGgufLora);
  EXPECT_EQ(gguf->identity(), peft->identity());
}

// Shared-A groups are per (layer, module): their identity is A's digest there, whatever
// the members' other modules hold, and byte-equal A elsewhere is another group.
TEST(AdapterIdentity, SharedAGroupsArePerLayerAndModule) {
  SafetensorsBuilder x, y;
  for (int64_t l = 0; l < 2; ++l) {
    for (SafetensorsBuilder* b : {&x, &y}) b->add_f32(key(l, "q_proj", "A"), {2, 8}, values(16, 0.1f));  // every q A equal
    x.add_f32(key(l, "q_proj", "B"), {8, 2}, values(16, -0.2f));
    y.add_f32(key(l, "q_proj", "B"), {8, 2}, values(16, 0.7f));
    x.add_f32(key(l, "v_proj", "A"), {2, 8}, values(16, 0.3f));
    y.add_f32(key(l, "v_proj", "A"), {2, 8}, values(16, 0.4f));
    for (SafetensorsBuilder* b : {&x, &y}) b->add_f32(key(l, "v_proj", "B"), {4, 2}, values(8, 0.5f));
  }
  AdapterRegistry reg(tiny(), at::kFloat);
  auto ax = reg.load("x", write_peft("peft_group_x", kQvConfig, x));
  auto ay = reg.load("y", write_peft("peft_group_y", kQvConfig, y));
  EXPECT_NE(ax->identity(), ay->identity());
  const std::vector<SharedAGroup> groups = reg.shared_a_groups();
  ASSERT_EQ(groups.size(), 2u);  // q_proj at layers 0 and 1; no v_proj group
  for (int64_t l = 0; l < 2; ++l) {
    const SharedAGroup& g = groups[static_cast<size_t>(l)];
    EXPECT_EQ(g.layer, l);
    EXPECT_EQ(g.module, ModuleId::kQ);
    EXPECT_EQ(g.adapters, (std::vector<std::string>{"x", "y"}));
    EXPECT_EQ(g.identity, ax->find(l, ModuleId::kQ)->a_hash);
    EXPECT_EQ(g.identity, ay->find(l, ModuleId::kQ)->a_hash);
  }
  EXPECT_NE(groups[0].identity, groups[1].identity);  // the same A bytes at another layer
  EXPECT_NE(groups[0].identity, ax->identity());
}

// Two names with one content: both work, and unloading one leaves the other whole.
TEST(AdapterIdentity, RegistryNamesWithOneContentStayIndependent) {
  AdapterRegistry reg(tiny(), at::kFloat);
  const std::string dir = write_peft("peft_twins", kQvConfig, qv_modules(2));
  auto x = reg.load("x", dir);
  auto y = reg.load("y", dir);
  EXPECT_EQ(x->identity(), y->identity());
  EXPECT_EQ(reg.size(), 2u);
  EXPECT_EQ(reg.shared_a_groups().size(), 4u);  // every module's A is shared by the twins
  x.reset();
  y.reset();
  EXPECT_EQ(reg.unload("x").status, UnloadStatus::kUnloaded);
  std::shared_ptr<const Adapter> left = reg.require("y");
  EXPECT_EQ(left->identity(), load_adapter("z", dir, tiny())->identity());
  EXPECT_TRUE(at::allclose(left->find(1, ModuleId::kQ)->a, at::tensor(values(16, 0.2f)).view({2, 8})));
  EXPECT_TRUE(reg.shared_a_groups().empty());
  // Replacing with the same content keeps the identity; with other content, not.
  EXPECT_EQ(reg.load("y", dir, /*replace=*/true)->identity(), left->identity());
  std::string alpha8 = kQvConfig;
  alpha8.replace(alpha8.find("\"lora_alpha\": 4"), 15, "\"lora_alpha\": 8");
  EXPECT_NE(reg.load("y", write_peft("peft_twins8", alpha8, qv_modules(2)), true)->identity(), left->identity());
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

// Activated LoRA (aLoRA): the loaders keep the invocation tokens (adapters/adapter.h); the
// runtime refuses to run such an adapter (tests/runtime/activated_lora_refusal_test.cpp).

// A GGUF LoRA on layer 0's v_proj as llama.cpp's converter writes one; `keys` adds metadata.
std::string write_gguf_lora(const std::string& file, const std::function<void(testing::GgufBuilder&)>& keys = {}) {
  testing::GgufBuilder g;
  g.add_string("general.architecture", "llama");
  g.add_string("general.type", "adapter");
  g.add_string("adapter.type", "lora");
  g.add_f32("adapter.lora.alpha", 2.0f);
  if (keys) keys(g);
  g.add_f32_tensor("blk.0.attn_v.weight.lora_a", {8, 1}, values(8, 0.5f));
  g.add_f32_tensor("blk.0.attn_v.weight.lora_b", {1, 4}, {0, 2, 1, 3});
  const std::string path = testing::temp_path(file);
  g.write(path);
  return path;
}

std::string with_tokens(const std::string& tokens_json) {
  std::string cfg = kQvConfig;
  cfg.insert(1, "\"alora_invocation_tokens\": " + tokens_json + ", ");
  return cfg;
}

TEST(GgufLoraLoading, KeepsActivatedLoraInvocationTokens) {
  // uint32, the element type llama.cpp's convert_lora_to_gguf.py writes (and llama.cpp reads).
  auto a = load_adapter("a", write_gguf_lora("alora_u32.gguf", [](testing::GgufBuilder& g) {
                          g.add_u32_array("adapter.alora.invocation_tokens", {1, 2, 31});
                        }), tiny());
  EXPECT_TRUE(a->activated());
  EXPECT_EQ(a->invocation_tokens(), (std::vector<int32_t>{1, 2, 31}));
  EXPECT_EQ(a->invocation_tokens_file(), a->source());
  // int32 elements are the same ids.
  auto b = load_adapter("b", write_gguf_lora("alora_i32.gguf", [](testing::GgufBuilder& g) {
                          g.add_i32_array("adapter.alora.invocation_tokens", {1, 2, 31});
                        }), tiny());
  EXPECT_EQ(b->invocation_tokens(), a->invocation_tokens());
  EXPECT_EQ(b->identity(), a->identity());
  // The factors load as for a standard LoRA; only the tokens (and so the identity) differ.
  auto plain = load_adapter("p", write_gguf_lora("alora_none.gguf"), tiny());
  EXPECT_FALSE(plain->activated());
  EXPECT_TRUE(plain->invocation_tokens().empty());
  ASSERT_NE(a->find(0, ModuleId::kV), nullptr);
  EXPECT_TRUE(at::equal(a->find(0, ModuleId::kV)->b, plain->find(0, ModuleId::kV)->b));
  EXPECT_NE(a->identity(), plain->identity());
}

TEST(PeftLoading, KeepsActivatedLoraInvocationTokens) {
  auto a = load_adapter("a", write_peft("peft_alora", with_tokens("[5, 6, 31]"), qv_modules(2)), tiny());
  EXPECT_TRUE(a->activated());
  EXPECT_EQ(a->invocation_tokens(), (std::vector<int32_t>{5, 6, 31}));
  EXPECT_EQ(a->invocation_tokens_file(), (fs::path(a->source()) / "adapter_config.json").string());
  EXPECT_EQ(a->modules().size(), 4u);
  // null is what PEFT writes for a standard LoRA.
  auto null_tokens = load_adapter("n", write_peft("peft_alora_null", with_tokens("null"), qv_modules(2)), tiny());
  EXPECT_FALSE(null_tokens->activated());
  auto plain = load_adapter("p", write_peft("peft_alora_plain", kQvConfig, qv_modules(2)), tiny());
  EXPECT_EQ(null_tokens->identity(), plain->identity());
  EXPECT_NE(a->identity(), plain->identity());
}

// Which positions the factors act on is part of the output: every change of the tokens is a
// new identity, while the format still is not hashed.
TEST(AdapterIdentity, InvocationTokensAreHashed) {
  auto peft = [](const std::string& dir, const std::string& tokens) {
    return load_adapter("a", write_peft(dir, with_tokens(tokens), qv_modules(2)), tiny())->identity();
  };
  const AdapterIdentity base = peft("peft_tok_base", "[5, 6, 7]");
  EXPECT_EQ(peft("peft_tok_again", "[5, 6, 7]"), base);
  EXPECT_NE(peft("peft_tok_last", "[5, 6, 8]"), base) << "one token";
  EXPECT_NE(peft("peft_tok_order", "[7, 6, 5]"), base) << "the order";
  EXPECT_NE(peft("peft_tok_shorter", "[5, 6]"), base) << "a token fewer";
  EXPECT_NE(peft("peft_tok_longer", "[5, 6, 7, 7]"), base) << "a token more";
  EXPECT_NE(load_adapter("p", write_peft("peft_tok_none", kQvConfig, qv_modules(2)), tiny())->identity(), base)
      << "no tokens";
  // The same factors and tokens from PEFT and from GGUF: one identity.
  SafetensorsBuilder b;
  add_module(b, 0, "v_proj", 2);
  const std::string cfg = R"({"r": 2, "lora_alpha": 4, "target_modules": ["v_proj"], "layers_to_transform": [0],
    "alora_invocation_tokens": [3, 4]})";
  auto from_peft = load_adapter("p", write_peft("peft_tok_vs_gguf", cfg, b), tiny());
  testing::GgufBuilder g;
  g.add_string("general.architecture", "llama");
  g.add_string("general.type", "adapter");
  g.add_string("adapter.type", "lora");
  g.add_f32("adapter.lora.alpha", 4.0f);
  g.add_u32_array("adapter.alora.invocation_tokens", {3, 4});
  g.add_f32_tensor("blk.0.attn_v.weight.lora_a", {8, 2}, values(16, 0.1f));
  g.add_f32_tensor("blk.0.attn_v.weight.lora_b", {2, 4}, values(8, -0.2f));
  const std::string path = testing::temp_path("tok_vs_peft.gguf");
  g.write(path);
  EXPECT_EQ(load_adapter("g", path, tiny())->identity(), from_peft->identity());
}

TEST(PeftLoading, RefusesBadInvocationTokens) {
  const std::pair<const char*, const char*> cases[] = {
      {"[]", "an empty list"},
      {"\"5 6\"", "not a list"},
      {"5", "not a list"},
      {"[5, \"x\"]", "\"x\""},
      {"[5, 1.5]", "1.5"},
      {"[5, -1]", "-1"},
      {"[5, 2147483648]", "2147483648"},
      {"[5, 32]", "0..31"},  // the tiny model's vocabulary is 32
  };
  int n = 0;  // a folder per case: remove_all on an existing one crashes here (libtorch's copy)
  for (const auto& [tokens, found] : cases) {
    SCOPED_TRACE(tokens);
    expect_refused(write_peft("peft_bad_tokens" + std::to_string(n++), with_tokens(tokens), qv_modules(2)),
                   {"adapter_config.json", "[alora_invocation_tokens]", found});
  }
}

TEST(GgufLoraLoading, RefusesBadInvocationTokens) {
  struct Case {
    std::string name;
    std::function<void(testing::GgufBuilder&)> keys;
    std::vector<std::string> needles;  // besides the file
  };
  const std::string key = "adapter.alora.invocation_tokens";
  const std::vector<Case> cases = {
      {"empty", [&](testing::GgufBuilder& g) { g.add_u32_array(key, {}); }, {"[" + key + "]", "an empty array"}},
      {"negative", [&](testing::GgufBuilder& g) { g.add_i32_array(key, {1, -1}); }, {"[" + key + "]", "found -1"}},
      {"too_big", [&](testing::GgufBuilder& g) { g.add_u32_array(key, {1, 0x80000000u}); },
       {"[" + key + "]", "2147483648"}},
      {"vocab", [&](testing::GgufBuilder& g) { g.add_u32_array(key, {1, 32}); }, {"[" + key + "]", "0..31", "32"}},
      {"scalar", [&](testing::GgufBuilder& g) { g.add_u32(key, 1); }, {"[" + key + "]", "wrong type", "uint32"}},
      {"strings", [&](testing::GgufBuilder& g) { g.add_string_array(key, {"<|assistant|>"}); },
       {"[" + key + "]", "wrong type", "array<string>"}},
      // An adapter.alora.* key without the tokens, with them: both refused, naming that key.
      {"no_tokens", [&](testing::GgufBuilder& g) { g.add_string("adapter.alora.invocation_string", "<|assistant|>"); },
       {"[adapter.alora.invocation_string]", "without invocation tokens", key}},
      {"unknown_key",
       [&](testing::GgufBuilder& g) {
         g.add_u32_array(key, {1, 2});
         g.add_u32("adapter.alora.offset", 1);
       },
       {"[adapter.alora.offset]", "unknown activated LoRA key"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string file = "alora_bad_" + c.name + ".gguf";
    std::vector<std::string> needles = c.needles;
    needles.push_back(file);
    expect_refused(write_gguf_lora(file, c.keys), needles);
  }
}

}  // namespace
}  // namespace lorakv::adapters
