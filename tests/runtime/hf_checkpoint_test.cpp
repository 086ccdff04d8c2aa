// tests/runtime/hf_checkpoint_test.cpp: Hugging Face checkpoint directories against
// transformers (tools/hf_checkpoints_oracle.py, a CTest fixture): tiny random-weight Llama
// (llama3 RoPE scaling), Mistral (sliding window), Qwen2 (biases, sharded), SmolLM; the
// real SmolLM2 saved as an HF directory equals the GGUF path; tokenizer.json parity with
// HF `tokenizers`; bad configs are typed errors.
//
// Tolerance: float32 as in hf_parity_test.cpp (kFloat32LogitsTolerance of the largest logit,
// derived in tests/support/reference_values.h). bfloat16: both
// sides round every activation to 8 significant bits (eps 2^-8 = 3.9e-3) but in different
// orders; through 2 layers that is a few eps of the largest logit, so we allow 2e-2.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <fstream>

#include "lorakv/common/errors.h"
#include "lorakv/formats/bpe_tokenizer.h"
#include "lorakv/formats/gguf_file.h"
#include "lorakv/formats/json.h"
#include "lorakv/formats/safetensors_file.h"
#include "lorakv/formats/tokenizer_json.h"
#include "lorakv/runtime/hf_checkpoint.h"
#include "lorakv/runtime/llama_model.h"
#include "lorakv/runtime/loaded_model.h"
#include "tests/support/gguf_builder.h"
#include "tests/support/reference_values.h"
#include "tests/support/test_settings.h"

namespace lorakv::runtime {
namespace {

namespace fs = std::filesystem;
using lorakv::testing::test_setting;

std::string oracle(const std::string& rel) { return test_setting("LORAKV_ORACLE_DIR") + "/hf/" + rel; }

at::Tensor read_f32(const formats::SafetensorsFile& f, const std::string& name) {
  const auto& info = f.tensor(name);
  at::Tensor out = at::empty(info.shape, at::kFloat);
  formats::convert_to_f32(info, out.data_ptr<float>());
  return out;
}

std::vector<int32_t> read_ids(const formats::SafetensorsFile& f) {
  const auto& info = f.tensor("ids");
  std::vector<int32_t> ids(static_cast<size_t>(info.num_elements));
  for (size_t i = 0; i < ids.size(); ++i) {
    int64_t v;
    std::memcpy(&v, info.data + 8 * i, 8);
    ids[i] = static_cast<int32_t>(v);
  }
  return ids;
}

using lorakv::testing::relative_error;

at::Tensor run_all_logits(const LlamaModel& model, const std::vector<int32_t>& ids) {
  auto cache = model.make_cache();
  return model.forward({{SeqId(0), ids}}, *cache, {/*all_logits=*/true});
}

class TinyHfModel : public ::testing::TestWithParam<std::string> {};

TEST_P(TinyHfModel, LogitsMatchTransformers) {
  const std::string dir = oracle("tiny/" + GetParam());
  ASSERT_TRUE(is_hf_checkpoint(dir)) << dir << " missing: run through ctest (fixture oracle.hf_checkpoints)";
  auto ref = formats::SafetensorsFile::open(dir + ".reference.safetensors");
  const std::vector<int32_t> ids = read_ids(*ref);
  LoadedModel loaded = load_model(dir, at::kFloat);
  EXPECT_EQ(loaded.tokenizer, nullptr);  // random-weight fixtures carry no tokenizer
  const double err = relative_error(run_all_logits(*loaded.model, ids), read_f32(*ref, "logits"));
  std::printf("  %s: %zu tokens, relative error %.3g\n", GetParam().c_str(), ids.size(), err);
  EXPECT_LT(err, lorakv::testing::kFloat32LogitsTolerance);

  if (ref->find_tensor("logits_bf16") != nullptr) {
    LoadedModel bf16 = load_model(dir, at::kBFloat16);
    const double err16 = relative_error(run_all_logits(*bf16.model, ids), read_f32(*ref, "logits_bf16"));
    std::printf("  %s bfloat16: relative error %.3g\n", GetParam().c_str(), err16);
    EXPECT_LT(err16, 2e-2);
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, TinyHfModel, ::testing::Values("llama", "mistral", "qwen2", "smollm"));

// Negative controls: without the feature under test, the same comparison fails clearly,
// so the parity above really exercises llama3 scaling, the sliding window and biases.
TEST(HfCheckpoint, EachArchitectureFeatureMatters) {
  auto error_without = [](const std::string& name, const std::function<void(ModelConfig&)>& drop) {
    const std::string dir = oracle("tiny/" + name);
    auto ref = formats::SafetensorsFile::open(dir + ".reference.safetensors");
    ModelConfig config = read_hf_config(dir);
    ModelWeights weights = load_hf_weights(dir, config, at::kFloat);
    drop(config);
    if (!config.attention_bias) {
      for (auto& l : weights.layers) l.qkv.bias = at::Tensor();
    }
    LlamaModel model(config, std::move(weights));
    return relative_error(run_all_logits(model, read_ids(*ref)), read_f32(*ref, "logits"));
  };
  EXPECT_GT(error_without("llama", [](ModelConfig& c) { c.rope_scaling = RopeScaling{}; }), 1e-2);
  EXPECT_GT(error_without("mistral", [](ModelConfig& c) { c.sliding_window = 0; }), 1e-2);
  EXPECT_GT(error_without("qwen2", [](ModelConfig& c) { c.attention_bias = false; }), 1e-2);
}

TEST(HfCheckpoint, ConfigFeaturesAreRead) {
  ModelConfig llama = read_hf_config(oracle("tiny/llama"));
  EXPECT_EQ(llama.rope_scaling.type, "llama3");
  EXPECT_EQ(llama.rope_scaling.original_max_position, 16);
  EXPECT_FALSE(llama.tied_embeddings);
  ModelConfig mistral = read_hf_config(oracle("tiny/mistral"));
  EXPECT_EQ(mistral.sliding_window, 8);
  ModelConfig qwen = read_hf_config(oracle("tiny/qwen2"));
  EXPECT_TRUE(qwen.attention_bias);
  EXPECT_TRUE(qwen.tied_embeddings);
}

TEST(HfCheckpoint, RealSmolLM2DirectoryEqualsTheGgufPath) {
  const std::vector<int32_t> ids = {1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018,
                                    411, 407, 19712, 8182, 2, 198, 1, 4093, 198, 504, 3575, 282, 4649, 314};
  LoadedModel hf = load_model(oracle("smollm2"), at::kFloat);
  auto gguf_file = formats::GgufFile::open(test_setting("LORAKV_MODEL"));
  auto gguf = LlamaModel::from_gguf(*gguf_file, at::kFloat, WeightForm::kFloat32);
  const double err = relative_error(run_all_logits(*hf.model, ids), run_all_logits(*gguf, ids));
  std::printf("  SmolLM2 HF directory vs GGUF: relative error %.3g\n", err);
  EXPECT_LT(err, lorakv::testing::kFloat32LogitsTolerance);
  ASSERT_NE(hf.tokenizer, nullptr);
  EXPECT_EQ(hf.tokenizer->eos_id(), 2);
  EXPECT_NE(hf.tokenizer->chat_template().find("<|im_start|>"), std::string::npos);
}

TEST(HfCheckpoint, TokenizerJsonMatchesHfTokenizers) {
  const formats::JsonValue cases = formats::parse_json_file(oracle("tokenizer_cases.json"));
  formats::BpeTokenizer smollm(formats::vocab_from_tokenizer_json(oracle("smollm2/tokenizer.json")));
  formats::BpeTokenizer bytelevel(formats::vocab_from_tokenizer_json(oracle("tokenizer_bytelevel.json")));
  EXPECT_EQ(smollm.pre(), "smollm");
  EXPECT_EQ(bytelevel.pre(), "gpt2");
  size_t checked = 0;
  for (const formats::JsonValue& c : cases.as_array()) {
    const std::string& text = c.at("text").as_string();
    for (auto [tok, key] : {std::pair<formats::BpeTokenizer*, const char*>{&smollm, "smollm"}, {&bytelevel, "bytelevel"}}) {
      std::vector<int32_t> expected;
      for (const auto& id : c.at(key).as_array()) expected.push_back(static_cast<int32_t>(id.as_int()));
      EXPECT_EQ(tok->encode(text), expected) << key << ": " << text;
      ++checked;
    }
  }
  EXPECT_GE(checked, 20u);
}

// A directory with only a config.json, written by the test.
std::string write_config(const std::string& name, const std::string& json) {
  const fs::path dir = fs::path(lorakv::testing::temp_path(name));
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << json;
  return dir.string();
}

void expect_config_error(const std::string& dir, const std::vector<std::string>& needles) {
  try {
    read_hf_config(dir);
    FAIL() << "expected an error for " << dir;
  } catch (const Error& e) {
    for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

TEST(HfCheckpoint, BadConfigsAreTypedErrors) {
  const std::string base = R"("hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "vocab_size": 128)";
  expect_config_error(write_config("gemma", R"({"model_type": "gemma3", )" + base + "}"), {"model_type", "gemma3", "llama"});
  expect_config_error(write_config("rope", R"({"model_type": "llama", "rope_scaling": {"rope_type": "yarn", "factor": 4.0}, )" + base + "}"),
                      {"yarn", "llama3"});
  expect_config_error(write_config("act", R"({"model_type": "llama", "hidden_act": "gelu", )" + base + "}"), {"hidden_act", "gelu"});
  expect_config_error(write_config("heads", R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 96,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 3, "vocab_size": 128})"), {"num_key_value_heads"});
  expect_config_error(write_config("missing", R"({"model_type": "llama", "hidden_size": 64})"), {"num_hidden_layers"});
  expect_config_error(write_config("syntax", R"({"model_type": "llama",, })"), {"config.json", "line 1"});
  const std::string no_weights = write_config("noweights", R"({"model_type": "llama", )" + base + "}");
  EXPECT_THROW(load_model(no_weights), ModelLoadError);
}

}  // namespace
}  // namespace lorakv::runtime
