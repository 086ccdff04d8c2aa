// tests/kernels/quant_dot_test.cpp: the integer form of the quantised GEMV (int8 activations,
// integer block dot products; kernels/cpu/quant_gemv.h) and the kQ4 pair order it reads.
//
// What each test holds, and why that tolerance:
//   - The activation quantiser against its rule (d = max|x| / 127, codes within half a step).
//   - Every integer kernel this CPU has (scalar, avx2, avx2 + AVX-VNNI, avx512, avx512 + VNNI)
//     EXACTLY equal to a float64 product of the dequantised operands, on dyadic inputs: power
//     of two scales and activations on the code grid make every product and partial sum
//     exact in float32 (all multiples of 2^-7 below 2^17), so any summation order gives the
//     same bits and any integer slip (a nibble, a sign, a block sum, a scale index, the min
//     term) shows as inequality.
//   - On random weights of realistic strength, each kernel against the scalar kernel within
//     float32 summation rounding ((cols + 4) · 2^-24 · Σ|terms|, as quant_matrix_test.cpp).
//   - QuantMatrix::linear with int8 activations against the float32 form within the bound
//     the activations' rounding allows: |Σ_j w_j (x_j - x̂_j)| <= Σ_b (d_xb / 2) Σ_j |w_bj|,
//     plus the float32 summation bound; and not equal to it (the rows really are int8).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
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

// One integer kernel and whether this CPU runs it (else: why not).
struct DotForm {
  const char* name;
  cpu::QuantDotFn fn;
  features::VectorPath path;
  bool vnni;
};

const DotForm kForms[] = {
    {"scalar", cpu::scalar::quant_dot_gemv, features::VectorPath::kScalar, false},
    {"avx2", cpu::avx2::quant_dot_gemv, features::VectorPath::kAvx2, false},
    {"avxvnni", cpu::avxvnni::quant_dot_gemv, features::VectorPath::kAvx2, true},
    {"avx512", cpu::avx512::quant_dot_gemv, features::VectorPath::kAvx512, false},
    {"avx512vnni", cpu::avx512vnni::quant_dot_gemv, features::VectorPath::kAvx512, true},
};

// Test names and CTest's listing show the form's name, not its bytes.
void PrintTo(const DotForm& f, std::ostream* out) { *out << f.name; }

// "" when this CPU runs `f`, else what it lacks.
std::string missing_for(const DotForm& f) {
  const features::CpuFeatures& cpu = features::detected_cpu_features();
  if (!features::supports(cpu, f.path)) return std::string("the ") + features::vector_path_name(f.path) + " path";
  if (f.vnni && !features::has_vnni(cpu, f.path)) {
    return f.path == features::VectorPath::kAvx512 ? "AVX-512 VNNI" : "AVX-VNNI";
  }
  return "";
}

// int8 activations of x float32 [m, cols], owning their buffers.
struct Activations {
  at::Tensor codes;  // int8 [m, cols]
  at::Tensor scales;  // float32 [m, cols / 32]
  at::Tensor sums;    // float32 [m, cols / 32]
  explicit Activations(const at::Tensor& x) {
    const int64_t m = x.size(0), cols = x.size(1);
    codes = at::empty({m, cols}, at::kChar);
    scales = at::empty({m, cols / kQuantBlock}, at::kFloat);
    sums = at::empty({m, cols / kQuantBlock}, at::kFloat);
    const at::Tensor xc = x.contiguous();
    cpu::quantize_activations(xc.data_ptr<float>(), m, cols, cols, codes.data_ptr<int8_t>(), scales.data_ptr<float>(),
                              sums.data_ptr<float>());
  }
  cpu::QuantizedActivations view() const {
    return {codes.data_ptr<int8_t>(), scales.data_ptr<float>(), sums.data_ptr<float>(), codes.size(0), codes.size(1)};
  }
  // x as the kernels see it: d · code, float64 [m, cols].
  at::Tensor dequantized() const {
    const int64_t m = codes.size(0), nb = scales.size(1);
    return (codes.to(at::kDouble).view({m, nb, kQuantBlock}) * scales.to(at::kDouble).unsqueeze(2)).view({m, -1});
  }
};

// y float32 [x.m, w.rows] from one kernel, rows split in two calls (as the parallel loop
// splits them) at an odd row, so the row tiles meet a ragged edge.
at::Tensor run_form(const DotForm& f, const QuantMatrix& w, const Activations& x) {
  at::Tensor y = at::full({x.codes.size(0), w.rows()}, std::nanf(""), at::kFloat);
  const cpu::QuantDotArgs args{w.view(), x.view(), y.data_ptr<float>(), w.rows()};
  const int64_t split = w.rows() / 2 | 1;
  f.fn(args, 0, split);
  f.fn(args, split, w.rows());
  return y;
}

// A matrix whose every value is dyadic: scales 2^-5 or 2^-4 per block, kQ4 mins -8·d (GGUF's
// Q4_0) or +4·d; codes uniform over the whole range (kQ8: -128..127, so the extreme code
// maddubs must not saturate on is there).
QuantMatrix dyadic_matrix(QuantFormat f, int64_t rows, int64_t cols, uint64_t seed) {
  at::manual_seed(seed);
  const int64_t nb = cols / kQuantBlock;
  const at::Tensor d = at::pow(2.0, -4.0 - at::randint(0, 2, {rows, nb}).to(at::kDouble)).to(at::kHalf);
  if (f == QuantFormat::kQ8) {
    return QuantMatrix(f, at::randint(-128, 128, {rows, cols}).to(at::kChar), d.view(at::kShort), {});
  }
  const at::Tensor m = (d.to(at::kFloat) * at::where(at::randint(0, 2, {rows, nb}) > 0, -8.0, 4.0)).to(at::kHalf);
  return QuantMatrix(f, at::randint(0, 256, {rows, cols / 2}).to(at::kByte), d.view(at::kShort), m.view(at::kShort));
}

// Activations on the quantiser's grid: per block d_x = 2^-1 or 2^-2, codes in -127..127 with
// one element at ±127 (so max|x| / 127 is d_x exactly and every code is recovered exactly).
at::Tensor dyadic_activations(int64_t m, int64_t cols, uint64_t seed) {
  at::manual_seed(seed);
  const int64_t nb = cols / kQuantBlock;
  at::Tensor q = at::randint(-126, 127, {m, nb, kQuantBlock}).to(at::kFloat);
  q.select(2, 5).copy_(at::where(at::randint(0, 2, {m, nb}) > 0, 127.0, -127.0));
  const at::Tensor dx = at::pow(2.0, -1.0 - at::randint(0, 2, {m, nb, 1}).to(at::kFloat));
  return (q * dx).view({m, cols});
}

TEST(QuantDot, ActivationQuantisationFollowsItsRule) {
  at::manual_seed(11);
  at::Tensor x = at::randn({3, 96}) * at::rand({3, 1}).add(0.01);
  x.narrow(1, 32, 32).select(0, 1).zero_();  // an all-zero block: d = 0, codes 0
  const Activations a(x);
  const at::Tensor blocks = x.view({3, 3, 32}).to(at::kDouble);
  const at::Tensor d = a.scales.to(at::kDouble).unsqueeze(2);
  EXPECT_TRUE(at::allclose(d.squeeze(2), blocks.abs().amax(2) / 127, 1e-7, 0));
  const at::Tensor codes = a.codes.to(at::kDouble).view({3, 3, 32});
  EXPECT_LE(codes.abs().max().item<double>(), 127);
  // Each element within half a step (and a float32 rounding of x · 127 / max|x|).
  const at::Tensor err = (codes * d - blocks).abs();
  EXPECT_TRUE((err <= d * (0.5 + 1e-6)).all().item<bool>()) << "max error " << (err / (d + 1e-30)).max().item<double>();
  // The block's largest element is ±127 exactly; the sums are d · Σ codes.
  EXPECT_TRUE((codes.abs().amax(2) == 127).view({-1}).narrow(0, 0, 4).all().item<bool>());
  EXPECT_EQ(codes.abs().amax(2)[1][1].item<double>(), 0);
  EXPECT_TRUE(at::allclose(a.sums.to(at::kDouble), d.squeeze(2) * codes.sum(2), 1e-6, 1e-12));
  // A hand-written block: max 2.54 -> d = 0.02, so -1 -> -50 and 0.3 -> 15; Σ codes = 92.
  at::Tensor hand = at::zeros({1, 32});
  hand[0][0] = 2.54f;
  hand[0][1] = -1.0f;
  hand[0][2] = 0.3f;
  const Activations h(hand);
  EXPECT_EQ(h.codes[0][0].item<int>(), 127);
  EXPECT_EQ(h.codes[0][1].item<int>(), -50);
  EXPECT_EQ(h.codes[0][2].item<int>(), 15);
  EXPECT_EQ(h.codes[0][3].item<int>(), 0);
  EXPECT_FLOAT_EQ(h.scales[0][0].item<float>(), 0.02f);
  EXPECT_FLOAT_EQ(h.sums[0][0].item<float>(), 0.02f * 92);
}

// The kQ4 pair order against GGUF's, on hand-written codes: two paired blocks and an
// unpaired third, read back element by element through q4_code and the dequantiser.
TEST(QuantDot, Q4CodesAreRepackedInPairOrder) {
  at::Tensor gguf = at::empty({1, 48}, at::kByte);  // 3 blocks: byte j = element j (low), j + 16 (high)
  for (int b = 0; b < 3; ++b) {
    for (int j = 0; j < 16; ++j) gguf[0][b * 16 + j] = static_cast<int>((j + b) % 16 | ((15 - j + 2 * b) % 16) << 4);
  }
  const at::Tensor ones = at::ones({1, 3}, at::kHalf).view(at::kShort), zeros = at::zeros({1, 3}, at::kHalf).view(at::kShort);
  const QuantMatrix w(QuantFormat::kQ4, gguf, ones, zeros);
  const QuantMatrixView v = w.view();
  const at::Tensor deq = w.dequantize();
  for (int b = 0; b < 3; ++b) {
    for (int j = 0; j < 32; ++j) {
      const int expected = j < 16 ? (j + b) % 16 : (15 - (j - 16) + 2 * b) % 16;
      EXPECT_EQ(q4_code(v, v.codes, b, j), expected) << "block " << b << " element " << j;
      EXPECT_EQ(deq[0][b * 32 + j].item<float>(), expected) << "block " << b << " element " << j;
    }
  }
  // Pair order itself: byte 20 holds element 20 of block 0 (low) and of block 1 (high).
  EXPECT_EQ(v.codes[20], ((15 - 4) % 16) | (((15 - 4 + 2) % 16) << 4));
  EXPECT_EQ(w.nbytes(), 48 + 3 * 2 + 3 * 2);  // the repacked codes replace GGUF's, same bytes
}

class QuantDotForms : public ::testing::TestWithParam<DotForm> {
 protected:
  void SetUp() override {
    const std::string missing = missing_for(GetParam());
    if (!missing.empty()) GTEST_SKIP() << GetParam().name << ": this CPU lacks " << missing;
  }
};

// Exact equality with a float64 product on dyadic inputs (see the top of the file), for M =
// 1..16 x rows, 10 and 7 blocks per row (an unpaired last block), 13 weight rows (ragged tiles).
TEST_P(QuantDotForms, EqualsTheFloat64ProductOnDyadicInputs) {
  for (QuantFormat f : {QuantFormat::kQ4, QuantFormat::kQ8}) {
    for (int64_t cols : {320, 224}) {
      const QuantMatrix w = dyadic_matrix(f, 13, cols, 100 + cols);
      const at::Tensor wd = w.dequantize().to(at::kDouble);
      for (int64_t m : {1, 2, 3, 4, 5, 7, 8, 9, 16}) {
        const at::Tensor x = dyadic_activations(m, cols, 7 * m + cols);
        const Activations a(x);
        ASSERT_TRUE(at::equal(a.dequantized(), x.to(at::kDouble))) << "the inputs are not on the code grid";
        const at::Tensor expected = at::matmul(x.to(at::kDouble), wd.t()).to(at::kFloat);
        const at::Tensor y = run_form(GetParam(), w, a);
        EXPECT_TRUE(at::equal(y, expected)) << GetParam().name << " " << quant_format_name(f) << " cols " << cols
                                            << " M " << m << ": max difference "
                                            << (y - expected).abs().max().item<float>();
      }
    }
  }
}

// Random weights of realistic strength: the kernel against the scalar kernel within float32
// summation rounding (the integer sums are identical; only the order of float additions differs).
TEST_P(QuantDotForms, MatchesTheScalarKernelOnRandomWeights) {
  for (QuantFormat f : {QuantFormat::kQ4, QuantFormat::kQ8}) {
    at::manual_seed(21);
    const QuantMatrix w = QuantMatrix::quantize(at::randn({40, 352}) * 0.05, f);  // 11 blocks
    const at::Tensor wd = w.dequantize().to(at::kDouble);
    for (int64_t m : {1, 6, 16}) {
      const Activations a(at::randn({m, 352}));
      const at::Tensor expected = run_form(kForms[0], w, a);
      const at::Tensor bound = at::matmul(a.dequantized().abs(), wd.abs().t()) * ((352 + 4) * kUnit) + 1e-30;
      const at::Tensor excess = (run_form(GetParam(), w, a).to(at::kDouble) - expected).abs() / bound;
      EXPECT_LE(excess.max().item<double>(), 1.0) << GetParam().name << " " << quant_format_name(f) << " M " << m;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryForm, QuantDotForms, ::testing::ValuesIn(kForms),
                         [](const ::testing::TestParamInfo<DotForm>& i) { return std::string(i.param.name); });

// Through QuantMatrix::linear on every path here: int8 activations differ from the float32
// form by no more than their rounding allows, and do differ.
TEST(QuantDot, Int8LinearIsWithinTheActivationRoundingOfFloat32) {
  const std::vector<features::VectorPath> paths = features::supported_vector_paths(features::detected_cpu_features());
  for (QuantFormat f : {QuantFormat::kQ4, QuantFormat::kQ8}) {
    at::manual_seed(31);
    const QuantMatrix w = QuantMatrix::quantize(at::randn({72, 288}) * 0.05 + 0.01, f);  // 9 blocks
    const at::Tensor wabs = w.dequantize().abs().to(at::kDouble).view({72, 9, 32}).sum(2);  // Σ_j |w_bj| [rows, nb]
    for (int64_t m : {1, 3, 16}) {
      const at::Tensor wide = at::randn({m, 300});
      const at::Tensor x = wide.narrow(1, 5, 288);  // strided rows
      const at::Tensor half_step = Activations(x).scales.to(at::kDouble) / 2;  // [m, nb]
      const at::Tensor bound = at::matmul(half_step, wabs.t()) +
                               at::matmul(x.abs().to(at::kDouble), w.dequantize().abs().to(at::kDouble).t()) *
                                   ((288 + 4) * kUnit * 2);
      for (features::VectorPath p : paths) {
        const at::Tensor yf = w.linear(x, p, QuantActivations::kFloat32);
        const at::Tensor yi = w.linear(x, p, QuantActivations::kInt8);
        const at::Tensor diff = (yi - yf).abs().to(at::kDouble);
        const std::string what = std::string(quant_format_name(f)) + " M " + std::to_string(m) + " " +
                                 features::vector_path_name(p);
        EXPECT_LE((diff / bound).max().item<double>(), 1.0) << what;
        EXPECT_GT(diff.max().item<double>(), 0) << what << ": int8 activations gave the float32 result";
      }
    }
  }
}

// bfloat16 activations and prefill (more rows than the direct kernels take) stay in float32.
TEST(QuantDot, Bfloat16AndManyRowsKeepTheFloat32Form) {
  at::manual_seed(41);
  const QuantMatrix w = QuantMatrix::quantize(at::randn({24, 64}) * 0.05, QuantFormat::kQ4);
  const features::VectorPath p = features::best_vector_path(features::detected_cpu_features());
  const at::Tensor xb = at::randn({2, 64}).to(at::kBFloat16);
  EXPECT_TRUE(at::equal(w.linear(xb, p, QuantActivations::kInt8), w.linear(xb, p, QuantActivations::kFloat32)));
  const at::Tensor many = at::randn({QuantMatrix::kDirectMaxRows + 1, 64});
  EXPECT_TRUE(at::equal(w.linear(many, p, QuantActivations::kInt8), w.linear(many, p, QuantActivations::kFloat32)));
}

TEST(QuantDot, ActivationFormNames) {
  EXPECT_EQ(parse_quant_activations("int8"), QuantActivations::kInt8);
  EXPECT_EQ(parse_quant_activations("float32"), QuantActivations::kFloat32);
  EXPECT_EQ(parse_quant_activations(""), kDefaultQuantActivations);
  EXPECT_STREQ(quant_activations_name(QuantActivations::kInt8), "int8");
  try {
    parse_quant_activations("int4");
    ADD_FAILURE() << "int4 accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(kQuantActivationsVariable), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lorakv::kernels
