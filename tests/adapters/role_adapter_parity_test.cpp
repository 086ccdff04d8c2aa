// tests/adapters/role_adapter_parity_test.cpp: the committed role adapters
// (assets/role_adapters, float16 PEFT files trained by tools/agentic_qa) served by lorakv
// against PEFT on held-out agentic QA trajectories (tools/role_adapter_oracle.py, the
// role_oracle fixture). Per adapter and trajectory: logits over the role's last turn
// within the float32 parity tolerance (kFloat32LogitsTolerance of the largest logit,
// derived in tests/support/reference_values.h; both sides upcast the same float16 weights), the greedy turn from the gold prefix
// token for token, and lorakv's tokenizer reproducing the trajectory's ids from its text
// (the serving layout of tools/agentic_qa/README.md). Also: the shared-A set is recognised
// from the files (v_proj A hashes equal across its three adapters).
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "lorakv/adapters/adapter_registry.h"
#include "lorakv/formats/bpe_tokenizer.h"
#include "lorakv/formats/gguf_file.h"
#include "lorakv/formats/json.h"
#include "lorakv/formats/safetensors_file.h"
#include "lorakv/formats/tokenizer_gguf.h"
#include "lorakv/runtime/engine.h"
#include "lorakv/runtime/llama_model.h"
#include "tests/support/reference_values.h"
#include "tests/support/test_settings.h"

namespace lorakv::adapters {
namespace {

using lorakv::testing::json_doubles;
using lorakv::testing::json_ints;
using lorakv::testing::relative_error;
using runtime::LlamaModel;
using runtime::parse_weight_form;

constexpr double kRelativeTolerance = lorakv::testing::kFloat32LogitsTolerance;
// An adapter must move the logits by at least 1% of the largest logit, or the parity above
// would not show that lorakv applies it.
constexpr double kMinimumAdapterEffect = 1e-2;

struct RoleReference {
  std::string key;      // "<set>.<role>.<trajectory index>", also the logits tensor's name
  std::string adapter;  // registry name "<set>.<role>"
  std::string trajectory;
  std::vector<int32_t> ids;  // the trajectory cut after the role's last turn
  int64_t turn_start = 0, turn_length = 0;
  std::vector<int32_t> greedy_ids;
  std::vector<double> greedy_margins;
};

class RoleAdapterParity : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string model_path = lorakv::testing::test_setting("LORAKV_MODEL");
    if (model_path.empty()) return;
    file_ = formats::GgufFile::open(model_path).release();
    model_ = LlamaModel::from_gguf(*file_, at::kFloat,
                                     parse_weight_form(lorakv::testing::test_setting("LORAKV_TEST_WEIGHTS"))).release();
    tokenizer_ = new formats::BpeTokenizer(formats::tokenizer_from_gguf(*file_));
    const std::string dir = lorakv::testing::test_setting("LORAKV_ORACLE_DIR") + "/roles";
    reference_ = formats::SafetensorsFile::open(dir + "/role_reference.safetensors").release();
    meta_ = new formats::JsonValue(formats::parse_json(reference_->metadata().at("oracle")));
    registry_ = new AdapterRegistry(model_->adapter_shape(), model_->dtype());
    for (const formats::JsonValue& e : meta_->at("entries").as_array()) {
      RoleReference r;
      r.key = e.at("key").as_string();
      r.adapter = e.at("set").as_string() + "." + e.at("role").as_string();
      r.trajectory = e.at("trajectory").as_string();
      r.ids = json_ints(e.at("ids"));
      r.turn_start = e.at("turn_start").as_int();
      r.turn_length = e.at("turn_length").as_int();
      r.greedy_ids = json_ints(e.at("greedy_ids"));
      r.greedy_margins = json_doubles(e.at("greedy_margins"));
      if (!registry_->acquire(r.adapter)) registry_->load(r.adapter, e.at("adapter").as_string());
      refs_.push_back(std::move(r));
    }
  }
  static void TearDownTestSuite() {
    refs_.clear();
    delete registry_;
    delete meta_;
    delete reference_;
    delete tokenizer_;
    delete model_;
    delete file_;
  }
  void SetUp() override {
    ASSERT_NE(model_, nullptr) << "LORAKV_MODEL not set: run through ctest";
    // Two trajectories (a right and a wrong Finish) x two sets x three roles.
    ASSERT_EQ(refs_.size(), 12u);
  }

  static formats::GgufFile* file_;
  static LlamaModel* model_;
  static formats::BpeTokenizer* tokenizer_;
  static formats::SafetensorsFile* reference_;
  static formats::JsonValue* meta_;
  static AdapterRegistry* registry_;
  static std::vector<RoleReference> refs_;
};

formats::GgufFile* RoleAdapterParity::file_ = nullptr;
LlamaModel* RoleAdapterParity::model_ = nullptr;
formats::BpeTokenizer* RoleAdapterParity::tokenizer_ = nullptr;
formats::SafetensorsFile* RoleAdapterParity::reference_ = nullptr;
formats::JsonValue* RoleAdapterParity::meta_ = nullptr;
AdapterRegistry* RoleAdapterParity::registry_ = nullptr;
std::vector<RoleReference> RoleAdapterParity::refs_;

TEST_F(RoleAdapterParity, TokenizerReproducesTheTrajectoryLayout) {
  for (const RoleReference& r : refs_) {
    const std::string& text = meta_->at("texts").at(r.trajectory).as_string();
    const std::vector<int32_t> ours = tokenizer_->encode(text);
    ASSERT_GE(ours.size(), r.ids.size()) << r.key;
    EXPECT_TRUE(std::equal(r.ids.begin(), r.ids.end(), ours.begin())) << r.key << ": turn-by-turn ids differ";
  }
}

TEST_F(RoleAdapterParity, EachRoleAdapterMatchesPeftOverItsTurn) {
  for (const RoleReference& r : refs_) {
    const auto adapter = registry_->require(r.adapter);
    const at::Tensor ref = lorakv::testing::float_tensor(*reference_, r.key);  // float32 [turn_length, vocab]
    auto cache = model_->make_cache();
    const at::Tensor all = model_->forward({{SeqId(0), r.ids, adapter.get()}}, *cache, {/*all_logits=*/true});
    const at::Tensor ours = all.narrow(0, r.turn_start - 1, r.turn_length);
    ASSERT_EQ(ours.sizes(), ref.sizes()) << r.key;
    auto base_cache = model_->make_cache();
    const at::Tensor base = model_->forward({{SeqId(0), r.ids, nullptr}}, *base_cache, {/*all_logits=*/true})
                                .narrow(0, r.turn_start - 1, r.turn_length);
    const double err = relative_error(ours, ref), effect = relative_error(base, ref);
    std::printf("  %-14s %s: max |ours - peft| / max |peft| = %.3g (the adapter moves the turn's logits by %.3g)\n",
                r.key.c_str(), r.trajectory.c_str(), err, effect);
    EXPECT_LT(err, kRelativeTolerance) << r.key;
    EXPECT_GT(effect, kMinimumAdapterEffect) << r.key << ": the adapter barely changes the logits";
  }
}

// The same parity through the engine on the shared, paged cache: mode full, the trajectory
// as the context, processed in 7-token chunks (blocks of 16 rows, so chunks cross them).
TEST_F(RoleAdapterParity, EachRoleAdapterMatchesPeftThroughTheEngine) {
  for (const RoleReference& r : refs_) {
    const auto adapter = registry_->require(r.adapter);
    const at::Tensor ref = lorakv::testing::float_tensor(*reference_, r.key);  // float32 [turn_length, vocab]
    runtime::EngineOptions eo;
    eo.base_rows = static_cast<int64_t>(r.ids.size()) + 64;
    eo.prefill_chunk = 7;
    runtime::Engine engine(*model_, eo);
    const runtime::ContextId ctx =
        engine.create_context({runtime::SharingMode::kFull, runtime::SharedWriter::kFirst}, {adapter});
    engine.append(ctx, r.ids);
    std::vector<at::Tensor> chunks;
    while (engine.pending_tokens({ctx, 0}) > 0) {
      runtime::StepWork w;
      w.reader = {ctx, 0};
      w.all_logits = true;
      chunks.push_back(engine.step({w}).outputs.at(0).logits);
    }
    const at::Tensor ours = at::cat(chunks, 0).narrow(0, r.turn_start - 1, r.turn_length);
    ASSERT_EQ(ours.sizes(), ref.sizes()) << r.key;
    const double err = relative_error(ours, ref);
    std::printf("  %-14s through the engine: max |ours - peft| / max |peft| = %.3g\n", r.key.c_str(), err);
    EXPECT_LT(err, kRelativeTolerance) << r.key;
  }
}

// The role's turn decoded greedily from the gold prefix, step by step against PEFT (a
// differing argmax is accepted only where PEFT's own top-2 margin is a near tie).
TEST_F(RoleAdapterParity, GreedyTurnMatchesPeft) {
  for (const RoleReference& r : refs_) {
    const auto adapter = registry_->require(r.adapter);
    auto cache = model_->make_cache();
    std::vector<int32_t> prefix(r.ids.begin(), r.ids.begin() + r.turn_start);
    at::Tensor logits = model_->forward({{SeqId(0), prefix, adapter.get()}}, *cache);  // [1, vocab]
    for (size_t step = 0; step < r.greedy_ids.size(); ++step) {
      const int32_t ours = static_cast<int32_t>(logits[0].argmax().item<int64_t>());
      if (ours != r.greedy_ids[step]) {
        const double tolerance = kRelativeTolerance * logits[0].abs().max().item<double>();
        ASSERT_LT(r.greedy_margins[step], tolerance)
            << r.key << " step " << step << ": ours " << ours << ", PEFT " << r.greedy_ids[step];
        std::printf("  near tie accepted: %s step %zu\n", r.key.c_str(), step);
      }
      if (step + 1 < r.greedy_ids.size()) {
        logits = model_->forward({{SeqId(0), {r.greedy_ids[step]}, adapter.get()}}, *cache);
      }
    }
    std::printf("  %-14s %s: %s\n", r.key.c_str(), r.trajectory.c_str(), tokenizer_->decode(r.greedy_ids).c_str());
  }
}

// The shared-A set's three adapters carry bit-identical v_proj A in their files, so lorakv
// puts them in one A group; q_proj A is trained per adapter. The all-linear set shares none.
TEST_F(RoleAdapterParity, SharedASetIsRecognisedFromTheFiles) {
  const auto planner = registry_->require("qv_shared_a.planner");
  const int64_t layers = model_->adapter_shape().num_layers;
  for (const char* role : {"qv_shared_a.actor", "qv_shared_a.reflector"}) {
    const auto other = registry_->require(role);
    for (int64_t layer = 0; layer < layers; ++layer) {
      ASSERT_NE(other->find(layer, ModuleId::kV), nullptr) << role << " layer " << layer;
      EXPECT_EQ(other->find(layer, ModuleId::kV)->a_hash, planner->find(layer, ModuleId::kV)->a_hash) << role << layer;
      EXPECT_NE(other->find(layer, ModuleId::kQ)->a_hash, planner->find(layer, ModuleId::kQ)->a_hash) << role << layer;
    }
  }
  const auto wide_planner = registry_->require("all_linear.planner");
  EXPECT_EQ(wide_planner->target_names().size(), 7u);
  // The registry's groups: exactly one per layer, v_proj, holding the three shared-A adapters.
  const std::vector<std::string> trio = {"qv_shared_a.actor", "qv_shared_a.planner", "qv_shared_a.reflector"};
  int64_t groups = 0;
  for (const SharedAGroup& g : registry_->shared_a_groups()) {
    EXPECT_EQ(g.module, ModuleId::kV) << "layer " << g.layer;
    EXPECT_EQ(g.adapters, trio) << "layer " << g.layer;
    ++groups;
  }
  EXPECT_EQ(groups, layers);
}

}  // namespace
}  // namespace lorakv::adapters
