// tests/runtime/tiny_engine_model.h: a hand-made Llama small enough for hundreds of engine
// steps per second, with the smallest head size the engine's fused attention takes (32), and
// in-memory LoRA adapters for it: what randomized engine tests run on.
//   hidden 64, 2 heads of 32, 1 KV head, intermediate 96, vocab 48, 2 layers, context 4096.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "lorakv/adapters/adapter.h"
#include "lorakv/formats/gguf_file.h"
#include "lorakv/runtime/llama_model.h"
#include "tests/support/gguf_builder.h"

namespace lorakv::testing {

struct TinyEngineModel {
  std::unique_ptr<formats::GgufFile> file;
  std::unique_ptr<runtime::LlamaModel> model;
};

// `context_length`: the model's maximum context (endless-streaming tests use a small one).
inline TinyEngineModel make_tiny_engine_model(int64_t context_length = 4096) {
  constexpr int64_t kHidden = 64, kFfn = 96, kVocab = 48, kHeadDim = 32;
  GgufBuilder b;
  b.add_string("general.architecture", "llama");
  b.add_u32("llama.block_count", 2);
  b.add_u32("llama.embedding_length", kHidden);
  b.add_u32("llama.feed_forward_length", kFfn);
  b.add_u32("llama.attention.head_count", 2);
  b.add_u32("llama.attention.head_count_kv", 1);
  b.add_u32("llama.context_length", static_cast<uint32_t>(context_length));
  b.add_f32("llama.rope.freq_base", 10000.0f);
  b.add_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  std::mt19937 rng(1234);
  auto values = [&](int64_t n, float scale) {
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = u(rng);
    return v;
  };
  b.add_f32_tensor("token_embd.weight", {kHidden, kVocab}, values(kHidden * kVocab, 1.0f));
  b.add_f32_tensor("output_norm.weight", {kHidden}, std::vector<float>(kHidden, 1.0f));
  for (int l = 0; l < 2; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    b.add_f32_tensor(p + "attn_norm.weight", {kHidden}, std::vector<float>(kHidden, 1.0f));
    b.add_f32_tensor(p + "attn_q.weight", {kHidden, kHidden}, values(kHidden * kHidden, 0.2f));
    b.add_f32_tensor(p + "attn_k.weight", {kHidden, kHeadDim}, values(kHidden * kHeadDim, 0.2f));
    b.add_f32_tensor(p + "attn_v.weight", {kHidden, kHeadDim}, values(kHidden * kHeadDim, 0.2f));
    b.add_f32_tensor(p + "attn_output.weight", {kHidden, kHidden}, values(kHidden * kHidden, 0.2f));
    b.add_f32_tensor(p + "ffn_norm.weight", {kHidden}, std::vector<float>(kHidden, 1.0f));
    b.add_f32_tensor(p + "ffn_gate.weight", {kHidden, kFfn}, values(kHidden * kFfn, 0.2f));
    b.add_f32_tensor(p + "ffn_up.weight", {kHidden, kFfn}, values(kHidden * kFfn, 0.2f));
    b.add_f32_tensor(p + "ffn_down.weight", {kFfn, kHidden}, values(kFfn * kHidden, 0.2f));
  }
  const std::string path = temp_path("tiny_engine_model_ctx" + std::to_string(context_length) + ".gguf");
  b.write(path);
  TinyEngineModel m;
  m.file = formats::GgufFile::open(path);
  m.model = runtime::LlamaModel::from_gguf(*m.file, at::kFloat, runtime::WeightForm::kFloat32);
  return m;
}

// float32 tensor of `sizes` with values uniform in [-scale, scale] from `seed`.
inline at::Tensor seeded_uniform(std::vector<int64_t> sizes, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  at::Tensor t = at::empty(sizes, at::kFloat);
  float* p = t.data_ptr<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(rng);
  return t;
}

// A rank-`rank` adapter on q_proj and v_proj (or `adapted`) of every layer. `a_seed` draws
// the A factors and `b_seed` the B factors: adapters with one a_seed share their A (a
// base_lr_shared group).
inline std::shared_ptr<const adapters::Adapter> make_tiny_adapter(
    const runtime::LlamaModel& model, const std::string& name, uint32_t a_seed, uint32_t b_seed, int64_t rank = 2,
    const std::vector<adapters::ModuleId>& adapted = {adapters::ModuleId::kQ, adapters::ModuleId::kV}) {
  const adapters::BaseModelShape shape = model.adapter_shape();
  std::vector<adapters::LoraModule> modules;
  for (int64_t layer = 0; layer < shape.num_layers; ++layer) {
    for (adapters::ModuleId m : adapted) {
      const auto salt = static_cast<uint32_t>(layer * 10 + static_cast<int64_t>(m));
      const at::Tensor a = seeded_uniform({rank, shape.in_dim(m)}, a_seed * 100 + salt, 0.5f);
      const at::Tensor bf = seeded_uniform({shape.out_dim(m), rank}, b_seed * 100 + salt, 0.5f);
      modules.push_back(adapters::make_lora_module(shape, layer, m, a, bf, static_cast<double>(rank), 1.0, at::kFloat,
                                                   name, adapters::module_path(layer, m)));
    }
  }
  return std::make_shared<const adapters::Adapter>(name, "memory", adapters::AdapterFormat::kPeft, shape,
                                                   std::move(modules));
}

}  // namespace lorakv::testing
