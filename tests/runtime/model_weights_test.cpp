// tests/runtime/model_weights_test.cpp: the Q/K un-permutation against llama.cpp's forward
// permutation (written here from convert_hf_to_gguf.py's LlamaModel.permute), and the
// architecture rule; GGUF blocks kept as QuantMatrix against formats' dequantiser, and the
// real model's native weights against its float32 load.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "lorakv/formats/ggml_types.h"
#include "lorakv/formats/gguf_file.h"
#include "lorakv/runtime/llama_model.h"
#include "lorakv/runtime/model_config.h"
#include "lorakv/runtime/model_weights.h"
#include "tests/support/test_settings.h"

namespace lorakv::runtime {
namespace {

// convert_hf_to_gguf.py: w.reshape(n_head, 2, hd/2, *rest).swapaxes(1, 2).reshape(w.shape)
at::Tensor llama_cpp_permute(const at::Tensor& w, int64_t n_head) {
  return w.reshape({n_head, 2, w.size(0) / n_head / 2, w.size(1)}).transpose(1, 2).reshape(w.sizes());
}

TEST(ModelWeights, UnpermuteInvertsLlamaCppPermute) {
  for (int64_t heads : {1, 3, 9}) {
    at::Tensor hf = at::randn({heads * 8, 5});
    at::Tensor gguf = llama_cpp_permute(hf, heads);
    EXPECT_TRUE(at::equal(unpermute_qk_rows(gguf, heads), hf)) << heads;
  }
}

TEST(ModelWeights, UnpermuteRowMapMatchesTheReference) {
  // The GGUF->HF row map for n_head = 3, hd = 8 is [0,4,1,5,2,6,3,7, 8,12,9,13,...]: GGUF
  // row 2j holds HF row j, GGUF row 2j+1 holds HF row j + hd/2 (reference doc, 3.6).
  at::Tensor hf_rows = at::arange(24, at::kFloat).unsqueeze(1);
  at::Tensor gguf = llama_cpp_permute(hf_rows, 3);
  const std::vector<float> expected = {0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13};
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(gguf[static_cast<int64_t>(i)][0].item<float>(), expected[i]);
}

TEST(ModelConfig, OnlyLlamaIsPermuted) {
  EXPECT_TRUE(gguf_permutes_qk("llama"));
  for (const char* arch : {"qwen2", "mistral3", "gemma3", "phi3"}) EXPECT_FALSE(gguf_permutes_qk(arch)) << arch;
}

// Random GGUF blocks of `type` for a [rows, cols] tensor (half scales of moderate size).
std::vector<uint8_t> random_blocks(formats::GgmlType type, int64_t rows, int64_t cols, uint32_t seed) {
  const int64_t bytes = formats::ggml_nbytes(type, rows * cols);
  std::vector<uint8_t> data(static_cast<size_t>(bytes));
  std::mt19937 rng(seed);
  for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
  const int64_t block_bytes = type == formats::GgmlType::kQ8_0 ? 34 : type == formats::GgmlType::kQ4_1 ? 20 : 18;
  const int halves = type == formats::GgmlType::kQ4_1 ? 2 : 1;
  for (int64_t b = 0; b < bytes / block_bytes; ++b) {
    for (int h = 0; h < halves; ++h) {
      const c10::Half v(std::uniform_real_distribution<float>(-0.05f, 0.05f)(rng));
      std::memcpy(&data[static_cast<size_t>(b * block_bytes + 2 * h)], &v.x, 2);
    }
  }
  return data;
}

// Kept blocks dequantise bit for bit to what formats' reference dequantiser gives: Q4_1 and
// Q8_0 compute the same d·q + m in float32; for Q4_0, d·q and -8d are exact products of a
// half and a small integer, and their sum (q - 8)·d is exact too, as ggml's is.
TEST(ModelWeights, GgufBlocksKeptQuantisedDequantiseLikeGgml) {
  for (formats::GgmlType type : {formats::GgmlType::kQ4_0, formats::GgmlType::kQ4_1, formats::GgmlType::kQ8_0}) {
    const int64_t rows = 3, cols = 96;
    std::vector<uint8_t> data = random_blocks(type, rows, cols, 7);
    formats::GgufTensorInfo info;
    info.name = "t";
    info.dims = {cols, rows};
    info.type_id = static_cast<uint32_t>(type);
    info.num_elements = rows * cols;
    info.num_bytes = static_cast<int64_t>(data.size());
    info.data = data.data();
    const at::Tensor got = quant_matrix_from_gguf(info).dequantize();
    at::Tensor ref = at::empty({rows, cols});
    formats::dequantize_to_f32(type, data.data(), ref.data_ptr<float>(), rows * cols);
    EXPECT_TRUE(at::equal(got, ref)) << formats::ggml_type_name(static_cast<uint32_t>(type));
  }
  formats::GgufTensorInfo f32;
  f32.type_id = static_cast<uint32_t>(formats::GgmlType::kF32);
  EXPECT_FALSE(quant_matrix_from_gguf(f32).defined());  // float tensors are not blocks
}

// The real file: every projection's blocks (Q/K rows un-permuted, q|k|v and gate|up stacked)
// and the Q8_0 embedding dequantise exactly to the float32 load of the same file.
TEST(ModelWeights, NativeWeightsOfTheRealModelEqualItsFloat32Load) {
  const std::string path = lorakv::testing::test_setting("LORAKV_MODEL");
  ASSERT_FALSE(path.empty()) << "LORAKV_MODEL is not set: run through ctest";
  auto file = formats::GgufFile::open(path);
  const auto native = LlamaModel::from_gguf(*file, at::kFloat, WeightForm::kNative);
  const auto dense = LlamaModel::from_gguf(*file, at::kFloat, WeightForm::kFloat32);
  EXPECT_LT(native->weights().num_bytes * 5, dense->weights().num_bytes);
  EXPECT_TRUE(at::equal(native->weights().embed_tokens.quant.dequantize(), dense->weights().embed_tokens.dense));
  for (size_t l = 0; l < native->weights().layers.size(); ++l) {
    const LayerWeights& q = native->weights().layers[l];
    const LayerWeights& d = dense->weights().layers[l];
    ASSERT_TRUE(q.qkv.quant.defined() && q.gate_up.quant.defined() && !q.q_proj.defined()) << l;
    EXPECT_TRUE(at::equal(q.qkv.quant.dequantize(), d.qkv.dense)) << "layer " << l;
    EXPECT_TRUE(at::equal(q.o.quant.dequantize(), d.o_proj)) << "layer " << l;
    EXPECT_TRUE(at::equal(q.gate_up.quant.dequantize(), d.gate_up.dense)) << "layer " << l;
    EXPECT_TRUE(at::equal(q.down.quant.dequantize(), d.down_proj)) << "layer " << l;
  }
}

}  // namespace
}  // namespace lorakv::runtime
