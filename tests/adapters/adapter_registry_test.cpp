// tests/adapters/adapter_registry_test.cpp: the registry's contract: load/replace/unload
// by name, listing and memory, pinning (an adapter in use cannot be unloaded), and one
// thread loading and unloading while another generates on the real model.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "adapters/adapter_registry.h"
#include "common/errors.h"
#include "formats/gguf_file.h"
#include "runtime/generator.h"
#include "runtime/llama_model.h"
#include "tests/support/safetensors_builder.h"
#include "tests/support/test_settings.h"

namespace lorakv::testing {
std::string temp_path(const std::string& name);
}

namespace lorakv::adapters {
namespace {

namespace fs = std::filesystem;

BaseModelShape tiny() { return {"llama", 2, 8, 2, 1, 4, 12, true}; }

// A PEFT q_proj adapter of rank r on the tiny shape, values offset by `seed`.
std::string write_q_adapter(const std::string& name, int64_t r, float seed) {
  testing::SafetensorsBuilder b;
  for (int l = 0; l < 2; ++l) {
    const std::string p = "base_model.model.model.layers." + std::to_string(l) + ".self_attn.q_proj.lora_";
    b.add_f32(p + "A.weight", {r, 8}, std::vector<float>(static_cast<size_t>(r * 8), seed));
    b.add_f32(p + "B.weight", {8, r}, std::vector<float>(static_cast<size_t>(r * 8), 0.5f));
  }
  const fs::path dir = testing::temp_path("registry_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "adapter_config.json") << R"({"r": )" << r << R"(, "lora_alpha": 2, "target_modules": ["q_proj"]})";
  b.write((dir / "adapter_model.safetensors").string());
  return dir.string();
}

TEST(AdapterRegistry, LoadListUnloadAndMemory) {
  AdapterRegistry reg(tiny(), at::kFloat);
  reg.load("b", write_q_adapter("b", 2, 0.1f));
  reg.load("a", write_q_adapter("a", 4, 0.2f));
  const std::vector<AdapterInfo> list = reg.list();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].name, "a");
  EXPECT_EQ(list[0].max_rank, 4);
  EXPECT_EQ(list[0].targets, std::vector<std::string>{"q_proj"});
  EXPECT_EQ(list[0].num_bytes, 2 * (4 * 8 + 8 * 4) * 4);
  EXPECT_EQ(list[0].identity.content_hash.size(), 32u);
  EXPECT_EQ(reg.num_bytes(), list[0].num_bytes + list[1].num_bytes);
  EXPECT_EQ(reg.unload("a").status, UnloadStatus::kUnloaded);
  EXPECT_EQ(reg.unload("a").status, UnloadStatus::kNotFound);
  EXPECT_EQ(reg.size(), 1u);
  EXPECT_EQ(reg.acquire("a"), nullptr);
  EXPECT_THROW(reg.require("a"), ConfigError);
}

TEST(AdapterRegistry, ExistingNameNeedsReplaceAndGetsANewIdentity) {
  AdapterRegistry reg(tiny(), at::kFloat);
  const std::string dir = write_q_adapter("x", 2, 0.1f);
  auto first = reg.load("x", dir);
  EXPECT_THROW(reg.load("x", dir), ConfigError);
  auto pinned = reg.acquire("x");  // a running sequence holds the old one
  auto second = reg.load("x", write_q_adapter("x2", 2, 0.3f), /*replace=*/true);
  EXPECT_NE(first->identity(), second->identity());
  EXPECT_NE(first->content_hash(), second->content_hash());
  EXPECT_EQ(pinned->identity(), first->identity());  // the running sequence keeps its adapter
  EXPECT_EQ(reg.acquire("x")->identity(), second->identity());
  // Reloading identical bytes: same content hash, still a new identity.
  auto third = reg.load("x", write_q_adapter("x3", 2, 0.3f), /*replace=*/true);
  EXPECT_EQ(third->content_hash(), second->content_hash());
  EXPECT_NE(third->identity(), second->identity());
}

TEST(AdapterRegistry, AnAdapterInUseCannotBeUnloaded) {
  AdapterRegistry reg(tiny(), at::kFloat);
  reg.load("x", write_q_adapter("inuse", 2, 0.1f));
  {
    std::shared_ptr<const Adapter> pin = reg.acquire("x");
    const UnloadResult r = reg.unload("x");
    EXPECT_EQ(r.status, UnloadStatus::kInUse);
    EXPECT_NE(r.message.find("in use"), std::string::npos) << r.message;
    EXPECT_TRUE(reg.list()[0].in_use);
    EXPECT_EQ(pin->find(0, ModuleId::kQ)->rank, 2);  // nothing broke
  }
  EXPECT_EQ(reg.unload("x").status, UnloadStatus::kUnloaded);
}

TEST(AdapterRegistry, SharedAGroupsNeedBitwiseEqualA) {
  AdapterRegistry reg(tiny(), at::kFloat);
  reg.load("a", write_q_adapter("sa", 2, 0.1f));
  reg.load("b", write_q_adapter("sb", 2, 0.1f));
  reg.load("c", write_q_adapter("sc", 2, 0.2f));
  const auto groups = reg.shared_a_groups();
  ASSERT_EQ(groups.size(), 2u);  // q_proj of layers 0 and 1
  EXPECT_EQ(groups[0].adapters, (std::vector<std::string>{"a", "b"}));
}

TEST(AdapterRegistry, ModuleOrderMatchesTheRuntime) {
  for (int i = 0; i < kNumModules; ++i) {
    EXPECT_STREQ(module_name(static_cast<ModuleId>(i)), runtime::module_name(static_cast<runtime::Module>(i)));
  }
}

// One thread loads, replaces and unloads adapters while another generates with a pinned
// one; the generating thread's tokens never change and unloading its adapter refuses.
TEST(AdapterRegistry, LoadAndUnloadWhileAnotherThreadGenerates) {
  const std::string model_path = testing::test_setting("LORAKV_MODEL");
  const std::string dir = testing::test_setting("LORAKV_ORACLE_DIR") + "/peft";
  ASSERT_FALSE(model_path.empty());
  auto file = formats::GgufFile::open(model_path);
  std::unique_ptr<runtime::LlamaModel> model = runtime::LlamaModel::from_gguf(*file);
  AdapterRegistry reg(model->adapter_shape(), model->dtype());
  reg.load("worker", dir + "/qv_r8");
  runtime::GenerationRequest req;
  req.prompt = {1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365};
  req.max_new_tokens = 6;
  req.adapter = reg.acquire("worker");
  const std::vector<int32_t> expected = runtime::generate(*model, nullptr, {req})[0].tokens;
  // `req` keeps the worker pinned for the whole test, as a running sequence would.

  std::atomic<bool> done{false};
  std::atomic<int> refusals{0}, cycles{0};
  std::thread loader([&] {
    while (!done.load()) {
      reg.load("scratch", dir + "/qkvo_r1", /*replace=*/true);
      reg.load("scratch", dir + "/rslora_r8", /*replace=*/true);
      EXPECT_EQ(reg.unload("scratch").status, UnloadStatus::kUnloaded);
      if (reg.unload("worker").status == UnloadStatus::kInUse) ++refusals;
      ++cycles;
    }
  });
  for (int round = 0; round < 3; ++round) {
    runtime::GenerationRequest r = req;
    r.adapter = reg.acquire("worker");
    ASSERT_NE(r.adapter, nullptr) << "the pinned adapter was unloaded";
    EXPECT_EQ(runtime::generate(*model, nullptr, {r})[0].tokens, expected) << "round " << round;
  }
  while (cycles.load() < 2) std::this_thread::yield();
  done = true;
  loader.join();
  EXPECT_GT(refusals.load(), 0);
  std::printf("  %d load/unload cycles ran beside generation, %d unloads refused while in use\n", cycles.load(),
              refusals.load());
}

}  // namespace
}  // namespace lorakv::adapters
