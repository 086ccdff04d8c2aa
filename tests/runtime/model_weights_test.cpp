// tests/runtime/model_weights_test.cpp: the Q/K un-permutation against llama.cpp's forward
// permutation (written here from convert_hf_to_gguf.py's LlamaModel.permute), and the
// architecture rule.
#include <gtest/gtest.h>

#include "runtime/model_config.h"
#include "runtime/model_weights.h"

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

}  // namespace
}  // namespace lorakv::runtime
