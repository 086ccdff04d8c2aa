// tests/adapters/shared_base_parity_test.cpp: lorakv's `full_shared` mode with writer `base`
// against an independent reference, PEFT (tools/shared_base_oracle.py, the shared_base_oracle
// fixture): the context's forward under PEFT's disable_adapter(), then the planner's turn
// header with the planner adapter over that cache. lorakv runs the same through the engine
// (the base model writes the context rows, the header is the planner's private work) and
// must give the logits of the turn's first token within the float32 parity tolerance
// (kFloat32LogitsTolerance of the largest logit, tests/support/reference_values.h: each side
// is within about 2e-6 of the exact logits). The short form of the 100-question check
// (tools/agentic_qa/compare_episodes.py).
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "lorakv/adapters/adapter_registry.h"
#include "lorakv/formats/gguf_file.h"
#include "lorakv/formats/json.h"
#include "lorakv/formats/safetensors_file.h"
#include "lorakv/runtime/engine.h"
#include "lorakv/runtime/llama_model.h"
#include "tests/support/reference_values.h"
#include "tests/support/test_settings.h"

namespace lorakv::adapters {
namespace {

using lorakv::testing::json_ints;
using lorakv::testing::relative_error;
using runtime::LlamaModel;
using runtime::SharedWriter;
using runtime::SharingMode;

constexpr double kRelativeTolerance = lorakv::testing::kFloat32LogitsTolerance;

struct SharedBasePrompt {
  std::string key;      // "<set>.<index>", also the logits tensor's name
  std::string adapter;  // registry name: the set's planner
  std::vector<int32_t> context, header;
};

class SharedBaseParity : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string model_path = lorakv::testing::test_setting("LORAKV_MODEL");
    if (model_path.empty()) return;
    file_ = formats::GgufFile::open(model_path).release();
    model_ = LlamaModel::from_gguf(*file_, at::kFloat,
                                   runtime::parse_weight_form(lorakv::testing::test_setting("LORAKV_TEST_WEIGHTS")))
                 .release();
    const std::string dir = lorakv::testing::test_setting("LORAKV_ORACLE_DIR") + "/shared_base";
    reference_ = formats::SafetensorsFile::open(dir + "/shared_base_reference.safetensors").release();
    const formats::JsonValue meta = formats::parse_json(reference_->metadata().at("oracle"));
    registry_ = new AdapterRegistry(model_->adapter_shape(), model_->dtype());
    for (const formats::JsonValue& e : meta.at("entries").as_array()) {
      SharedBasePrompt p{e.at("key").as_string(), e.at("set").as_string() + ".planner", json_ints(e.at("context")),
                         json_ints(e.at("header"))};
      if (!registry_->acquire(p.adapter)) registry_->load(p.adapter, e.at("adapter").as_string());
      prompts_.push_back(std::move(p));
    }
  }
  static void TearDownTestSuite() {
    prompts_.clear();
    delete registry_;
    delete reference_;
    delete model_;
    delete file_;
  }
  void SetUp() override {
    ASSERT_NE(model_, nullptr) << "LORAKV_MODEL not set: run through ctest";
    ASSERT_EQ(prompts_.size(), 8u);  // two sets x two trajectories x (first, last planner turn)
  }

  // The planner's logits after its header (float32 [vocab]): the context appended and
  // processed in 7-token chunks (blocks of 16 rows, so chunks cross them), then the header
  // as the planner's private work, in `mode`.
  static at::Tensor first_step_logits(const SharedBasePrompt& p, runtime::ContextOptions mode) {
    runtime::EngineOptions eo;
    eo.base_rows = static_cast<int64_t>(p.context.size() + p.header.size()) + 64;
    eo.prefill_chunk = 7;
    runtime::Engine engine(*model_, eo);
    const runtime::ContextId ctx = engine.create_context(mode, {registry_->require(p.adapter)});
    engine.append(ctx, p.context);
    while (engine.pending_tokens({ctx, 0}) > 0) engine.step({runtime::StepWork{{ctx, 0}}});
    runtime::StepWork header;
    header.reader = {ctx, 0};
    header.kind = runtime::StepWork::Kind::kPrivate;
    header.tokens = p.header;
    return engine.step({header}).outputs.at(0).logits[0];
  }

  static formats::GgufFile* file_;
  static LlamaModel* model_;
  static formats::SafetensorsFile* reference_;
  static AdapterRegistry* registry_;
  static std::vector<SharedBasePrompt> prompts_;
};

formats::GgufFile* SharedBaseParity::file_ = nullptr;
LlamaModel* SharedBaseParity::model_ = nullptr;
formats::SafetensorsFile* SharedBaseParity::reference_ = nullptr;
AdapterRegistry* SharedBaseParity::registry_ = nullptr;
std::vector<SharedBasePrompt> SharedBaseParity::prompts_;

TEST_F(SharedBaseParity, PlannerFirstStepMatchesPeftWithTheContextUnderDisableAdapter) {
  for (const SharedBasePrompt& p : prompts_) {
    const at::Tensor ref = lorakv::testing::float_tensor(*reference_, p.key);  // float32 [vocab]
    const at::Tensor ours = first_step_logits(p, {SharingMode::kFullShared, SharedWriter::kBase});
    ASSERT_EQ(ours.sizes(), ref.sizes()) << p.key;
    const double err = relative_error(ours, ref);
    std::printf("  %-14s %3zu context tokens: max |ours - peft| / max |peft| = %.3g\n", p.key.c_str(), p.context.size(), err);
    EXPECT_LT(err, kRelativeTolerance) << p.key;
  }
}

// `full` runs the context with the adapter: the comparison must tell it apart (one short
// prompt per set keeps the test to a few seconds).
TEST_F(SharedBaseParity, FullModeIsFarFromPeftsSharedBaseLogits) {
  for (const SharedBasePrompt& p : prompts_) {
    if (p.key.substr(p.key.rfind('.')) != ".0") continue;
    const at::Tensor ref = lorakv::testing::float_tensor(*reference_, p.key);  // float32 [vocab]
    const double full_err = relative_error(first_step_logits(p, {SharingMode::kFull, SharedWriter::kFirst}), ref);
    std::printf("  %-14s full: max |full - peft| / max |peft| = %.3g\n", p.key.c_str(), full_err);
    EXPECT_GT(full_err, 100 * kRelativeTolerance) << p.key << ": the adapter barely changes the context's rows";
  }
}

}  // namespace
}  // namespace lorakv::adapters
