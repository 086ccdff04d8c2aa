// tests/kernels/quant_matrix_test.cpp: the block-quantised matrix and its GEMV on every
// vector path this CPU has, against ATen references computed in float64.
//
// Tolerance of linear(): each output is a float32 sum over `cols` products (per block: 32
// products, a scale, then the block sums and the min term). Rounding error of a float32 sum
// of n terms is at most about n·u·Σ|terms| (u = 2^-24); the reference is float64, so the
// bound used is (cols + 4)·u·Σ_j |w_j·x_j| (+ |m|·Σ|x| terms for q4). Any wrong code, scale,
// nibble order or missing min term changes outputs by a sizeable fraction of Σ|w·x|, far
// above it.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "lorakv/common/cpu_features.h"
#include "lorakv/common/errors.h"
#include "lorakv/kernels/cpu/quant_gemv.h"
#include "lorakv/kernels/quant_matrix.h"

namespace lorakv::kernels {

namespace features = ::lorakv::cpu;
namespace {

constexpr double kUnit = 1.0 / (1 << 24);  // float32 unit roundoff

std::vector<features::VectorPath> paths_here() {
  std::vector<features::VectorPath> paths = features::supported_vector_paths(features::detected_cpu_features());
  std::string names;
  for (features::VectorPath p : paths) names += std::string(" ") + features::vector_path_name(p);
  ::testing::Test::RecordProperty("vector_paths", names);
  return paths;
}

at::Tensor random_weights(int64_t rows, int64_t cols, uint64_t seed) {
  at::manual_seed(seed);
  // Per-row scales of different size and an offset, so blocks have varied d and m.
  return at::randn({rows, cols}, at::kFloat) * at::rand({rows, 1}, at::kFloat).add(0.1) + 0.05;
}

// Expects y (float32 [M, rows]) to equal x · deq^T within the float32 summation bound.
void expect_matches_reference(const at::Tensor& y, const at::Tensor& x, const QuantMatrix& w, const std::string& what) {
  const at::Tensor xd = x.to(at::kDouble), wd = w.dequantize().to(at::kDouble);
  const at::Tensor ref = at::matmul(xd, wd.t());
  const at::Tensor magnitude = at::matmul(xd.abs(), wd.abs().t());  // Σ |x_j w_j|
  const at::Tensor bound = magnitude * ((w.cols() + 4) * kUnit) + 1e-30;
  const at::Tensor excess = (y.to(at::kDouble) - ref).abs() / bound;
  EXPECT_LE(excess.max().item<double>(), 1.0) << what << ": error above the float32 summation bound";
}

TEST(QuantMatrix, HalfConversionIsExactForEveryBitPattern) {
  at::Tensor bits = at::arange(0, 65536, at::kInt).to(at::kShort);  // every pattern (wraps to int16)
  const at::Tensor ref = bits.view(at::kHalf).to(at::kFloat);
  const int16_t* b = bits.data_ptr<int16_t>();
  const float* r = ref.data_ptr<float>();
  int64_t wrong = 0;
  for (int64_t i = 0; i < 65536; ++i) {
    const float f = cpu::half_bits_to_float(static_cast<uint16_t>(b[i]));
    if (std::isnan(r[i]) ? !std::isnan(f) : f != r[i] || std::signbit(f) != std::signbit(r[i])) ++wrong;
  }
  EXPECT_EQ(wrong, 0);
}

// One block written by hand: codes 0..15 (low) and 15..0 (high), d = 0.5, m = -1.
TEST(QuantMatrix, DequantisesAHandWrittenQ4Block) {
  at::Tensor codes = at::empty({1, 16}, at::kByte);
  for (int j = 0; j < 16; ++j) codes[0][j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const at::Tensor d = at::full({1, 1}, 0.5, at::kHalf).view(at::kShort);
  const at::Tensor m = at::full({1, 1}, -1.0, at::kHalf).view(at::kShort);
  const QuantMatrix w(QuantFormat::kQ4, codes, d, m);
  const at::Tensor got = w.dequantize();
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(got[0][j].item<float>(), 0.5f * j - 1.0f) << j;
    EXPECT_EQ(got[0][16 + j].item<float>(), 0.5f * (15 - j) - 1.0f) << j;
  }
}

TEST(QuantMatrix, DequantisesAHandWrittenQ8Block) {
  at::Tensor codes = at::empty({1, 32}, at::kChar);
  for (int j = 0; j < 32; ++j) codes[0][j] = static_cast<int8_t>(j * 8 - 128);
  const QuantMatrix w(QuantFormat::kQ8, codes, at::full({1, 1}, 0.25, at::kHalf).view(at::kShort), {});
  const at::Tensor got = w.dequantize();
  for (int j = 0; j < 32; ++j) EXPECT_EQ(got[0][j].item<float>(), 0.25f * static_cast<float>(j * 8 - 128)) << j;
}

// Round to nearest code: each element is within half a step (d/2) of its original, plus
// the rounding of d and m to half precision.
TEST(QuantMatrix, QuantisationErrorIsWithinHalfAStep) {
  const at::Tensor w = random_weights(64, 256, 1);
  for (QuantFormat f : {QuantFormat::kQ4, QuantFormat::kQ8}) {
    const QuantMatrix q = QuantMatrix::quantize(w, f);
    const at::Tensor blocks = w.view({64, 8, 32});
    const at::Tensor range = f == QuantFormat::kQ4
                                 ? std::get<0>(blocks.max(2, true)) - std::get<0>(blocks.min(2, true))
                                 : std::get<0>(blocks.abs().max(2, true)) * 2;
    const at::Tensor step = range / (f == QuantFormat::kQ4 ? 15.0 : 254.0);
    // d's half rounding (2^-11 relative) moves the top code by up to 15·2^-11·step; m's by 2^-11·|m|.
    const at::Tensor slack = step * (0.5 + 16.0 / 2048) + blocks.abs().amax(2, true) / 1024 + 1e-6;
    const at::Tensor err = (q.dequantize().view({64, 8, 32}) - blocks).abs();
    EXPECT_TRUE((err <= slack).all().item<bool>()) << quant_format_name(f) << " max error " << err.max().item<float>();
  }
}

TEST(QuantMatrix, LinearMatchesTheDequantisedProductOnEveryPath) {
  for (QuantFormat f : {QuantFormat::kQ4, QuantFormat::kQ8}) {
    // 136 rows: not a multiple of any work item size; 320 columns: 10 blocks, a tail after
    // 8 (AVX-512's min-term loop) and after 16; 352: 11 blocks, the last one unpaired (kQ4's
    // pair order, kernels/quant_view.h).
    for (int64_t cols : {320, 352}) {
      const QuantMatrix w = QuantMatrix::quantize(random_weights(136, cols, 2), f);
      for (int64_t m : {1, 2, 3, 4, 5, 8, 13, 16, 17, 40}) {
        const at::Tensor x = at::randn({m, cols}, at::kFloat);
        for (features::VectorPath p : paths_here()) {
          expect_matches_reference(w.linear(x, p), x, w,
                                   std::string(quant_format_name(f)) + " cols=" + std::to_string(cols) +
                                       " M=" + std::to_string(m) + " " + features::vector_path_name(p));
        }
      }
    }
  }
}

// More weight rows than one dequantised panel holds: the GEMM path runs panel by panel.
TEST(QuantMatrix, ManyRowsRunInPanels) {
  const QuantMatrix w = QuantMatrix::quantize(random_weights(QuantMatrix::kPanelRows + 40, 64, 8), QuantFormat::kQ4);
  const at::Tensor x = at::randn({QuantMatrix::kDirectMaxRows + 4, 64});
  expect_matches_reference(w.linear(x), x, w, "panels");
}

TEST(QuantMatrix, LinearReadsStridedAndBfloat16Inputs) {
  const QuantMatrix w = QuantMatrix::quantize(random_weights(48, 64, 3), QuantFormat::kQ4);
  const at::Tensor wide = at::randn({3, 100}, at::kFloat);
  const at::Tensor x = wide.narrow(1, 7, 64);  // rows 100 floats apart
  for (features::VectorPath p : paths_here()) {
    expect_matches_reference(w.linear(x, p), x.contiguous(), w, std::string("strided ") + features::vector_path_name(p));
    // bfloat16 in, bfloat16 out: the float32 result rounded once (2^-9 relative).
    const at::Tensor xb = x.to(at::kBFloat16);
    const at::Tensor yb = w.linear(xb, p);
    ASSERT_EQ(yb.scalar_type(), at::kBFloat16);
    const at::Tensor ref = at::matmul(xb.to(at::kDouble), w.dequantize().to(at::kDouble).t());
    const at::Tensor tol = ref.abs() / 256 + at::matmul(xb.to(at::kDouble).abs(), w.dequantize().abs().to(at::kDouble).t()) * 1e-5;
    EXPECT_TRUE(((yb.to(at::kDouble) - ref).abs() <= tol).all().item<bool>()) << features::vector_path_name(p);
  }
}

TEST(QuantMatrix, RowSelectionAndStackingAreExact) {
  const QuantMatrix a = QuantMatrix::quantize(random_weights(8, 64, 4), QuantFormat::kQ4);
  const QuantMatrix b = QuantMatrix::quantize(random_weights(5, 64, 5), QuantFormat::kQ4);
  const at::Tensor order = at::tensor(std::vector<int64_t>{7, 0, 3, 3}, at::kLong);
  EXPECT_TRUE(at::equal(a.select_rows(order).dequantize(), a.dequantize().index_select(0, order)));
  EXPECT_TRUE(at::equal(a.dequantize_rows(order), a.dequantize().index_select(0, order)));
  const QuantMatrix ab = QuantMatrix::stack_rows({&a, &b});
  EXPECT_EQ(ab.rows(), 13);
  EXPECT_TRUE(at::equal(ab.dequantize(), at::cat({a.dequantize(), b.dequantize()}, 0)));
  EXPECT_EQ(ab.nbytes(), a.nbytes() + b.nbytes());
  EXPECT_EQ(a.nbytes(), 8 * (32 + 2 * 2 * 2));  // 64 nibbles + two half scales per block, 2 blocks
}

TEST(QuantMatrix, RefusesBadInput) {
  const QuantMatrix w = QuantMatrix::quantize(random_weights(8, 64, 6), QuantFormat::kQ8);
  EXPECT_THROW(w.linear(at::randn({2, 32})), InvalidArgumentError);                 // wrong width
  EXPECT_THROW(w.linear(at::randn({2, 64}, at::kDouble)), InvalidArgumentError);    // dtype
  EXPECT_THROW(w.linear(at::randn({64})), InvalidArgumentError);                    // not 2-D
  EXPECT_THROW(w.dequantize_rows(at::tensor(std::vector<int64_t>{8}, at::kLong)), InvalidArgumentError);
  EXPECT_THROW(QuantMatrix::quantize(at::randn({4, 40}), QuantFormat::kQ4), InvalidArgumentError);
  EXPECT_THROW(QuantMatrix(QuantFormat::kQ4, at::zeros({2, 16}, at::kByte), at::zeros({2, 2}, at::kShort),
                           at::zeros({2, 1}, at::kShort)),
               InvalidArgumentError);  // scales of the wrong shape
  EXPECT_THROW(QuantMatrix(QuantFormat::kQ4, at::zeros({2, 16}, at::kByte), at::zeros({2, 1}, at::kShort), {}),
               InvalidArgumentError);  // q4 without mins
  const QuantMatrix q4 = QuantMatrix::quantize(random_weights(2, 32, 7), QuantFormat::kQ4);
  EXPECT_THROW(QuantMatrix::stack_rows({&w, &q4}), InvalidArgumentError);
  for (features::VectorPath p : {features::VectorPath::kAvx2, features::VectorPath::kAvx512}) {
    if (!features::supports(features::detected_cpu_features(), p)) {
      EXPECT_THROW(w.linear(at::randn({1, 64}), p), InvalidArgumentError);
    }
  }
}

}  // namespace
}  // namespace lorakv::kernels
