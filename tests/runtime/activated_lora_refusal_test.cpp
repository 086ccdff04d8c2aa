// tests/runtime/activated_lora_refusal_test.cpp: an activated LoRA (aLoRA) loads, but nothing
// in the runtime applies its activation rule yet, so every way an adapter reaches the model
// (a context's readers, add_reader, the generator with and without the engine, a plain
// forward) refuses it with a ConfigError naming it, and never runs it as a standard LoRA.
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
void expect_refused(const std::function<void()>& fn, const std::string& found = "engine does not run them yet") {
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

TEST(EngineActivatedLora, IsRefusedWhereverAReaderTakesIt) {
  lorakv::testing::TinyEngineModel tiny = lorakv::testing::make_tiny_engine_model();
  const AdapterPtr standard = lorakv::testing::make_tiny_adapter(*tiny.model, "standard", 1, 11);
  const AdapterPtr alora = activated_copy(*standard, {5, 6});
  ASSERT_TRUE(alora->activated());
  for (SharingMode mode : {SharingMode::kFull, SharingMode::kBaseShared, SharingMode::kBaseLrShared}) {
    SCOPED_TRACE(sharing_mode_name(mode));
    Engine engine(*tiny.model);
    expect_refused([&] { engine.create_context({mode, SharedWriter::kFirst}, {alora}); });
    const ContextId c = engine.create_context({mode, SharedWriter::kFirst}, {standard});
    expect_refused([&] { engine.add_reader(c, alora); });
    EXPECT_EQ(engine.add_reader(c, nullptr), 1) << "the refused reader was attached";
  }
  EXPECT_EQ(alora.use_count(), 1) << "a refused adapter stays pinned";
  GenerationRequest r;
  r.prompt = {1, 5, 6, 7};
  r.max_new_tokens = 2;
  r.adapter = alora;
  for (bool use_cache : {true, false}) {
    GeneratorOptions options;
    options.use_cache = use_cache;
    expect_refused([&] { generate(*tiny.model, nullptr, {r}, nullptr, options); });
  }
  // A plain forward (no engine) refuses it too; the same factors without tokens run.
  std::unique_ptr<KvCache> cache = tiny.model->make_cache();
  expect_refused([&] { tiny.model->forward({{SeqId(0), {1, 5, 6}, alora.get()}}, *cache); });
  EXPECT_NO_THROW(tiny.model->forward({{SeqId(0), {1, 5, 6}, standard.get()}}, *cache));
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
