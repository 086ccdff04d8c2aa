// tests/runtime/activated_lora_refusal_test.cpp: an activated LoRA (aLoRA) runs only where its
// activation rule is applied (the engine: tests/runtime/engine_alora_test.cpp). Every other
// way an adapter reaches the model (the generator without the engine, a plain forward)
// refuses it with a ConfigError naming it, and never runs it as a standard LoRA.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lorakv/common/errors.h"
#include "lorakv/runtime/engine.h"
#include "lorakv/runtime/generator.h"
#include "tests/runtime/tiny_engine_model.h"

namespace lorakv::runtime {
namespace {

using AdapterPtr = std::shared_ptr<const adapters::Adapter>;

// The same factors as `standard`, with invocation tokens: an activated LoRA.
AdapterPtr activated_copy(const adapters::Adapter& standard, std::vector<int32_t> tokens) {
  return std::make_shared<const adapters::Adapter>("alora", "alora.gguf", adapters::AdapterFormat::kGgufLora,
                                                   standard.base_shape(), standard.modules(), std::move(tokens));
}

// Expects `fn` to throw the runtime's aLoRA refusal (or, with `found`, another ConfigError
// whose message holds it).
void expect_refused(const std::function<void()>& fn, const std::string& found = "runs only in the engine") {
  try {
    fn();
    ADD_FAILURE() << "an activated LoRA was run";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'alora'"), std::string::npos) << m;
    EXPECT_NE(m.find(found), std::string::npos) << m;
    EXPECT_NE(m.find("alora.gguf"), std::string::npos) << m;
    EXPECT_NE(m.find("[adapter.alora.invocation_tokens]"), std::string::npos) << m;
  }
}

TEST(EngineActivatedLora, IsRefusedOutsideTheEngine) {
  lorakv::testing::TinyEngineModel tiny = lorakv::testing::make_tiny_engine_model();
  const AdapterPtr standard = lorakv::testing::make_tiny_adapter(*tiny.model, "standard", 1, 11);
  const AdapterPtr alora = activated_copy(*standard, {5, 6});
  ASSERT_TRUE(alora->activated());
  GenerationRequest r;
  r.prompt = {1, 5, 6, 7};
  r.max_tokens = 2;
  r.adapter = alora;
  GeneratorOptions options;
  options.use_cache = false;
  expect_refused([&] { generate(*tiny.model, nullptr, {r}, nullptr, options); });
  // A plain forward (no engine) refuses it too; the same factors without tokens run, and so
  // does the aLoRA where the caller says it applied the rule.
  std::unique_ptr<KvCache> cache = tiny.model->make_cache();
  expect_refused([&] { tiny.model->forward({{SeqId(0), {1, 5, 6}, alora.get()}}, *cache); });
  EXPECT_NO_THROW(tiny.model->forward({{SeqId(0), {1, 5, 6}, standard.get()}}, *cache));
  SequenceInput applied{SeqId(1), {5, 6}, alora.get()};
  applied.activation_applied = true;
  EXPECT_NO_THROW(tiny.model->forward({applied}, *cache));
  r.adapter.reset();
  EXPECT_EQ(alora.use_count(), 1) << "a refused adapter stays pinned";
}

// Token ids the model's vocabulary (48 here) lacks: refused before anything else, naming the key.
TEST(EngineActivatedLora, InvocationTokensOutsideTheVocabularyAreRefused) {
  lorakv::testing::TinyEngineModel tiny = lorakv::testing::make_tiny_engine_model();
  const AdapterPtr standard = lorakv::testing::make_tiny_adapter(*tiny.model, "standard", 1, 11);
  const AdapterPtr alora = activated_copy(*standard, {5, 48});
  Engine engine(*tiny.model);
  expect_refused([&] { engine.create_context({SharingMode::kFull, SharedWriter::kFirst}, {alora}); }, "0..47");
}

}  // namespace
}  // namespace lorakv::runtime
