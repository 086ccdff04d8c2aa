// tests/runtime/engine_int8_test.cpp: the engine with an int8 base pool (kv_dtype) on the real
// SmolLM2 model: its logits over a ~300-token trajectory stay close to the float32 cache's
// (mean KL under 0.001 nats, and not zero: the rows really are int8), in `full` and in
// `base_shared` with float32 residual rows beside the int8 base; the pools hold 64 + 4 bytes
// per token, KV head and K or V (int8 and a float32 scale); int8 residual rows and unknown
// dtype names are refused.
//
// Tolerance: per-row int8 rounds each value by at most half a step, max |x| / 254 of its
// (Hadamard-rotated) row. llama.cpp's q8_0 K/V (one scale per 32 values) costs KL 0.00098
// against f16 on its models: the bound is that, 0.001. Measured here: 0.0002 (full) and 0.0003
// (base_shared); without the rotation 0.0013, which the bound refuses; a scale applied to the
// wrong row moves the logits by far more (tests/cache/int8_pool_test.cpp).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "lorakv/adapters/adapter_registry.h"
#include "lorakv/common/errors.h"
#include "lorakv/formats/bpe_tokenizer.h"
#include "lorakv/formats/gguf_file.h"
#include "lorakv/formats/tokenizer_gguf.h"
#include "lorakv/runtime/engine.h"
#include "lorakv/runtime/llama_model.h"
#include "tests/support/test_settings.h"

namespace lorakv::runtime {
namespace {

using AdapterPtr = std::shared_ptr<const adapters::Adapter>;

class EngineInt8 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = lorakv::testing::test_setting("LORAKV_MODEL");
    ASSERT_FALSE(path.empty()) << "LORAKV_MODEL is not set";
    file_ = formats::GgufFile::open(path).release();
    model_ = LlamaModel::from_gguf(*file_, at::kFloat, WeightForm::kNative).release();
    tokenizer_ = new formats::BpeTokenizer(formats::tokenizer_from_gguf(*file_));
    registry_ = new adapters::AdapterRegistry(model_->adapter_shape(), model_->dtype());
    const std::string dir = lorakv::testing::test_setting("LORAKV_SOURCE_DIR") + "/assets/role_adapters/qv_shared_a/";
    for (const char* role : {"planner", "actor"}) registry_->load(role, dir + role);
  }
  static void TearDownTestSuite() {
    delete registry_;
    delete tokenizer_;
    delete model_;
    delete file_;
  }

  static std::vector<int32_t> trajectory() {
    std::string text;
    for (int i = 0; i < 8; ++i) {
      text += "Question " + std::to_string(i) + ": which river flows through the city where the treaty of " +
              std::to_string(1700 + 13 * i) + " was signed, and how long is it? Thought: look up the treaty first. ";
    }
    return tokenizer_->encode(text);
  }

  // Every position's logits of reader 0 over the trajectory, float32 [n, vocab].
  static at::Tensor logits(std::optional<cache::StorageDtype> kv_dtype, SharingMode mode, const std::vector<AdapterPtr>& readers,
                           EngineMemory* memory = nullptr) {
    EngineOptions eo;
    eo.base_rows = eo.residual_rows = 1024;
    eo.kv_dtype = kv_dtype;
    Engine engine(*model_, eo);
    const ContextId ctx = engine.create_context({mode, SharedWriter::kFirst}, readers);
    const std::vector<int32_t> tokens = trajectory();
    engine.append(ctx, tokens);
    StepWork w;
    w.reader = {ctx, 0};
    w.max_tokens = static_cast<int64_t>(tokens.size());
    w.all_logits = true;
    const StepResult r = engine.step({w});
    EXPECT_TRUE(r.ok);
    if (memory) *memory = engine.memory();
    return r.outputs[0].logits;
  }

  // Mean over positions of KL(p_ref || p) in nats.
  static double mean_kl(const at::Tensor& ref, const at::Tensor& x) {
    const at::Tensor lp = ref.log_softmax(-1), lq = x.log_softmax(-1);
    return (lp.exp() * (lp - lq)).sum(-1).mean().item<double>();
  }

  static formats::GgufFile* file_;
  static LlamaModel* model_;
  static formats::BpeTokenizer* tokenizer_;
  static adapters::AdapterRegistry* registry_;
};

formats::GgufFile* EngineInt8::file_ = nullptr;
LlamaModel* EngineInt8::model_ = nullptr;
formats::BpeTokenizer* EngineInt8::tokenizer_ = nullptr;
adapters::AdapterRegistry* EngineInt8::registry_ = nullptr;

TEST_F(EngineInt8, LogitsStayCloseToTheFloat32Cache) {
  ASSERT_GT(trajectory().size(), 250u);
  const std::vector<AdapterPtr> roles = {registry_->require("planner"), registry_->require("actor")};
  for (SharingMode mode : {SharingMode::kFull, SharingMode::kBaseShared}) {
    SCOPED_TRACE(sharing_mode_name(mode));
    const at::Tensor f32 = logits(std::nullopt, mode, roles);
    const at::Tensor i8 = logits(cache::StorageDtype::kInt8, mode, roles);
    const double kl = mean_kl(f32, i8);
    std::cout << "[int8 KV, " << sharing_mode_name(mode) << "] mean KL against the float32 cache: " << kl << " nats\n";
    EXPECT_LT(kl, 0.001);
    EXPECT_GT(kl, 0.0) << "int8 rows should change the logits a little";
    EXPECT_EQ(f32.argmax(-1).ne(i8.argmax(-1)).sum().item<int64_t>() <= f32.size(0) / 20, true)
        << "greedy choices should agree at 95% of positions or more";
  }
}

TEST_F(EngineInt8, PoolsHoldInt8RowsAndAScalePerRowAndHead) {
  const ModelConfig& c = model_->config();
  EngineMemory mem;
  logits(cache::StorageDtype::kInt8, SharingMode::kBaseLrShared,
         {registry_->require("planner"), registry_->require("actor")}, &mem);
  const int64_t n = static_cast<int64_t>(trajectory().size()), bs = 16, blocks = (n + bs - 1) / bs;
  const int64_t rows = c.num_layers * blocks * bs;
  EXPECT_EQ(mem.cache.base_k_bytes, rows * c.num_kv_heads * (c.head_dim + 4));
  EXPECT_EQ(mem.cache.base_v_bytes, rows * c.num_kv_heads * (c.head_dim + 4));
  EXPECT_EQ(mem.cache.positions_bytes, rows * 4);
  // The shared-A group's C rows (rank 8) stay float32.
  EXPECT_EQ(mem.cache.residual_bytes_total, rows * 8 * 4);
  EngineOptions eo;
  eo.kv_dtype = cache::StorageDtype::kInt8;
  EXPECT_EQ(Engine::base_row_bytes(*model_, eo), c.num_layers * (2 * c.num_kv_heads * (c.head_dim + 4) + 4));
}

TEST_F(EngineInt8, Int8ResidualsAndUnknownNamesAreRefused) {
  EngineOptions eo;
  eo.residual_dtype = cache::StorageDtype::kInt8;
  EXPECT_THROW(Engine(*model_, eo), ConfigError);
  EXPECT_EQ(parse_kv_dtype("int8"), cache::StorageDtype::kInt8);
  EXPECT_EQ(parse_kv_dtype("bf16"), cache::StorageDtype::kBFloat16);
  try {
    parse_kv_dtype("int4", "--kv-dtype");
    ADD_FAILURE() << "int4 was accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.context().key, "--kv-dtype");
  }
}

}  // namespace
}  // namespace lorakv::runtime
