// tests/runtime/adapter_release_test.cpp: an adapter's factors are freed once nothing holds
// the adapter: the decode batches' stacked factors (LlamaModel's LoraStackCache) keep them
// until forget_adapter_stacks(), which the sessions' Runtime::unload_adapter calls.
#include <gtest/gtest.h>

#include <c10/util/intrusive_ptr.h>

#include <memory>
#include <vector>

#include "lorakv/runtime/generator.h"
#include "tests/runtime/tiny_engine_model.h"

namespace lorakv::runtime {
namespace {

TEST(AdapterRelease, FactorsGoOnceTheStacksAreForgotten) {
  lorakv::testing::TinyEngineModel tiny = lorakv::testing::make_tiny_engine_model();
  const LlamaModel& model = *tiny.model;
  std::vector<std::shared_ptr<const adapters::Adapter>> adapters;
  for (uint32_t i = 0; i < 3; ++i) {
    adapters.push_back(lorakv::testing::make_tiny_adapter(model, "a" + std::to_string(i), 10 + i, 20 + i));
  }
  c10::weak_intrusive_ptr<c10::TensorImpl> factor(
      adapters[0]->find(0, adapters::ModuleId::kV)->b.getIntrusivePtr());
  {
    // Three adapters decoding one row each: the gathered strategy stacks their factors.
    std::vector<GenerationRequest> requests(3);
    for (size_t i = 0; i < 3; ++i) {
      requests[i].prompt = {1, static_cast<int32_t>(2 + i), 5};
      requests[i].max_tokens = 3;
      requests[i].adapter = adapters[i];
    }
    (void)generate(model, nullptr, requests);
  }
  adapters.clear();
  EXPECT_FALSE(factor.expired()) << "the decode stacks should still hold the factors (else this test shows nothing)";
  model.forget_adapter_stacks();
  EXPECT_TRUE(factor.expired()) << "an adapter nobody holds still has its factors in memory";
}

}  // namespace
}  // namespace lorakv::runtime
