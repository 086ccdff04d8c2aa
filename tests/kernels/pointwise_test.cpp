// tests/kernels/pointwise_test.cpp: the one-pass RMSNorm and in-place RoPE against their ATen
// formulations (transformers' arithmetic), in float32 and bfloat16.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "lorakv/common/errors.h"
#include "lorakv/kernels/attention.h"
#include "lorakv/kernels/rope.h"

namespace lorakv::kernels {
namespace {

// The only difference from the reference is the order of the float32 sum of squares (ATen
// reduces in vector lanes): relative 2^-24 per term on the mean, so the normalised values
// agree to a few float32 ulps; in bfloat16 the result is then rounded to 8 bits, where such
// a difference flips at most a rounding: one bfloat16 ulp (2^-8 relative).
TEST(RmsNorm, OnePassEqualsTheAtenFormula) {
  at::manual_seed(3);
  const at::Tensor x = at::randn({5, 576}) * 3, w = at::randn({576});
  const at::Tensor got = rms_norm(x, w, 1e-5), ref = rms_norm_reference(x, w, 1e-5);
  EXPECT_LE((got - ref).abs().max().item<float>(), 1e-6f * ref.abs().max().item<float>());
  const at::Tensor xb = x.to(at::kBFloat16), wb = w.to(at::kBFloat16);
  const at::Tensor gb = rms_norm(xb, wb, 1e-5).to(at::kFloat), rb = rms_norm_reference(xb, wb, 1e-5).to(at::kFloat);
  EXPECT_TRUE(((gb - rb).abs() <= rb.abs() / 128 + 1e-6).all().item<bool>());
  // Sensitive: another eps or a missing weight is caught.
  EXPECT_GT((rms_norm(x, w, 1e-1) - ref).abs().max().item<float>(), 1e-4f);
  EXPECT_THROW(rms_norm(x, at::randn({575}), 1e-5), InvalidArgumentError);
}

// Same operations in the same order as apply_rope, so the results are identical bit for bit.
TEST(Rope, InPlaceEqualsApplyRopeExactly) {
  at::manual_seed(4);
  const at::Tensor positions = at::tensor(std::vector<int64_t>{0, 7, 100, 4095}, at::kLong);
  auto [cos, sin] = rope_cos_sin(positions, rope_inv_freq(64, 100000.0));
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    // A q|k|v-like buffer: rotate the 3 "k" heads in the middle, in place.
    const at::Tensor qkv = at::randn({4, 15 * 64}).to(dtype);
    const at::Tensor before = qkv.clone();
    const at::Tensor k = qkv.narrow(1, 9 * 64, 3 * 64).view({4, 3, 64});
    const at::Tensor expected = apply_rope(k.clone(), cos, sin);
    apply_rope_(k, cos, sin);
    EXPECT_TRUE(at::equal(k, expected)) << c10::toString(dtype);
    // Nothing outside the view moved.
    EXPECT_TRUE(at::equal(qkv.narrow(1, 0, 9 * 64), before.narrow(1, 0, 9 * 64)));
    EXPECT_TRUE(at::equal(qkv.narrow(1, 12 * 64, 3 * 64), before.narrow(1, 12 * 64, 3 * 64)));
  }
  const at::Tensor x = at::randn({4, 2, 64});
  EXPECT_THROW(apply_rope_(x, cos.narrow(0, 0, 3), sin.narrow(0, 0, 3)), InvalidArgumentError);
  EXPECT_THROW(apply_rope_(x.transpose(1, 2), cos, sin), InvalidArgumentError);  // D not unit stride
}

}  // namespace
}  // namespace lorakv::kernels
