// tests/runtime/model_load_errors_test.cpp: a tiny hand-made Llama GGUF loads and runs,
// and each way of getting it wrong is a ModelLoadError that names the file, the key or
// tensor, and what was expected and found.
#include <gtest/gtest.h>

#include <string>

#include "lorakv/common/errors.h"
#include "lorakv/formats/gguf_file.h"
#include "lorakv/runtime/llama_model.h"
#include "tests/support/gguf_builder.h"

namespace lorakv::runtime {
namespace {

using lorakv::testing::GgufBuilder;
using lorakv::testing::temp_path;

// hidden 8, 2 heads of 4, 1 KV head, intermediate 16, vocab 10, 2 layers.
GgufBuilder tiny_llama(const std::string& arch = "llama", uint32_t num_kv_heads = 1) {
  GgufBuilder b;
  b.add_string("general.architecture", arch);
  b.add_u32(arch + ".block_count", 2);
  b.add_u32(arch + ".embedding_length", 8);
  b.add_u32(arch + ".feed_forward_length", 16);
  b.add_u32(arch + ".attention.head_count", 2);
  b.add_u32(arch + ".attention.head_count_kv", num_kv_heads);
  b.add_u32(arch + ".context_length", 64);
  b.add_f32(arch + ".rope.freq_base", 10000.0f);
  b.add_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  auto values = [](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = 0.01f * static_cast<float>((i * 7) % 13 - 6);
    return v;
  };
  b.add_f32_tensor("token_embd.weight", {8, 10}, values(80));
  b.add_f32_tensor("output_norm.weight", {8}, std::vector<float>(8, 1.0f));
  for (int l = 0; l < 2; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    b.add_f32_tensor(p + "attn_norm.weight", {8}, std::vector<float>(8, 1.0f));
    b.add_f32_tensor(p + "attn_q.weight", {8, 8}, values(64));
    b.add_f32_tensor(p + "attn_k.weight", {8, 4}, values(32));
    b.add_f32_tensor(p + "attn_v.weight", {8, 4}, values(32));
    b.add_f32_tensor(p + "attn_output.weight", {8, 8}, values(64));
    b.add_f32_tensor(p + "ffn_norm.weight", {8}, std::vector<float>(8, 1.0f));
    b.add_f32_tensor(p + "ffn_gate.weight", {8, 16}, values(128));
    b.add_f32_tensor(p + "ffn_up.weight", {8, 16}, values(128));
    b.add_f32_tensor(p + "ffn_down.weight", {16, 8}, values(128));
  }
  return b;
}

void expect_model_error(const GgufBuilder& b, const std::string& name, const std::vector<std::string>& needles) {
  const std::string path = temp_path(name);
  b.write(path);
  try {
    auto file = formats::GgufFile::open(path);
    LlamaModel::from_gguf(*file);
    FAIL() << "expected a ModelLoadError for " << name;
  } catch (const ModelLoadError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    for (const auto& n : needles) EXPECT_NE(what.find(n), std::string::npos) << "'" << n << "' not in: " << what;
  }
}

TEST(ModelLoad, TinyModelLoadsAndRuns) {
  const std::string path = temp_path("tiny.gguf");
  tiny_llama().write(path);
  auto file = formats::GgufFile::open(path);
  auto model = LlamaModel::from_gguf(*file);
  EXPECT_EQ(model->config().head_dim, 4);
  EXPECT_EQ(model->config().vocab_size, 10);
  EXPECT_TRUE(model->config().tied_embeddings);
  auto cache = model->make_cache();
  at::Tensor logits = model->forward({{SeqId(0), {1, 2, 3}}}, *cache);
  EXPECT_EQ(logits.sizes(), (at::IntArrayRef{1, 10}));
  EXPECT_TRUE(at::isfinite(logits).all().item<bool>());
  EXPECT_EQ(cache->length(SeqId(0)), 3);
}

TEST(ModelLoad, BadTokenIdIsAConfigError) {
  const std::string path = temp_path("tiny2.gguf");
  tiny_llama().write(path);
  auto file = formats::GgufFile::open(path);
  auto model = LlamaModel::from_gguf(*file);
  auto cache = model->make_cache();
  EXPECT_THROW(model->forward({{SeqId(0), {1, 10}}}, *cache), ConfigError);
  EXPECT_THROW(model->forward({{SeqId(0), {}}}, *cache), ConfigError);
}

TEST(ModelLoad, UnsupportedArchitectureListsSupportedOnes) {
  expect_model_error(tiny_llama("gemma3"), "arch.gguf", {"unsupported architecture", "gemma3", "llama"});
}

TEST(ModelLoad, MissingTensorIsNamed) {
  GgufBuilder b = tiny_llama();
  b.tensors.erase(b.tensors.begin() + 4);  // blk.0.attn_k.weight
  expect_model_error(b, "missing.gguf", {"required tensor is missing", "blk.0.attn_k.weight"});
}

TEST(ModelLoad, ShapeThatDisagreesWithMetadata) {
  GgufBuilder b = tiny_llama();
  b.tensors[5].dims = {8, 2};  // blk.0.attn_v.weight should be {8, 4}
  b.tensors[5].data.resize(8 * 2 * 4);
  expect_model_error(b, "shape.gguf", {"shape disagrees", "blk.0.attn_v.weight", "[4, 8]", "[2, 8]"});
}

TEST(ModelLoad, MissingHyperparameterIsNamed) {
  GgufBuilder b;
  b.add_string("general.architecture", "llama");
  b.add_u32("llama.block_count", 2);
  expect_model_error(b, "nokeys.gguf", {"required metadata key is missing", "llama.embedding_length"});
}

TEST(ModelLoad, DuplicateMetadataKeyIsRejected) {
  GgufBuilder b = tiny_llama();
  b.add_u32("llama.attention.head_count", 3);  // a second value for the same key
  expect_model_error(b, "dupkey.gguf", {"duplicate metadata key"});
}

TEST(ModelLoad, HeadCountNotAMultipleOfKvHeads) {
  expect_model_error(tiny_llama("llama", 3), "kvheads.gguf",
                     {"not a multiple of the KV head count", "llama.attention.head_count_kv"});
}

}  // namespace
}  // namespace lorakv::runtime
